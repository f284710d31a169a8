//! Checkpoint files: named f32 tensors and a JSON state in one safetensors file, with a
//! checksum over both, written atomically.
//!
//! A checkpoint is an ordinary safetensors file (any safetensors reader opens it); crossbow
//! puts three entries in its string metadata: `format` (`crossbow-checkpoint`), `state` (a
//! JSON document: the run's settings and positions) and `checksum` (CRC-32 of the state and
//! of every tensor's name, shape and bytes, in name order). [`CheckpointFile::from_bytes`]
//! refuses a file whose checksum does not match, so a truncated or bit-flipped checkpoint is
//! an error naming what is wrong, never a run resumed from damaged weights.
//!
//! [`CheckpointFile::write_atomic`] writes a temporary file in the target's folder, syncs it,
//! renames it over the target and syncs the folder: after a crash at any moment the target
//! is either the old file or the new one, whole.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

/// The `format` metadata value of a crossbow checkpoint.
pub const FORMAT: &str = "crossbow-checkpoint";

/// Why a checkpoint could not be read or written. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file could not be opened, read, written, synced or renamed.
    #[error("checkpoint {path}: {what}: {source}")]
    Io {
        /// The file (or folder) concerned.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not a crossbow checkpoint, or is damaged.
    #[error("checkpoint {path}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
}

impl CheckpointError {
    fn invalid(path: &Path, msg: impl Into<String>) -> Self {
        CheckpointError::Invalid { path: path.to_path_buf(), msg: msg.into() }
    }
}

/// One tensor of a checkpoint: its shape and its values (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Dimensions; their product is `data.len()`.
    pub shape: Vec<usize>,
    /// The values.
    pub data: Vec<f32>,
}

impl Tensor {
    /// A one-dimensional tensor.
    pub fn vector(data: Vec<f32>) -> Self {
        Tensor { shape: vec![data.len()], data }
    }
}

/// The contents of a checkpoint file: tensors by name, and a JSON state.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointFile {
    /// The tensors, by name.
    pub tensors: BTreeMap<String, Tensor>,
    /// The run's state (settings, positions, counters), as JSON.
    pub state: serde_json::Value,
}

fn checksum(state: &str, tensors: &BTreeMap<String, Tensor>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(state.as_bytes());
    for (name, t) in tensors {
        h.update(name.as_bytes());
        h.update(&[0]);
        for d in &t.shape {
            h.update(&(*d as u64).to_le_bytes());
        }
        for v in &t.data {
            h.update(&v.to_le_bytes());
        }
    }
    h.finalize()
}

impl CheckpointFile {
    /// An empty checkpoint with `state`.
    pub fn new(state: serde_json::Value) -> Self {
        CheckpointFile { tensors: BTreeMap::new(), state }
    }

    /// The tensor `name`, or an error naming it and `path`.
    pub fn tensor(&self, path: &Path, name: &str) -> Result<&Tensor, CheckpointError> {
        self.tensors.get(name).ok_or_else(|| CheckpointError::invalid(path, format!("has no tensor '{name}'")))
    }

    /// The file's bytes (a safetensors file).
    pub fn to_bytes(&self) -> Result<Vec<u8>, CheckpointError> {
        let state = self.state.to_string();
        let sum = checksum(&state, &self.tensors);
        let mut bytes: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        for (name, t) in &self.tensors {
            let n: usize = t.shape.iter().product();
            if n != t.data.len() {
                return Err(CheckpointError::invalid(
                    Path::new("(in memory)"),
                    format!("tensor '{name}' has shape {:?} but {} values", t.shape, t.data.len()),
                ));
            }
            bytes.insert(name, t.data.iter().flat_map(|v| v.to_le_bytes()).collect());
        }
        let mut views = Vec::with_capacity(bytes.len());
        for (name, b) in &bytes {
            let shape = self.tensors.get(*name).map(|t| t.shape.clone()).unwrap_or_default();
            let view = TensorView::new(Dtype::F32, shape, b)
                .map_err(|e| CheckpointError::invalid(Path::new("(in memory)"), format!("tensor '{name}': {e}")))?;
            views.push((*name, view));
        }
        let meta: HashMap<String, String> = [
            ("format".to_string(), FORMAT.to_string()),
            ("state".to_string(), state),
            ("checksum".to_string(), format!("{sum:08x}")),
        ]
        .into_iter()
        .collect();
        let bytes = safetensors::serialize(views, Some(meta))
            .map_err(|e| CheckpointError::invalid(Path::new("(in memory)"), format!("cannot serialise: {e}")))?;
        canonical_header(bytes).map_err(|e| CheckpointError::invalid(Path::new("(in memory)"), e))
    }

