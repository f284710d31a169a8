//! The compiled-kernel cache: in memory, one loaded module per (device, source hash,
//! target) for the whole process; on disk, one file per (source hash, target) under
//! [`super::kernel_cache_dir`]. A disk entry is a small header, the image (PTX or CUBIN)
//! and a checksum; anything that does not verify (truncated, corrupt, another key) is
//! ignored and rewritten, and a failed write is counted, never fatal.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use super::common::KernelCacheStats;
use super::launch::{KernelSource, fnv1a, sources};
use super::nvrtc::{self, NVRTC_OPTIONS};
use crate::error::{KernelError, Result};

static COMPILED: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static DISK_REJECTED: AtomicU64 = AtomicU64::new(0);
static DISK_WRITE_ERRORS: AtomicU64 = AtomicU64::new(0);
static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);

/// NVRTC compilations per module cache key (`"<module>-<arch>-<key>"`), for the test
/// that a key is compiled at most once per process however many threads open devices.
fn compiles_per_key() -> &'static Mutex<HashMap<String, u64>> {
    static PER_KEY: std::sync::OnceLock<Mutex<HashMap<String, u64>>> = std::sync::OnceLock::new();
    PER_KEY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// How many times each kernel module was compiled by NVRTC in this process, by
/// `"<module>-<arch>-<cache key>"` (a module loaded from memory or disk does not count).
pub fn kernel_compile_counts() -> HashMap<String, u64> {
    compiles_per_key().lock().map(|m| m.clone()).unwrap_or_default()
}

/// The process-wide counters of the kernel cache.
pub fn kernel_cache_stats() -> KernelCacheStats {
    KernelCacheStats {
        compiled: COMPILED.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        disk_rejected: DISK_REJECTED.load(Ordering::Relaxed),
        disk_write_errors: DISK_WRITE_ERRORS.load(Ordering::Relaxed),
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
    }
}

/// What to compile for: a CUBIN for a real architecture the NVRTC knows (no JIT at load),
/// or PTX for the newest virtual architecture it knows (JIT-compiled by the driver).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Cubin(String),
    Ptx(String),
}

impl Target {
    /// The NVRTC `--gpu-architecture` value.
    pub fn arch(&self) -> &str {
        match self {
            Target::Cubin(a) | Target::Ptx(a) => a,
        }
    }

    /// The target for a device of compute capability `cc` with this NVRTC.
    pub fn for_device(cc: (i32, i32)) -> Result<Target> {
        let want = cc.0 * 10 + cc.1;
        let archs = nvrtc::supported_archs()?;
        if archs.contains(&want) {
            return Ok(Target::Cubin(format!("sm_{want}")));
        }
        match archs.iter().copied().filter(|&a| a <= want).max() {
            Some(a) => Ok(Target::Ptx(format!("compute_{a}"))),
            None => Err(KernelError::Cuda {
                context: "NVRTC".into(),
                msg: format!("this NVRTC supports {archs:?}, nothing usable for sm_{want}"),
            }),
        }
    }
}

/// A compiled image and how it was obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Image {
    pub cubin: bool,
    pub bytes: Vec<u8>,
}

/// Where an image came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Compiled,
    Disk,
}

/// The cache key of a source for a target: source text, options, target, NVRTC version.
pub(crate) fn key(source: &KernelSource, target: &Target) -> Result<u64> {
    let (major, minor) = nvrtc::nvrtc_version()?;
    let version = format!("nvrtc {major}.{minor}");
    let opts = NVRTC_OPTIONS.join(" ");
    let kind = match target {
        Target::Cubin(_) => "cubin",
        Target::Ptx(_) => "ptx",
    };
    Ok(fnv1a(&[
        source.full_text().as_bytes(),
        opts.as_bytes(),
        target.arch().as_bytes(),
        kind.as_bytes(),
        version.as_bytes(),
    ]))
}

const MAGIC: &[u8; 8] = b"XBOWKC01";

fn file_name(source: &KernelSource, target: &Target, key: u64) -> String {
    format!("{}-{}-{key:016x}.bin", source.module, target.arch())
}

fn encode(key: u64, img: &Image) -> Vec<u8> {
    let mut out = Vec::with_capacity(img.bytes.len() + 33);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&key.to_le_bytes());
    out.push(img.cubin as u8);
    out.extend_from_slice(&(img.bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&img.bytes);
    out.extend_from_slice(&fnv1a(&[&img.bytes]).to_le_bytes());
    out
}

/// The image in a cache file, if the file is complete, uncorrupted and for `key`.
pub(crate) fn decode(key: u64, data: &[u8]) -> Option<Image> {
    let u64_at = |at: usize| -> Option<u64> { Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?)) };
    if data.get(..8)? != MAGIC || u64_at(8)? != key {
        return None;
    }
    let cubin = match *data.get(16)? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let len = usize::try_from(u64_at(17)?).ok()?;
    let end = 25usize.checked_add(len)?;
    if data.len() != end.checked_add(8)? {
        return None;
    }
    let bytes = data[25..end].to_vec();
    (u64_at(end)? == fnv1a(&[&bytes])).then_some(Image { cubin, bytes })
}

fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let tmp = path.with_extension(format!("tmp.{}.{nanos}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

fn compile_image(source: &KernelSource, target: &Target, key: u64) -> Result<Image> {
    let c = nvrtc::compile(source, target.arch())?;
    COMPILED.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut m) = compiles_per_key().lock() {
        *m.entry(file_name(source, target, key).trim_end_matches(".bin").to_string()).or_insert(0) += 1;
    }
    Ok(match (target, c.cubin) {
        (Target::Cubin(_), Some(bin)) => Image { cubin: true, bytes: bin },
        _ => Image { cubin: false, bytes: c.ptx },
    })
}

/// Writes an image to the disk cache, counting (not returning) a failure.
fn store(path: Option<&Path>, key: u64, img: &Image) {
    let failed = path.is_some_and(|p| write_atomically(p, &encode(key, img)).is_err());
    if failed {
        DISK_WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The image of `source` for `target`: from `dir` when a valid entry is there, else
/// compiled (and written to `dir`). `skip_disk` forces a compile (used after a cached image
/// failed to load) and overwrites the entry.
pub(crate) fn image(
    source: &KernelSource,
    target: &Target,
    dir: Option<&Path>,
    skip_disk: bool,
) -> Result<(Image, Origin, u64)> {
    let key = key(source, target)?;
    let path: Option<PathBuf> = dir.map(|d| d.join(file_name(source, target, key)));
    if let (Some(p), false) = (&path, skip_disk) {
        // Absent or unreadable: compile.
        if let Ok(data) = std::fs::read(p) {
            match decode(key, &data) {
                Some(img) => {
                    DISK_HITS.fetch_add(1, Ordering::Relaxed);
                    return Ok((img, Origin::Disk, key));
                }
                None => {
                    DISK_REJECTED.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    let img = compile_image(source, target, key)?;
    store(path.as_deref(), key, &img);
    Ok((img, Origin::Compiled, key))
}

fn load(ctx: &Arc<CudaContext>, img: &Image) -> Result<Arc<CudaModule>> {
    let ptx = if img.cubin { Ptx::from_binary(img.bytes.clone()) } else { Ptx::from_src(nvrtc::ptx_text(&img.bytes)?) };
    ctx.load_module(ptx).map_err(|e| KernelError::Cuda { context: "cuModuleLoadData".into(), msg: format!("{e:?}") })
}

type ModuleKey = (usize, u64, String);

/// One module's slot: filled by the first thread that needs it, which holds the slot's lock
/// while it compiles and loads, so threads opening the same device at once compile each
/// module once (single flight) instead of racing.
type Slot = Arc<Mutex<Option<Arc<CudaModule>>>>;

fn loaded() -> &'static Mutex<HashMap<ModuleKey, Slot>> {
    static LOADED: std::sync::OnceLock<Mutex<HashMap<ModuleKey, Slot>>> = std::sync::OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Loads one source's module on `ctx` (device `ordinal`): from this process's memory cache,
/// else the disk cache, else NVRTC. A disk image the driver rejects is recompiled.
fn module(
    ctx: &Arc<CudaContext>,
    ordinal: usize,
    source: &KernelSource,
    target: &Target,
    dir: Option<&Path>,
) -> Result<Arc<CudaModule>> {
    let key = key(source, target)?;
    let mk = (ordinal, key, target.arch().to_string());
    let slot = loaded().lock().map_err(|_| poisoned())?.entry(mk).or_default().clone();
    let mut slot = slot.lock().map_err(|_| poisoned())?;
    if let Some(m) = slot.as_ref() {
        MEMORY_HITS.fetch_add(1, Ordering::Relaxed);
        return Ok(m.clone());
    }
    let (img, origin, _) = image(source, target, dir, false)?;
    let m = match load(ctx, &img) {
        Ok(m) => m,
        Err(e) if origin == Origin::Disk => {
            // A valid-looking cache entry the driver cannot load: recompile and overwrite.
            DISK_REJECTED.fetch_add(1, Ordering::Relaxed);
            let (img, _, _) = image(source, target, dir, true)?;
            load(ctx, &img).map_err(|e2| KernelError::Cuda {
                context: format!("loading {}.cu", source.module),
                msg: format!("{e2} (cached image also failed: {e})"),
            })?
        }
        Err(e) => return Err(e),
    };
    *slot = Some(m.clone());
    Ok(m)
}

fn poisoned() -> KernelError {
    KernelError::Cuda { context: "kernel cache".into(), msg: "lock poisoned by a panic".into() }
}

/// Every kernel of every source, loaded on `ctx`, by kernel name.
pub(crate) fn load_all(
    ctx: &Arc<CudaContext>,
    ordinal: usize,
    target: &Target,
    dir: Option<&Path>,
) -> Result<HashMap<&'static str, CudaFunction>> {
    let mut fns = HashMap::new();
    for source in sources() {
        let m = module(ctx, ordinal, source, target, dir)?;
        for &name in source.kernels {
            let f = m.load_function(name).map_err(|e| KernelError::Cuda {
                context: format!("cuModuleGetFunction {name} in {}.cu", source.module),
                msg: format!("{e:?}"),
            })?;
            fns.insert(name, f);
        }
    }
    Ok(fns)
}
