//! Opening data files without trusting them: what kind of file a path is (checked before it is
//! opened, so a FIFO cannot block the open), gzip detection, and the bound on how many bytes a
//! file's content can legitimately hold once decoded.

use std::fs::{File, Metadata};
use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use flate2::read::GzDecoder;

use crate::DataError;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The most bytes a gzip-compressed data file may decompress to (2 GiB). The largest standard
/// files are far below it (MNIST training images: 47 MB, CIFAR-100 training set: 154 MB,
/// EMNIST ByClass: 547 MB).
pub(crate) const MAX_DECOMPRESSED: u64 = 2 << 30;

/// DEFLATE cannot expand data by more than 1032:1 (a 258-byte match costs at least 2 bits), so a
/// gzip file of `n` bytes never legitimately decompresses to more than `1032 n` bytes.
pub(crate) const MAX_DEFLATE_RATIO: u64 = 1032;

/// Refuses to load `bytes` of `what` from `path` when the machine has less memory available
/// (Linux's `MemAvailable`, less a 256 MiB margin); elsewhere, or when it cannot be read, no
/// check. The error gives both figures and says how to load less.
pub(crate) fn check_memory(path: &Path, bytes: u64, what: &str) -> Result<(), DataError> {
    let Some(available) = available_memory() else { return Ok(()) };
    let margin = 256u64 << 20;
    if bytes.saturating_add(margin) > available {
        let gb = |b: u64| b as f64 / 1e9;
        return Err(DataError::config(format!(
            "{}: holding {what} needs {:.2} GB, but this machine has {:.2} GB of memory available; load fewer images (--train-size / --test-size read only the first N)",
            path.display(),
            gb(bytes),
            gb(available)
        )));
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo`, in bytes (`CROSSBOW_TEST_MEM_AVAILABLE` overrides it,
/// for tests).
pub(crate) fn available_memory() -> Option<u64> {
    if let Some(v) = std::env::var("CROSSBOW_TEST_MEM_AVAILABLE").ok().and_then(|v| v.parse().ok()) {
        return Some(v);
    }
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// What kind of non-regular file `meta` describes, or `None` for a regular file.
fn not_regular(meta: &Metadata) -> Option<&'static str> {
    if meta.is_file() {
        None
    } else if meta.is_dir() {
        Some("is a directory")
    } else {
        Some("is not a regular file (a FIFO, socket or device)")
    }
}

/// Whether `path` is a regular file (following symbolic links): `Ok(true)` for a file,
/// `Ok(false)` when nothing is there, and an error for a directory, a FIFO, a socket or a device.
pub(crate) fn is_regular_file(path: &Path) -> Result<bool, DataError> {
    match std::fs::metadata(path) {
        Ok(meta) => match not_regular(&meta) {
            None => Ok(true),
            Some(kind) => Err(DataError::NotRegularFile { path: path.to_path_buf(), kind }),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(DataError::io(path, e)),
    }
}

/// Opens a data file for reading, transparently decompressing gzip (detected by its magic bytes,
/// whatever the file is called). The path is checked to be a regular file *before* it is opened
/// (opening a FIFO would block until a writer appears), and again on the open handle.
pub(crate) fn open(path: &Path) -> Result<Input<'_>, DataError> {
    let meta = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?;
    if let Some(kind) = not_regular(&meta) {
        return Err(DataError::NotRegularFile { path: path.to_path_buf(), kind });
    }
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    // The path may have been replaced between the check and the open: trust only the handle.
    let meta = file.metadata().map_err(|e| DataError::io(path, e))?;
    if let Some(kind) = not_regular(&meta) {
        return Err(DataError::NotRegularFile { path: path.to_path_buf(), kind });
    }
    Input::new(path, BufReader::with_capacity(1 << 16, file), meta.len())
}

/// The decoded content of a data file (or of bytes in memory standing for one), with what is
/// known about its size.
pub(crate) struct Input<'a> {
    path: &'a Path,
    reader: Box<dyn Read + 'a>,
    gzip: bool,
    raw_len: u64,
}

impl<'a> Input<'a> {
    /// `raw` is the file's undecoded content, `raw_len` its length in bytes; `path` names it in
    /// errors (a name ending in `.gz` makes a non-gzip content an error, see
    /// [`Input::not_gzip`]).
    pub(crate) fn new<R: Read + 'a>(path: &'a Path, mut raw: R, raw_len: u64) -> Result<Self, DataError> {
        let mut head = [0u8; 2];
        let got = read_full(&mut raw, &mut head).map_err(|e| DataError::io(path, e))?;
        let gzip = got == 2 && head == GZIP_MAGIC;
        let chained = std::io::Cursor::new(head).take(got as u64).chain(raw);
        let reader: Box<dyn Read + 'a> = if gzip { Box::new(GzDecoder::new(chained)) } else { Box::new(chained) };
        Ok(Input { path, reader, gzip, raw_len })
    }

    /// The file, for error messages.
    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    /// Whether the content is gzip-compressed.
    pub(crate) fn is_gzip(&self) -> bool {
        self.gzip
    }

    /// Whether the name says gzip (`.gz`) but the content does not start with the gzip magic.
    pub(crate) fn misnamed_gz(&self) -> bool {
        !self.gzip && self.path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gz"))
    }

    /// The error for a file named `.gz` whose content is neither gzip nor the expected format;
    /// `head` is its first bytes.
    pub(crate) fn not_gzip(&self, head: &[u8]) -> DataError {
        let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        let start = if head.is_empty() { "is empty".to_string() } else { format!("starts with {}", hex.join(" ")) };
        DataError::malformed(
            self.path,
            format!("not gzip: the name ends in .gz but the file {start}, not the gzip magic bytes 1f 8b"),
        )
    }

    /// The most bytes the decoded content can hold: exactly the file size for a raw file; for
    /// gzip, what DEFLATE can expand the file to, at most [`MAX_DECOMPRESSED`].
    pub(crate) fn bound(&self) -> u64 {
        if self.gzip { self.raw_len.saturating_mul(MAX_DEFLATE_RATIO).min(MAX_DECOMPRESSED) } else { self.raw_len }
    }

    /// Why a decoded size above [`Input::bound`] is impossible, for error messages.
    pub(crate) fn bound_reason(&self) -> String {
        if !self.gzip {
            format!("the file holds {} bytes", self.raw_len)
        } else if self.raw_len.saturating_mul(MAX_DEFLATE_RATIO) > MAX_DECOMPRESSED {
            format!("crossbow refuses to decompress more than {MAX_DECOMPRESSED} bytes from one file")
        } else {
            format!(
                "a {}-byte gzip file cannot decompress to more than {} bytes",
                self.raw_len,
                self.raw_len.saturating_mul(MAX_DEFLATE_RATIO)
            )
        }
    }

    /// Reads until `buf` is full or the content ends; returns the number of bytes read.
    pub(crate) fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, DataError> {
        read_full(&mut self.reader, buf).map_err(|e| self.read_error(e))
    }

    /// Reads exactly `len` bytes, or fewer if the content ends first. The buffer grows with the
    /// data actually read (starting at `len` for a raw file, whose size was checked, and small
    /// for gzip), so a header that lies costs no more memory than the content really holds.
    pub(crate) fn read_up_to(&mut self, len: usize) -> Result<Vec<u8>, DataError> {
        const CHUNK: usize = 1 << 20;
        let mut data = Vec::with_capacity(if self.gzip { len.min(CHUNK) } else { len });
        while data.len() < len {
            if data.len() == data.capacity() {
                let target = data.len().saturating_mul(2).max(CHUNK).min(len);
                data.reserve_exact(target - data.len());
            }
            let start = data.len();
            let end = data.capacity().min(len);
            data.resize(end, 0);
            let got = self.read_full(&mut data[start..end])?;
            data.truncate(start + got);
            if start + got < end {
                break;
            }
        }
        Ok(data)
    }

    /// Maps a read error: corrupt gzip data is `Malformed`, a gzip stream cut short `Truncated`.
    fn read_error(&self, e: std::io::Error) -> DataError {
        match e.kind() {
            ErrorKind::InvalidData | ErrorKind::InvalidInput if self.gzip => {
                DataError::malformed(self.path, format!("invalid gzip data: {e}"))
            }
            ErrorKind::UnexpectedEof if self.gzip => {
                DataError::truncated(self.path, format!("compressed stream ends early: {e}"))
            }
            _ => DataError::io(self.path, e),
        }
    }
}

/// Reads until `buf` is full or the input ends; returns the number of bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
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