    /// Parses a checkpoint from `bytes` (the contents of `path`, named in errors). Checks the
    /// format, every tensor's type and the checksum.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self, CheckpointError> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| {
            CheckpointError::invalid(path, format!("is not a readable safetensors file ({e}); truncated or damaged?"))
        })?;
        let (_, meta) = SafeTensors::read_metadata(bytes)
            .map_err(|e| CheckpointError::invalid(path, format!("unreadable header: {e}")))?;
        let info = meta.metadata().clone().unwrap_or_default();
        match info.get("format") {
            Some(f) if f == FORMAT => {}
            Some(f) => {
                return Err(CheckpointError::invalid(path, format!("is a '{f}' file, not a crossbow checkpoint")));
            }
            None => {
                return Err(CheckpointError::invalid(
                    path,
                    "is a safetensors file but not a crossbow checkpoint (no 'format' metadata); \
                     an exported model cannot be resumed",
                ));
            }
        }
        let state_text = info.get("state").ok_or_else(|| CheckpointError::invalid(path, "has no 'state' metadata"))?;
        let want = info.get("checksum").ok_or_else(|| CheckpointError::invalid(path, "has no 'checksum' metadata"))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != Dtype::F32 {
                return Err(CheckpointError::invalid(path, format!("tensor '{name}' is {:?}, not F32", view.dtype())));
            }
            let data: Vec<f32> =
                view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            tensors.insert(name, Tensor { shape: view.shape().to_vec(), data });
        }
        let got = format!("{:08x}", checksum(state_text, &tensors));
        if &got != want {
            return Err(CheckpointError::invalid(
                path,
                format!("checksum mismatch (file says {want}, contents give {got}): the file is damaged"),
            ));
        }
        let state = serde_json::from_str(state_text)
            .map_err(|e| CheckpointError::invalid(path, format!("state is not valid JSON: {e}")))?;
        Ok(CheckpointFile { tensors, state })
    }

    /// Reads and checks the checkpoint at `path`. Refuses anything but a regular file, and
    /// reads no more than the file's size.
    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        let io = |what, source| CheckpointError::Io { path: path.to_path_buf(), what, source };
        let meta = std::fs::metadata(path).map_err(|e| io("cannot open", e))?;
        if meta.is_dir() {
            return Err(CheckpointError::invalid(path, "is a directory, not a checkpoint file"));
        }
        if !meta.is_file() {
            return Err(CheckpointError::invalid(path, "is not a regular file"));
        }
        let f = File::open(path).map_err(|e| io("cannot open", e))?;
        let mut bytes = Vec::new();
        f.take(meta.len()).read_to_end(&mut bytes).map_err(|e| io("cannot read", e))?;
        Self::from_bytes(path, &bytes)
    }

    /// The JSON state of the checkpoint at `path`, read from its header alone (the tensors and
    /// the checksum are not read): cheap enough to look at every checkpoint of a folder, to
    /// tell whose run each file belongs to. A file that is not a crossbow checkpoint, or whose
    /// header is damaged, is an error naming it; damage in the tensors is not seen.
    pub fn read_state(path: &Path) -> Result<serde_json::Value, CheckpointError> {
        let io = |what, source| CheckpointError::Io { path: path.to_path_buf(), what, source };
        let meta = std::fs::metadata(path).map_err(|e| io("cannot open", e))?;
        if !meta.is_file() {
            return Err(CheckpointError::invalid(path, "is not a regular file"));
        }
        let mut f = File::open(path).map_err(|e| io("cannot open", e))?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len).map_err(|e| io("cannot read the header", e))?;
        let n = u64::from_le_bytes(len);
        // safetensors caps its header at 100 MB; a larger length is damage.
        if n > 100_000_000 || 8 + n > meta.len() {
            return Err(CheckpointError::invalid(path, format!("header length {n} does not fit the file")));
        }
        let mut header = vec![0u8; n as usize];
        f.read_exact(&mut header).map_err(|e| io("cannot read the header", e))?;
        let v: serde_json::Value = serde_json::from_slice(&header)
            .map_err(|e| CheckpointError::invalid(path, format!("header is not JSON: {e}")))?;
        let info = v.get("__metadata__");
        if info.and_then(|m| m.get("format")).and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(CheckpointError::invalid(path, "is not a crossbow checkpoint"));
        }
        let state = info
            .and_then(|m| m.get("state"))
            .and_then(|s| s.as_str())
            .ok_or_else(|| CheckpointError::invalid(path, "has no 'state' metadata"))?;
        serde_json::from_str(state).map_err(|e| CheckpointError::invalid(path, format!("state is not valid JSON: {e}")))
    }

    /// Writes the checkpoint to `path` atomically: a temporary file in the same folder
    /// (`.NAME.tmp`), synced, renamed over `path`, then the folder synced. On error the
    /// temporary file is removed and `path` is untouched.
    pub fn write_atomic(&self, path: &Path) -> Result<(), CheckpointError> {
        let bytes = self.to_bytes()?;
        write_atomic(path, &bytes)
    }
}

