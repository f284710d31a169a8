//! MNIST IDX files (raw or gzip-compressed): reading, validation and writing.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use crate::DataError;
use crate::file::{Input, open};

/// Magic number of an IDX file of unsigned bytes with 3 dimensions (images).
pub const IDX3_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with 1 dimension (labels).
pub const IDX1_MAGIC: u32 = 0x0000_0801;

/// The smallest image height and width accepted from an IDX file: LeNet-5, the model for
/// 1-channel images, needs 12x12 (two 5x5 convolutions, each followed by a 2x2 pooling).
pub const MIN_IMAGE_SIDE: usize = 12;

/// The content of an IDX file of unsigned bytes.
pub(crate) struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// `[60000, 28, 28]` as `60000 x 28 x 28`.
fn dims_text(dims: &[usize]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    parts.join(" x ")
}

/// Reads an IDX file whose magic must be `magic` (unsigned bytes, `magic & 0xff` dimensions).
#[cfg(test)]
pub(crate) fn read_idx(path: &Path, magic: u32, what: &'static str) -> Result<Idx, DataError> {
    parse_idx(open(path)?, magic, what)
}

/// Parses an IDX file completely (see [`parse_idx_first`]).
#[cfg(test)]
pub(crate) fn parse_idx(input: Input<'_>, magic: u32, what: &'static str) -> Result<Idx, DataError> {
    parse_idx_first(input, magic, what, None)
}

/// Parses the content of an IDX file whose magic must be `magic`. The header is read and checked
/// first (a sane shape, a size that fits the file) so that nothing is allocated or decompressed
/// on the word of a header that the file cannot back; then exactly the payload the header
/// declares is read, plus one byte to detect trailing data.
///
/// With `keep`, only the first `keep` records (rows of the first dimension) are read: the rest
/// of the file is neither read nor decompressed (the header's sizes are still checked against
/// the file's), and `dims[0]` stays the count the header declares. Before anything is
/// allocated, the bytes to hold are checked against the memory available.
pub(crate) fn parse_idx_first(
    mut input: Input<'_>,
    magic: u32,
    what: &'static str,
    keep: Option<usize>,
) -> Result<Idx, DataError> {
    let path = input.path();
    let mut head = [0u8; 4];
    let got = input.read_full(&mut head)?;
    let found = u32::from_be_bytes(head);
    if got < 4 || found != magic {
        if input.misnamed_gz() {
            return Err(input.not_gzip(&head[..got]));
        }
        if got < 4 {
            return Err(DataError::truncated(path, format!("{got} bytes, too short for the 4-byte IDX magic number")));
        }
        return Err(DataError::BadMagic { path: path.to_path_buf(), found, expected: magic, what });
    }
    let ndims = (magic & 0xff) as usize;
    let mut raw_dims = vec![0u8; 4 * ndims];
    let got = input.read_full(&mut raw_dims)?;
    let header = 4 + raw_dims.len();
    if got < raw_dims.len() {
        return Err(DataError::truncated(
            path,
            format!("header ends after {} bytes, expected {header} (magic + {ndims} dimensions)", 4 + got),
        ));
    }
    let dims: Vec<usize> =
        raw_dims.chunks_exact(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize).collect();
    check_shape(path, magic, &dims)?;
    let text = dims_text(&dims);
    let expected = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let total = expected.and_then(|e| u64::try_from(e).ok()).and_then(|e| e.checked_add(header as u64));
    let (expected, total) = match (expected, total) {
        (Some(e), Some(t)) if t <= input.bound() => (e, t),
        _ => {
            let size = expected.map_or_else(|| "more than 2^64".to_string(), |e| e.to_string());
            let detail = format!(
                "header declares {text} = {size} data bytes after the {header}-byte header, but {}",
                input.bound_reason()
            );
            return Err(if input.is_gzip() {
                DataError::malformed(path, format!("impossible size: {detail}"))
            } else {
                DataError::truncated(path, detail)
            });
        }
    };
    if !input.is_gzip() && total < input.bound() {
        return Err(DataError::malformed(
            path,
            format!(
                "{} unexpected bytes after the {expected} data bytes the header {text} declares",
                input.bound() - total
            ),
        ));
    }
    // The records to read: all, or the first `keep`.
    let per_record = dims[1..].iter().product::<usize>();
    let partial = keep.filter(|&k| k < dims[0]);
    let wanted = partial.map_or(expected, |k| k * per_record);
    crate::file::check_memory(path, wanted as u64, &format!("{} of {text}", partial.map_or(dims[0], |k| k)))?;
    if partial.is_some() {
        let data = input.read_up_to(wanted)?;
        if data.len() < wanted {
            return Err(DataError::truncated(
                path,
                format!("the first {wanted} data bytes of {text} end after {}", data.len()),
            ));
        }
        return Ok(Idx { dims, data });
    }
    let data = input.read_up_to(expected)?;
    if data.len() < expected {
        return Err(DataError::truncated(
            path,
            format!(
                "header {text} promises {expected} data bytes after the {header}-byte header, found only {}",
                data.len()
            ),
        ));
    }
    let mut extra = [0u8; 1];
    if input.read_full(&mut extra)? > 0 {
        return Err(DataError::malformed(
            path,
            format!("unexpected bytes after the {expected} data bytes the header {text} declares"),
        ));
    }
    Ok(Idx { dims, data })
}

