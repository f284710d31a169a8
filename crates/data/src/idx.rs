//! MNIST IDX files (raw or gzip-compressed): reading, validation and writing.

use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use crate::DataError;

/// Magic number of an IDX file of unsigned bytes with 3 dimensions (images).
pub const IDX3_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with 1 dimension (labels).
pub const IDX1_MAGIC: u32 = 0x0000_0801;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Opens a file for reading, transparently decompressing gzip (detected by its magic bytes,
/// whatever the file is called).
pub(crate) fn open(path: &Path) -> Result<Box<dyn Read>, DataError> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut head = [0u8; 2];
    let got = read_full(&mut reader, &mut head).map_err(|e| DataError::io(path, e))?;
    let prefix = std::io::Cursor::new(head[..got].to_vec());
    let chained = prefix.chain(reader);
    if got == 2 && head == GZIP_MAGIC { Ok(Box::new(GzDecoder::new(chained))) } else { Ok(Box::new(chained)) }
}

/// Reads until `buf` is full or the input ends; returns the number of bytes read.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(k) => filled += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Maps a read error to a `DataError`: corrupt gzip streams become `Malformed`.
fn read_error(path: &Path, e: std::io::Error) -> DataError {
    match e.kind() {
        ErrorKind::InvalidData | ErrorKind::InvalidInput => {
            DataError::malformed(path, format!("invalid gzip data: {e}"))
        }
        ErrorKind::UnexpectedEof => DataError::truncated(path, format!("compressed stream ends early: {e}")),
        _ => DataError::io(path, e),
    }
}

/// The content of an IDX file of unsigned bytes.
pub(crate) struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// Reads an IDX file whose magic must be `magic` (unsigned bytes, `ndims` dimensions).
pub(crate) fn read_idx(path: &Path, magic: u32, what: &'static str) -> Result<Idx, DataError> {
    let mut r = open(path)?;
    let mut head = [0u8; 4];
    let got = read_full(&mut r, &mut head).map_err(|e| read_error(path, e))?;
    if got < 4 {
        return Err(DataError::truncated(path, format!("{got} bytes, too short for the 4-byte IDX magic number")));
    }
    let found = u32::from_be_bytes(head);
    if found != magic {
        return Err(DataError::BadMagic { path: path.to_path_buf(), found, expected: magic, what });
    }
    let ndims = (magic & 0xff) as usize;
    let mut raw_dims = vec![0u8; 4 * ndims];
    let got = read_full(&mut r, &mut raw_dims).map_err(|e| read_error(path, e))?;
    if got < raw_dims.len() {
        return Err(DataError::truncated(
            path,
            format!(
                "header ends after {} bytes, expected {} (magic + {ndims} dimensions)",
                4 + got,
                4 + raw_dims.len()
            ),
        ));
    }
    let dims: Vec<usize> =
        raw_dims.chunks_exact(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize).collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| DataError::malformed(path, format!("dimensions {dims:?} overflow")))?;
    let header = 4 + raw_dims.len();
    // Never trust the header for the allocation: start small and let the data grow the buffer.
    let mut data = Vec::with_capacity(expected.min(1 << 26));
    let got = (&mut r).take(expected as u64).read_to_end(&mut data).map_err(|e| read_error(path, e))?;
    if got < expected {
        return Err(DataError::truncated(
            path,
            format!(
                "header {dims:?} promises {expected} data bytes after the {header}-byte header, \
                 found only {got}"
            ),
        ));
    }
    let mut extra = [0u8; 1];
    if read_full(&mut r, &mut extra).map_err(|e| read_error(path, e))? > 0 {
        return Err(DataError::malformed(
            path,
            format!("unexpected bytes after the {expected} data bytes the header {dims:?} declares"),
        ));
    }
    Ok(Idx { dims, data })
}

/// MNIST-style images + labels read from a pair of IDX files.
pub(crate) struct IdxPair {
    pub rows: usize,
    pub cols: usize,
    pub pixels: Vec<u8>,
    pub labels: Vec<u32>,
}

/// Reads and cross-checks an IDX3 image file and its IDX1 label file.
pub(crate) fn read_pair(images_path: &Path, labels_path: &Path, num_classes: usize) -> Result<IdxPair, DataError> {
    let images = read_idx(images_path, IDX3_MAGIC, "IDX3 images")?;
    let (n, rows, cols) = (images.dims[0], images.dims[1], images.dims[2]);
    if n == 0 {
        return Err(DataError::malformed(images_path, "holds no images"));
    }
    if rows == 0 || cols == 0 {
        return Err(DataError::malformed(images_path, format!("images of {rows}x{cols} pixels")));
    }
    let labels = read_idx(labels_path, IDX1_MAGIC, "IDX1 labels")?;
    if labels.dims[0] != n {
        return Err(DataError::CountMismatch {
            images_path: images_path.to_path_buf(),
            images: n,
            labels_path: labels_path.to_path_buf(),
            labels: labels.dims[0],
        });
    }
    if let Some((index, &l)) = labels.data.iter().enumerate().find(|&(_, &l)| l as usize >= num_classes) {
        return Err(DataError::LabelOutOfRange {
            path: labels_path.to_path_buf(),
            index,
            label: l as u32,
            classes: num_classes,
        });
    }
    Ok(IdxPair { rows, cols, pixels: images.data, labels: labels.data.iter().map(|&l| l as u32).collect() })
}

/// Creates `path` for writing; gzip-compressed when the name ends in `.gz`.
pub(crate) fn create(path: &Path) -> Result<Box<dyn Write>, DataError> {
    let file = File::create(path).map_err(|e| DataError::io(path, e))?;
    let w = BufWriter::with_capacity(1 << 16, file);
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(GzEncoder::new(w, Compression::fast())))
    } else {
        Ok(Box::new(w))
    }
}

/// Writes an IDX file of unsigned bytes with the given dimensions (gzip if `path` ends in `.gz`).
pub(crate) fn write_idx(path: &Path, dims: &[usize], data: &[u8]) -> Result<(), DataError> {
    let magic = 0x0000_0800u32 | dims.len() as u32;
    let mut w = create(path)?;
    let mut header = magic.to_be_bytes().to_vec();
    for &d in dims {
        let d = u32::try_from(d).map_err(|_| DataError::config(format!("IDX dimension {d} does not fit in u32")))?;
        header.extend_from_slice(&d.to_be_bytes());
    }
    w.write_all(&header).and_then(|()| w.write_all(data)).and_then(|()| w.flush()).map_err(|e| DataError::io(path, e))
}

/// The names under which an MNIST file is accepted, in order of preference, for a base name such
/// as `train-images-idx3-ubyte`: as is, with `.` before `idx` (`train-images.idx3-ubyte`), each
/// optionally with `.gz`.
pub(crate) fn candidate_names(base: &str) -> Vec<String> {
    let mut names = vec![base.to_string(), format!("{base}.gz")];
    if let Some(pos) = base.find("-idx") {
        let dotted = format!("{}.{}", &base[..pos], &base[pos + 1..]);
        names.push(dotted.clone());
        names.push(format!("{dotted}.gz"));
    }
    names
}

/// Every candidate path for `base` in each of `dirs`.
pub(crate) fn candidates(dirs: &[PathBuf], base: &str) -> Vec<PathBuf> {
    let names = candidate_names(base);
    dirs.iter().flat_map(|d| names.iter().map(move |n| d.join(n))).collect()
}