/// A safetensors file's bytes with its JSON header rewritten with keys in sorted order (the
/// `safetensors` crate writes the metadata from a hash map, in an order that changes from run
/// to run), so that the same contents always give the same bytes. The tensors' data and their
/// offsets (relative to the end of the header) are unchanged; the header is padded with
/// spaces to a multiple of 8 bytes, as the format asks.
pub fn canonical_header(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    let len = bytes.get(..8).map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]));
    let n = len.and_then(|n| usize::try_from(n).ok()).filter(|n| 8 + n <= bytes.len()).ok_or("bad header length")?;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[8..8 + n]).map_err(|e| format!("header is not JSON: {e}"))?;
    // serde_json's map is ordered by key (the crate's `preserve_order` is off).
    let mut text = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
    while text.len() % 8 != 0 {
        text.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + bytes.len() - 8 - n);
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(&bytes[8 + n..]);
    Ok(out)
}

/// The temporary file [`write_atomic`] uses for `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Writes `bytes` to `path` atomically (see [`CheckpointFile::write_atomic`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let tmp = temp_path(path);
    let io = |p: &Path, what, source| CheckpointError::Io { path: p.to_path_buf(), what, source };
    let result = (|| {
        let mut f = File::create(&tmp).map_err(|e| io(&tmp, "cannot create", e))?;
        f.write_all(bytes).map_err(|e| io(&tmp, "cannot write", e))?;
        f.sync_all().map_err(|e| io(&tmp, "cannot sync", e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| io(path, "cannot rename the temporary file to", e))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // Durability of the rename: sync the folder (an error here is reported; the file is whole).
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir, "cannot sync the folder", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> CheckpointFile {
        let mut c = CheckpointFile::new(serde_json::json!({"iteration": 7, "name": "x"}));
        c.tensors.insert("a/b".into(), Tensor { shape: vec![2, 3], data: vec![1.0, -2.0, 3.5, 0.0, f32::MIN, 9.0] });
        c.tensors.insert("z".into(), Tensor::vector(vec![0.25; 5]));
        c
    }

    #[test]
    fn round_trips_through_bytes_and_files() {
        let c = sample();
        let bytes = c.to_bytes().unwrap();
        assert_eq!(CheckpointFile::from_bytes(Path::new("m"), &bytes).unwrap(), c);
        let dir = std::env::temp_dir().join(format!("crossbow-ckpt-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.safetensors");
        c.write_atomic(&p).unwrap();
        assert!(!temp_path(&p).exists(), "the temporary file is renamed away");
        assert_eq!(CheckpointFile::read(&p).unwrap(), c);
        // Any safetensors reader opens it.
        let raw = std::fs::read(&p).unwrap();
        let st = SafeTensors::deserialize(&raw).unwrap();
        assert_eq!(st.tensor("a/b").unwrap().shape(), &[2, 3]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_same_contents_give_the_same_bytes() {
        let a = sample().to_bytes().unwrap();
        for _ in 0..20 {
            assert!(sample().to_bytes().unwrap() == a, "the header order changed between two serialisations");
        }
        assert_eq!(CheckpointFile::from_bytes(Path::new("m"), &a).unwrap(), sample());
    }

    #[test]
    fn the_state_is_read_from_the_header_alone() {
        let dir = std::env::temp_dir().join(format!("crossbow-ckpt-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.safetensors");
        sample().write_atomic(&p).unwrap();
        assert_eq!(CheckpointFile::read_state(&p).unwrap(), sample().state);
        // Damaged tensors are not seen; a cut header is.
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 4]).unwrap();
        assert_eq!(CheckpointFile::read_state(&p).unwrap(), sample().state);
        for cut in [0, 5, 8, 30] {
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let e = CheckpointFile::read_state(&p).unwrap_err().to_string();
            assert!(e.contains("c.safetensors"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn truncation_and_bit_flips_are_refused_naming_the_file() {
        let bytes = sample().to_bytes().unwrap();
        let p = Path::new("/runs/ckpt-5.safetensors");
        for cut in [0, 7, 8, 20, bytes.len() / 2, bytes.len() - 1] {
            let e = CheckpointFile::from_bytes(p, &bytes[..cut]).unwrap_err().to_string();
            assert!(e.contains("/runs/ckpt-5.safetensors"), "{e}");
        }
        // A flipped bit in the data (the last byte is tensor data).
        let mut b = bytes.clone();
        let n = b.len() - 3;
        b[n] ^= 0x10;
        let e = CheckpointFile::from_bytes(p, &b).unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        // A flipped digit in the state (inside the header's JSON).
        let key = b"iteration\\\":";
        let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
        let mut b = bytes.clone();
        assert_eq!(b[at], b'7');
        b[at] = b'8';
        let e = CheckpointFile::from_bytes(p, &b).unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
    }

    #[test]
    fn other_safetensors_files_are_not_checkpoints() {
        let data = [0u8; 8];
        let v = TensorView::new(Dtype::F32, vec![2], &data).unwrap();
        let bytes = safetensors::serialize([("w", v)], None).unwrap();
        let e = CheckpointFile::from_bytes(Path::new("model.safetensors"), &bytes).unwrap_err().to_string();
        assert!(e.contains("not a crossbow checkpoint"), "{e}");
    }

    #[test]
    fn directories_and_missing_files_are_named() {
        let e = CheckpointFile::read(&std::env::temp_dir()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = CheckpointFile::read(Path::new("/nonexistent/c.safetensors")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/c.safetensors") && e.contains("cannot open"), "{e}");
    }

    #[test]
    fn a_failed_write_leaves_the_target_untouched() {
        let dir = std::env::temp_dir().join(format!("crossbow-ckpt-fail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.safetensors");
        sample().write_atomic(&p).unwrap();
        let before = std::fs::read(&p).unwrap();
        // The temporary file's name is taken by a directory: creating it fails.
        std::fs::create_dir_all(temp_path(&p)).unwrap();
        let mut other = sample();
        other.state = serde_json::json!({"iteration": 8});
        assert!(other.write_atomic(&p).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

        /// Fuzzing the reader: truncations, bit flips, overwritten bytes and random files
        /// give a clean error (or, for a mutation the checksum cannot see, the same
        /// contents), never a panic, and allocate at most about the input's size.
        #[test]
        fn hostile_bytes_never_panic(
            mode in 0u8..4,
            pos in any::<prop::sample::Index>(),
            bit in 0u8..8,
            junk in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let good = sample().to_bytes().unwrap();
            let bytes = match mode {
                0 => good[..pos.index(good.len())].to_vec(),
                1 => { let mut b = good.clone(); let i = pos.index(b.len()); b[i] ^= 1 << bit; b }
                2 => { let mut b = good.clone(); let i = pos.index(b.len()); for (j, v) in junk.iter().enumerate() { if let Some(x) = b.get_mut(i + j) { *x = *v; } } b }
                _ => junk.clone(),
            };
            if let Ok(c) = CheckpointFile::from_bytes(Path::new("f"), &bytes) {
                // Only a change that leaves every checked byte the same can pass (e.g. JSON
                // whitespace or key order in the header).
                prop_assert_eq!(c, sample());
            }
        }
    }
}