/// Rejects IDX shapes no dataset can be made of, before any data is read: no records, or images
/// smaller than [`MIN_IMAGE_SIDE`].
fn check_shape(path: &Path, magic: u32, dims: &[usize]) -> Result<(), DataError> {
    let what = if magic == IDX3_MAGIC { "images" } else { "labels" };
    if dims.first() == Some(&0) {
        return Err(DataError::malformed(path, format!("holds no {what} (the header's count is 0)")));
    }
    if let [_, rows, cols] = *dims
        && (rows < MIN_IMAGE_SIDE || cols < MIN_IMAGE_SIDE)
    {
        return Err(DataError::malformed(
            path,
            format!(
                "images of {rows}x{cols} pixels are too small: crossbow's models need at least \
                 {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE} (LeNet-5 applies two 5x5 convolutions, each \
                 followed by 2x2 pooling)"
            ),
        ));
    }
    Ok(())
}

/// MNIST-style images + labels read from a pair of IDX files.
pub(crate) struct IdxPair {
    pub rows: usize,
    pub cols: usize,
    pub pixels: Vec<u8>,
    pub labels: Vec<u32>,
    /// Images the files declare (the pair may hold only the first of them).
    pub declared: usize,
}

/// Reads and cross-checks an IDX3 image file and its IDX1 label file.
#[cfg(test)]
pub(crate) fn read_pair(images_path: &Path, labels_path: &Path, num_classes: usize) -> Result<IdxPair, DataError> {
    read_pair_first(images_path, labels_path, num_classes, None)
}

/// [`read_pair`] keeping only the first `keep` images and labels (see [`parse_idx_first`]);
/// `IdxPair::declared` is the count the files declare.
pub(crate) fn read_pair_first(
    images_path: &Path,
    labels_path: &Path,
    num_classes: usize,
    keep: Option<usize>,
) -> Result<IdxPair, DataError> {
    let images = parse_idx_first(open(images_path)?, IDX3_MAGIC, "IDX3 images", keep)?;
    let labels = parse_idx_first(open(labels_path)?, IDX1_MAGIC, "IDX1 labels", keep)?;
    pair(images_path, images, labels_path, labels, num_classes)
}

/// Cross-checks parsed IDX3 images and IDX1 labels: as many labels as images, each a class below
/// `num_classes`.
pub(crate) fn pair(
    images_path: &Path,
    images: Idx,
    labels_path: &Path,
    labels: Idx,
    num_classes: usize,
) -> Result<IdxPair, DataError> {
    let (n, rows, cols) = match images.dims[..] {
        [n, rows, cols] => (n, rows, cols),
        _ => return Err(DataError::malformed(images_path, "not a 3-dimensional IDX image file")),
    };
    let count = match labels.dims[..] {
        [count] => count,
        _ => return Err(DataError::malformed(labels_path, "not a 1-dimensional IDX label file")),
    };
    if count != n {
        return Err(DataError::CountMismatch {
            images_path: images_path.to_path_buf(),
            images: n,
            labels_path: labels_path.to_path_buf(),
            labels: count,
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
    Ok(IdxPair {
        rows,
        cols,
        pixels: images.data,
        labels: labels.data.iter().map(|&l| l as u32).collect(),
        declared: n,
    })
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
