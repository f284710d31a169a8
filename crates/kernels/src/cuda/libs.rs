//! Which CUDA library files are used, and refusing the wrong ones.
//!
//! cudarc `dlopen`s each library by the first name of a fixed list that loads (`libX.so`,
//! then `libX.so.13`, `.12`, …, `.1`), so a toolkit's unversioned `libX.so`, a stub
//! `libcuda.so` (`…/stubs/`) or an NVRTC newer than the driver can win over what the
//! driver supports. cudarc's list cannot be changed, so the backend instead:
//!
//! 1. loads the driver as `libcuda.so.1` only (the name the driver installs) and asks it
//!    for its CUDA version (`cuDriverGetVersion`), without cudarc;
//! 2. for every library, loads the versioned names matching that version, newest first,
//!    never above the driver's major ([`candidates`]), and keeps it loaded;
//! 3. resolves the file cudarc itself will load (its candidate list, in its order) and
//!    refuses, with a message naming both files, a stub, a library whose major version is
//!    newer than the driver's, or a file of another version than the one step 2 chose
//!    ([`judge`]). Two copies of one version (a toolkit's `libnvrtc.so` and a pip wheel's
//!    `libnvrtc.so.13`, both CUDA 13.0) are accepted, with a note ([`notes`]) saying which
//!    file is used; for two versions the error says how to make cudarc load the chosen file
//!    (a folder of links first on `LD_LIBRARY_PATH`, which `scripts/gpu-check.sh` makes).
//!
//! The pure parts ([`candidates`], [`is_stub`], [`major_of_file`], [`judge`],
//! [`nvrtc_fits_driver`], [`parse_maps`]) are tested on any machine; the loading itself
//! (feature `cuda`) runs in `driver_status`, `nvrtc` and `CudaDevice::open`.

use std::path::{Path, PathBuf};

/// A CUDA library the backend loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CudaLib {
    /// The driver, `libcuda.so.1`.
    Driver,
    /// The runtime compiler, `libnvrtc.so.{13,12}`.
    Nvrtc,
    /// cuBLAS, `libcublas.so.{13,12}`.
    Cublas,
    /// cuDNN 9, `libcudnn.so.9`.
    Cudnn,
    /// NCCL 2, `libnccl.so.2`.
    Nccl,
}

impl CudaLib {
    /// Every library, in the order the doctor lists them.
    pub const ALL: [CudaLib; 5] = [CudaLib::Driver, CudaLib::Nvrtc, CudaLib::Cublas, CudaLib::Cudnn, CudaLib::Nccl];

    /// The name cudarc passes to its candidate list (`cuda`, `nvrtc`, ...).
    pub fn stem(self) -> &'static str {
        match self {
            CudaLib::Driver => "cuda",
            CudaLib::Nvrtc => "nvrtc",
            CudaLib::Cublas => "cublas",
            CudaLib::Cudnn => "cudnn",
            CudaLib::Nccl => "nccl",
        }
    }

    /// True for the libraries whose major version follows the CUDA toolkit's (and so must
    /// not be newer than the driver's).
    fn follows_toolkit(self) -> bool {
        matches!(self, CudaLib::Nvrtc | CudaLib::Cublas)
    }
}

/// CUDA majors the bindings support, newest first.
const TOOLKIT_MAJORS: [i32; 2] = [13, 12];

/// The CUDA major of a driver version (`1000 * major + 10 * minor`); `None` when unknown (0).
pub fn driver_major(driver_version: i32) -> Option<i32> {
    (driver_version > 0).then_some(driver_version / 1000)
}

/// The file names to load `lib` by, most preferred first, for a driver supporting CUDA
/// `driver_version` (`1000 * major + 10 * minor`, 0 = unknown): only versioned names, and
/// for NVRTC and cuBLAS never a major above the driver's (an unknown driver allows every
/// supported major). Empty when no supported version fits the driver.
pub fn candidates(lib: CudaLib, driver_version: i32) -> Vec<String> {
    let stem = lib.stem();
    match lib {
        CudaLib::Driver => vec!["libcuda.so.1".into()],
        CudaLib::Cudnn => vec!["libcudnn.so.9".into()],
        CudaLib::Nccl => vec!["libnccl.so.2".into()],
        CudaLib::Nvrtc | CudaLib::Cublas => TOOLKIT_MAJORS
            .iter()
            .filter(|&&m| driver_major(driver_version).is_none_or(|d| m <= d))
            .map(|m| format!("lib{stem}.so.{m}"))
            .collect(),
    }
}

/// True when `path` is a toolkit's link-time stub (a `stubs` directory), which must never
/// be loaded at run time (a stub `libcuda` makes every driver call fail).
pub fn is_stub(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "stubs")
}

/// The major version in a library file's name (`libnvrtc.so.13.0.88` → 13, `libcuda.so.1`
/// → 1); `None` for an unversioned name.
pub fn major_of_file(path: &Path) -> Option<i32> {
    let name = path.file_name()?.to_str()?;
    let (_, after) = name.split_once(".so.")?;
    after.split('.').next()?.parse().ok()
}

/// The `(major, minor)` version in a library file's name (`libnvrtc.so.13.0.88` → (13, 0));
/// `None` without both.
pub fn major_minor_of_file(path: &Path) -> Option<(i32, i32)> {
    let name = path.file_name()?.to_str()?;
    let (_, after) = name.split_once(".so.")?;
    let mut parts = after.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// What cudarc will load for a library, as resolved by the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The name (from cudarc's list) that loaded.
    pub name: String,
    /// The file it loaded (the dynamic loader's path), symlinks resolved when possible.
    pub path: PathBuf,
    /// The `(major, minor)` version the library reports of itself (`nvrtcVersion`,
    /// `cublasGetProperty`, `cudnnGetVersion`, `ncclGetVersion`), when it could be asked.
    pub version: Option<(i32, i32)>,
}

impl Resolved {
    /// The version the library reports, else the one in its file name.
    pub fn major_minor(&self) -> Option<(i32, i32)> {
        self.version.or_else(|| major_minor_of_file(&self.path))
    }
}

/// True when two files are the same bytes (two copies of one library).
fn same_bytes(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(ma), Ok(mb)) if ma.len() == mb.len() => {
            matches!((std::fs::read(a), std::fs::read(b)), (Ok(x), Ok(y)) if x == y)
        }
        _ => false,
    }
}

/// What [`judge`] decided: the file that will be used, and a note when it was a choice
/// between two copies of the same version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    /// The file cudarc will load.
    pub path: PathBuf,
    /// Said when two files were found and the one cudarc loads is accepted as the same
    /// version as the one chosen by the driver's version.
    pub note: Option<String>,
}

/// The notes of [`judge`] in this process (two copies of one library accepted), for
/// `crossbow doctor`.
pub fn notes() -> Vec<String> {
    note_list().lock().map(|n| n.clone()).unwrap_or_default()
}

fn note_list() -> &'static std::sync::Mutex<Vec<String>> {
    static NOTES: std::sync::OnceLock<std::sync::Mutex<Vec<String>>> = std::sync::OnceLock::new();
    NOTES.get_or_init(|| std::sync::Mutex::new(Vec::new()))
}

/// Decides whether the file cudarc will load for `lib` (`cudarc`) may be used, given the
/// driver's version and the file the backend chose by [`candidates`] (`chosen`; `None`
/// when no candidate loaded). `Ok` names the file (with a note when it is another copy of
/// the chosen file's version: the same major.minor, or the same bytes); `Err` says exactly
/// what is wrong and what to do.
pub fn judge(
    lib: CudaLib,
    driver_version: i32,
    cudarc: Option<&Resolved>,
    chosen: Option<&Resolved>,
) -> Result<Judged, String> {
    let stem = lib.stem();
    let Some(c) = cudarc else {
        if let Some(ch) = chosen {
            // The versioned file loads, but none of cudarc's names (cudarc 0.19 never tries
            // `libnccl.so.2`, the name NCCL's packages install).
            let dir = ch.path.parent().map_or_else(|| ".".into(), |d| d.display().to_string());
            return Err(format!(
                "{} (`{}`) is installed, but cudarc loads lib{stem} only by names such as `lib{stem}.so`; \
                 add that link in a directory on LD_LIBRARY_PATH: \
                 `mkdir -p ~/.local/lib/crossbow && ln -sf {} ~/.local/lib/crossbow/lib{stem}.so` \
                 and add ~/.local/lib/crossbow to LD_LIBRARY_PATH (the file is in {dir})",
                ch.path.display(),
                ch.name,
                ch.path.display()
            ));
        }
        return Err(format!(
            "lib{stem}.so not found on the library path (tried {})",
            candidates(lib, driver_version).join(", ")
        ));
    };
    if is_stub(&c.path) {
        return Err(format!(
            "lib{stem} would be loaded from the stub {} (as `{}`), which cannot run anything; \
             remove its directory from LD_LIBRARY_PATH{}",
            c.path.display(),
            c.name,
            if lib == CudaLib::Driver { " (the driver installs libcuda.so.1)" } else { "" }
        ));
    }
    if lib.follows_toolkit()
        && let (Some(d), Some(m)) =
            (driver_major(driver_version), major_of_file(&c.path).or_else(|| major_of_file(Path::new(&c.name))))
        && m > d
    {
        return Err(format!(
            "{} (loaded as `{}`) is CUDA {m}, newer than the driver's CUDA {}.{}; \
             put lib{stem}.so.{d} ahead of it on LD_LIBRARY_PATH (or remove it)",
            c.path.display(),
            c.name,
            driver_version / 1000,
            (driver_version % 1000) / 10
        ));
    }
    if lib == CudaLib::Nccl
        && let Some(m) = major_of_file(&c.path).or_else(|| major_of_file(Path::new(&c.name)))
        && m != 2
    {
        return Err(format!(
            "{} (loaded as `{}`) is NCCL major version {m}; crossbow needs NCCL 2 (libnccl.so.2)",
            c.path.display(),
            c.name
        ));
    }
    let Some(ch) = chosen.filter(|ch| ch.path != c.path) else {
        return Ok(Judged { path: c.path.clone(), note: None });
    };
    let (cv, chv) = (c.major_minor(), ch.major_minor());
    let same = match (cv, chv) {
        (Some(a), Some(b)) => a == b,
        _ => same_bytes(&c.path, &ch.path),
    };
    let version =
        |v: Option<(i32, i32)>| v.map_or_else(|| "version unknown".to_string(), |(a, b)| format!("version {a}.{b}"));
    if same {
        let note = format!(
            "lib{stem}: two copies of {} — {} (`{}`, used: cudarc loads it first) and {} (`{}`); \
             the same version, so either serves",
            version(cv),
            c.path.display(),
            c.name,
            ch.path.display(),
            ch.name
        );
        return Ok(Judged { path: c.path.clone(), note: Some(note) });
    }
    let dir = "~/.local/lib/crossbow";
    Err(format!(
        "{} (found as `{}`, {}) would be loaded before {} (`{}`, {}), the file that \
         matches the driver's CUDA version; make cudarc load the chosen file by putting a link to it \
         first on the library path: `mkdir -p {dir} && ln -sf {} {dir}/lib{stem}.so` and \
         `export LD_LIBRARY_PATH={dir}:$LD_LIBRARY_PATH` (scripts/gpu-check.sh does this), \
         or remove the first from the library path",
        c.path.display(),
        c.name,
        version(cv),
        ch.path.display(),
        ch.name,
        version(chv),
        ch.path.display(),
    ))
}

/// Whether modules compiled by NVRTC `nvrtc` (major, minor) for a `cubin` (real
/// architecture) or PTX target load on a driver of `driver_version`: a newer major never
/// does; a newer minor of the same major only as CUBIN (PTX carries an ISA version the
/// older driver does not know). `Err` says what to do.
pub fn nvrtc_fits_driver(nvrtc: (i32, i32), driver_version: i32, cubin: bool) -> Result<(), String> {
    let Some(d) = driver_major(driver_version) else { return Ok(()) };
    let dm = (driver_version % 1000) / 10;
    let newer_major = nvrtc.0 > d;
    let newer_minor_ptx = nvrtc.0 == d && nvrtc.1 > dm && !cubin;
    if newer_major || newer_minor_ptx {
        return Err(format!(
            "NVRTC {}.{} is newer than the driver's CUDA {d}.{dm}: {} it compiles cannot be loaded; \
             put an NVRTC of CUDA {d}.{dm} or older (libnvrtc.so.{d}) ahead of it on LD_LIBRARY_PATH, \
             or update the driver",
            nvrtc.0,
            nvrtc.1,
            if newer_major { "modules" } else { "PTX" }
        ));
    }
    Ok(())
}

/// The CUDA library files mapped into a process, from the text of `/proc/<pid>/maps`:
/// `(library, path)` for each distinct file whose name starts with `libcuda.so`,
/// `libnvrtc`, `libcublas` (not cuBLASLt), `libcudnn` or `libnccl`, in order of first
/// appearance.
pub fn parse_maps(maps: &str) -> Vec<(CudaLib, PathBuf)> {
    let mut out: Vec<(CudaLib, PathBuf)> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path (the path may contain spaces).
        let Some(path) = line.split_whitespace().nth(5).and_then(|_| line.find('/').map(|i| &line[i..])) else {
            continue;
        };
        let p = PathBuf::from(path.trim_end());
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else { continue };
        let lib = if name.starts_with("libcuda.so") {
            CudaLib::Driver
        } else if name.starts_with("libnvrtc.so") || name.starts_with("libnvrtc64") {
            CudaLib::Nvrtc
        } else if name.starts_with("libcublas.so") {
            CudaLib::Cublas
        } else if name.starts_with("libcudnn.so") {
            CudaLib::Cudnn
        } else if name.starts_with("libnccl.so") {
            CudaLib::Nccl
        } else {
            continue;
        };
        if !out.iter().any(|(_, q)| q == &p) {
            out.push((lib, p));
        }
    }
    out
}

/// The CUDA libraries this process has loaded (from `/proc/self/maps`; empty where it
/// cannot be read).
pub fn loaded_libraries() -> Vec<(CudaLib, PathBuf)> {
    std::fs::read_to_string("/proc/self/maps").map(|m| parse_maps(&m)).unwrap_or_default()
}

#[cfg(feature = "cuda")]
pub(crate) use runtime::*;

#[cfg(feature = "cuda")]
mod runtime {
    use std::ffi::{CStr, c_char, c_int, c_void};
    use std::path::PathBuf;
    use std::sync::{Mutex, OnceLock};

    use super::{CudaLib, Resolved, candidates, judge};

    unsafe extern "C" {
        fn dlinfo(handle: *mut c_void, request: c_int, info: *mut c_void) -> c_int;
    }
    const RTLD_DI_LINKMAP: c_int = 2;

    #[repr(C)]
    struct LinkMap {
        l_addr: usize,
        l_name: *const c_char,
    }

    /// Loads `name` the way cudarc does (`dlopen` by name, default flags) and returns the
    /// library with the path the loader found.
    fn open(name: &str) -> Option<(libloading::os::unix::Library, PathBuf)> {
        // SAFETY: loading a CUDA library runs only its initialisers.
        let lib = unsafe { libloading::os::unix::Library::new(name) }.ok()?;
        let raw = lib.into_raw();
        let mut map: *const LinkMap = std::ptr::null();
        // SAFETY: `raw` is a live handle; RTLD_DI_LINKMAP writes one pointer.
        let rc = unsafe { dlinfo(raw, RTLD_DI_LINKMAP, (&mut map as *mut *const LinkMap).cast()) };
        // SAFETY: `raw` came from into_raw above.
        let lib = unsafe { libloading::os::unix::Library::from_raw(raw) };
        let path = if rc == 0 && !map.is_null() {
            // SAFETY: the loader's link map entry of a live library; l_name is a C string.
            let name = unsafe { (*map).l_name };
            // SAFETY: non-null, NUL-terminated, owned by the loader while the library lives.
            (!name.is_null()).then(|| PathBuf::from(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()))
        } else {
            None
        };
        let path = path.filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| PathBuf::from(name));
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        Some((lib, path))
    }

    /// The `(major, minor)` version the library `lib` at `path` reports of itself, asked
    /// through its own version function (found with `dlsym`; no GPU needed): `None` when the
    /// file does not load or lacks the function. Not for the driver (always `libcuda.so.1`).
    pub fn reported_version(lib: CudaLib, path: &std::path::Path) -> Option<(i32, i32)> {
        // SAFETY: loading a CUDA library runs only its initialisers (usually already loaded).
        let l = unsafe { libloading::os::unix::Library::new(path) }.ok()?;
        // SAFETY: the functions have these C signatures in the libraries'
        // headers, take only out-pointers or nothing, and need no initialisation.
        unsafe {
            match lib {
                CudaLib::Driver => None,
                CudaLib::Nvrtc => {
                    let f = l.get::<unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int>(b"nvrtcVersion\0").ok()?;
                    let (mut a, mut b) = (0, 0);
                    (f(&mut a, &mut b) == 0).then_some((a, b))
                }
                CudaLib::Cublas => {
                    let f = l.get::<unsafe extern "C" fn(c_int, *mut c_int) -> c_int>(b"cublasGetProperty\0").ok()?;
                    let (mut a, mut b) = (0, 0);
                    // libraryPropertyType: MAJOR_VERSION = 0, MINOR_VERSION = 1.
                    (f(0, &mut a) == 0 && f(1, &mut b) == 0).then_some((a, b))
                }
                CudaLib::Cudnn => {
                    let f = l.get::<unsafe extern "C" fn() -> usize>(b"cudnnGetVersion\0").ok()?;
                    let v = f() as i32; // cuDNN 9: major * 10000 + minor * 100 + patch
                    (v > 0).then_some((v / 10000, (v % 10000) / 100))
                }
                CudaLib::Nccl => {
                    let f = l.get::<unsafe extern "C" fn(*mut c_int) -> c_int>(b"ncclGetVersion\0").ok()?;
                    let mut v = 0;
                    // NCCL >= 2.9: major * 10000 + minor * 100 + patch.
                    (f(&mut v) == 0 && v > 0).then_some((v / 10000, (v % 10000) / 100))
                }
            }
        }
    }

    fn resolved(lib: CudaLib, name: String, path: PathBuf) -> Resolved {
        let version = reported_version(lib, &path);
        Resolved { name, path, version }
    }

    /// The file cudarc will load for `lib`: the first of its candidate names that loads.
    pub(crate) fn resolve_like_cudarc(lib: CudaLib) -> Option<Resolved> {
        cudarc::get_lib_name_candidates(lib.stem())
            .into_iter()
            .find_map(|n| open(&n).map(|(_, path)| resolved(lib, n, path)))
    }

    /// Libraries loaded by [`candidates`] and kept for the whole process.
    fn kept() -> &'static Mutex<Vec<libloading::os::unix::Library>> {
        static KEPT: OnceLock<Mutex<Vec<libloading::os::unix::Library>>> = OnceLock::new();
        KEPT.get_or_init(|| Mutex::new(Vec::new()))
    }

    /// Loads `lib` by its versioned [`candidates`] for the driver, keeps it loaded, and
    /// checks that cudarc will use the same file ([`judge`]). Returns the path.
    pub(crate) fn prepare(lib: CudaLib, driver_version: i32) -> Result<PathBuf, String> {
        let chosen = candidates(lib, driver_version).into_iter().find_map(|n| {
            let (l, path) = open(&n)?;
            if let Ok(mut k) = kept().lock() {
                k.push(l);
            }
            Some(resolved(lib, n, path))
        });
        let cudarc = resolve_like_cudarc(lib);
        let judged = judge(lib, driver_version, cudarc.as_ref(), chosen.as_ref())?;
        if let Some(note) = judged.note
            && let Ok(mut notes) = super::note_list().lock()
            && !notes.contains(&note)
        {
            notes.push(note);
        }
        Ok(judged.path)
    }

    /// Which of `names` the library file `path` does not export (looked up with `dlsym`,
    /// so that no cudarc function is called for a symbol it would panic on). `Err` when the
    /// file does not load.
    pub(crate) fn missing_symbols(path: &std::path::Path, names: &[&str]) -> Result<Vec<String>, String> {
        // SAFETY: loading a CUDA library runs only its initialisers (it is already loaded).
        let lib =
            unsafe { libloading::os::unix::Library::new(path) }.map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(names
            .iter()
            // SAFETY: only the address is looked up, never called here.
            .filter(|n| unsafe { lib.get::<*const c_void>(n.as_bytes()) }.is_err())
            .map(|n| n.to_string())
            .collect())
    }

    /// The driver's CUDA version from `libcuda.so.1` (never a stub, never through cudarc):
    /// `Err` when it does not load or is a stub.
    pub(crate) fn driver_version_direct() -> Result<i32, String> {
        let (lib, path) = open("libcuda.so.1").ok_or_else(|| "libcuda.so.1 could not be loaded".to_string())?;
        if super::is_stub(&path) {
            return Err(format!(
                "libcuda.so.1 resolves to the stub {}; remove its directory from LD_LIBRARY_PATH",
                path.display()
            ));
        }
        type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
        // SAFETY: cuDriverGetVersion has this signature and needs no cuInit.
        let f = unsafe { lib.get::<GetVersion>(b"cuDriverGetVersion\0") }
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer.
        let rc = unsafe { f(&mut v) };
        if let Ok(mut k) = kept().lock() {
            k.push(lib);
        }
        if rc != 0 {
            return Err(format!("cuDriverGetVersion failed with {rc} ({})", path.display()));
        }
        Ok(v)
    }

    #[cfg(test)]
    mod tests {
        use std::path::{Path, PathBuf};
        use std::process::Command;

        use super::super::{CudaLib, judge};
        use super::{reported_version, resolved};

        /// Compiles a fake `name` in `dir` exporting `nvrtcVersion` that reports `v`, with C
        /// `extra` to make files of one version differ; `None` (the test prints why) without
        /// a C compiler.
        fn fake_nvrtc(dir: &Path, name: &str, v: (i32, i32), extra: &str) -> Option<PathBuf> {
            std::fs::create_dir_all(dir).ok()?;
            let src = dir.join(format!("{name}.c"));
            let body =
                format!("int nvrtcVersion(int *a, int *b) {{ *a = {}; *b = {}; return 0; }}\n{extra}\n", v.0, v.1);
            std::fs::write(&src, body).ok()?;
            let out = dir.join(name);
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let ok = Command::new(&cc)
                .args(["-shared", "-fPIC", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                println!("fake NVRTC: skipped: no C compiler (`{cc}`)");
                return None;
            }
            Some(out)
        }

        /// Fake library folders, as a toolkit and a pip wheel lay them out: the versions are
        /// asked of the files themselves, two files of one version are accepted with a note,
        /// and two versions are refused.
        #[test]
        fn fake_nvrtc_folders_two_copies_of_one_version_pass_two_versions_fail() {
            let root = std::env::temp_dir().join(format!("crossbow-fake-nvrtc-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let Some(wheel) = fake_nvrtc(&root.join("site/nvidia/cu13/lib"), "libnvrtc.so.13", (13, 0), "") else {
                return;
            };
            let toolkit = fake_nvrtc(&root.join("cuda-13.0/lib64"), "libnvrtc.so", (13, 0), "int toolkit_build = 1;")
                .expect("second fake library");
            let newer = fake_nvrtc(&root.join("cuda-13.1/lib64"), "libnvrtc.so", (13, 1), "").expect("third");
            assert_eq!(reported_version(CudaLib::Nvrtc, &wheel), Some((13, 0)));
            assert_eq!(reported_version(CudaLib::Nvrtc, &newer), Some((13, 1)));
            assert_eq!(reported_version(CudaLib::Cublas, &wheel), None, "no cublasGetProperty in a fake NVRTC");
            let chosen = resolved(CudaLib::Nvrtc, "libnvrtc.so.13".into(), wheel.clone());
            let first = resolved(CudaLib::Nvrtc, "libnvrtc.so".into(), toolkit.clone());
            let j = judge(CudaLib::Nvrtc, 13000, Some(&first), Some(&chosen)).expect("same version accepted");
            assert_eq!(j.path, toolkit);
            assert!(j.note.is_some_and(|n| n.contains("two copies of version 13.0")));
            let other = resolved(CudaLib::Nvrtc, "libnvrtc.so".into(), newer);
            let e = judge(CudaLib::Nvrtc, 13000, Some(&other), Some(&chosen)).unwrap_err();
            assert!(e.contains("version 13.1") && e.contains("ln -sf"), "{e}");
            let _ = std::fs::remove_dir_all(&root);
        }

        /// The real NVRTC (CI's pip wheel, on `LD_LIBRARY_PATH`) copied to two folders: one
        /// library, accepted (reproduces the refusal the first GPU run would have hit).
        #[test]
        fn nvrtc_copied_to_two_folders_is_one_library() {
            let Some(real) = super::resolve_like_cudarc(CudaLib::Nvrtc) else {
                println!("nvrtc_copied_to_two_folders_is_one_library: skipped: no NVRTC library");
                return;
            };
            let root = std::env::temp_dir().join(format!("crossbow-two-nvrtc-{}", std::process::id()));
            let (a, b) = (root.join("toolkit/libnvrtc.so"), root.join("wheel/libnvrtc.so.13"));
            for p in [&a, &b] {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::copy(&real.path, p).unwrap();
            }
            let v = reported_version(CudaLib::Nvrtc, &a);
            assert!(v.is_some() && v == real.version, "{v:?} vs {:?}", real.version);
            let j = judge(
                CudaLib::Nvrtc,
                13000,
                Some(&resolved(CudaLib::Nvrtc, "libnvrtc.so".into(), a.clone())),
                Some(&resolved(CudaLib::Nvrtc, "libnvrtc.so.13".into(), b)),
            )
            .expect("two copies of one NVRTC");
            assert_eq!(j.path, a);
            let _ = std::fs::remove_dir_all(&root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, path: &str) -> Resolved {
        Resolved { name: name.into(), path: PathBuf::from(path), version: None }
    }

    fn rv(name: &str, path: &str, v: (i32, i32)) -> Resolved {
        Resolved { version: Some(v), ..r(name, path) }
    }

    /// A toolkit's `libnvrtc.so` and a wheel's `libnvrtc.so.13` of one version are both
    /// accepted, with a note naming the file used; of two versions, refused with the link
    /// that makes cudarc load the chosen one.
    #[test]
    fn two_nvrtc_copies_of_one_version_are_accepted_two_versions_are_not() {
        let toolkit = rv("libnvrtc.so", "/usr/local/cuda-13.0/lib64/libnvrtc.so.13.0.88", (13, 0));
        let wheel = rv("libnvrtc.so.13", "/site/nvidia/cu13/lib/libnvrtc.so.13", (13, 0));
        let j = judge(CudaLib::Nvrtc, 13000, Some(&toolkit), Some(&wheel)).unwrap();
        assert_eq!(j.path, toolkit.path);
        let note = j.note.unwrap();
        assert!(
            note.contains("two copies of version 13.0") && note.contains("cuda-13.0") && note.contains("/site/"),
            "{note}"
        );
        // The versions from the file names when the libraries could not be asked.
        let named = r("libnvrtc.so", "/usr/local/cuda-13.0/lib64/libnvrtc.so.13.0.88");
        let wheel_named = r("libnvrtc.so.13", "/site/nvidia/cu13/lib/libnvrtc.so.13.0.48");
        assert!(judge(CudaLib::Nvrtc, 13000, Some(&named), Some(&wheel_named)).unwrap().note.is_some());
        // Another minor: refused, saying how to make cudarc load the chosen file.
        let older = rv("libnvrtc.so", "/usr/local/cuda-13.1/lib64/libnvrtc.so.13.1.20", (13, 1));
        let e = judge(CudaLib::Nvrtc, 13000, Some(&older), Some(&wheel)).unwrap_err();
        assert!(e.contains("version 13.1") && e.contains("version 13.0"), "{e}");
        assert!(e.contains("ln -sf /site/nvidia/cu13/lib/libnvrtc.so.13") && e.contains("libnvrtc.so`"), "{e}");
        // The same file: no note.
        assert_eq!(judge(CudaLib::Nvrtc, 13000, Some(&wheel), Some(&wheel)).unwrap().note, None);
    }

    /// Versions unknown on both sides: two files of the same bytes are one library.
    #[test]
    fn two_identical_files_are_one_library() {
        let dir = std::env::temp_dir().join(format!("crossbow-libs-same-{}", std::process::id()));
        let (a, b, c) = (dir.join("a/libcudnn.so.9"), dir.join("b/libcudnn.so"), dir.join("c/libcudnn.so"));
        for (p, bytes) in [(&a, b"same"), (&b, b"same"), (&c, b"diff")] {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        let chosen = r("libcudnn.so.9", a.to_str().unwrap());
        let twin = r("libcudnn.so", b.to_str().unwrap());
        assert!(judge(CudaLib::Cudnn, 13000, Some(&twin), Some(&chosen)).unwrap().note.is_some());
        let other = r("libcudnn.so", c.to_str().unwrap());
        assert!(judge(CudaLib::Cudnn, 13000, Some(&other), Some(&chosen)).unwrap_err().contains("version unknown"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn candidates_follow_the_driver_version() {
        assert_eq!(candidates(CudaLib::Driver, 13000), ["libcuda.so.1"]);
        assert_eq!(candidates(CudaLib::Driver, 0), ["libcuda.so.1"]);
        assert_eq!(candidates(CudaLib::Nvrtc, 13000), ["libnvrtc.so.13", "libnvrtc.so.12"]);
        assert_eq!(candidates(CudaLib::Nvrtc, 12040), ["libnvrtc.so.12"]);
        assert_eq!(candidates(CudaLib::Cublas, 12090), ["libcublas.so.12"]);
        assert_eq!(candidates(CudaLib::Cublas, 0), ["libcublas.so.13", "libcublas.so.12"]);
        assert!(candidates(CudaLib::Nvrtc, 11080).is_empty());
        assert_eq!(candidates(CudaLib::Cudnn, 12040), ["libcudnn.so.9"]);
        assert_eq!(candidates(CudaLib::Nccl, 13000), ["libnccl.so.2"]);
        // Never an unversioned name.
        for lib in CudaLib::ALL {
            for v in [0, 12040, 13000] {
                assert!(candidates(lib, v).iter().all(|n| major_of_file(Path::new(n)).is_some()), "{lib:?}");
            }
        }
    }

    #[test]
    fn stubs_and_versions_are_recognised() {
        assert!(is_stub(Path::new("/usr/local/cuda/lib64/stubs/libcuda.so")));
        assert!(is_stub(Path::new("/opt/cuda/targets/x86_64-linux/lib/stubs/libcuda.so.1")));
        assert!(!is_stub(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1")));
        assert!(!is_stub(Path::new("/home/stubsy/libcuda.so.1")));
        assert_eq!(major_of_file(Path::new("/x/libnvrtc.so.13.0.88")), Some(13));
        assert_eq!(major_of_file(Path::new("libcublas.so.12")), Some(12));
        assert_eq!(major_of_file(Path::new("/x/libnvrtc.so")), None);
    }

    #[test]
    fn judge_refuses_stubs_newer_majors_and_other_files() {
        let drv = r("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.575.57.08");
        assert_eq!(judge(CudaLib::Driver, 12090, Some(&drv), Some(&drv)).unwrap().path, drv.path);
        // A stub first on the path: refused, naming the file.
        let stub = r("libcuda.so", "/usr/local/cuda/lib64/stubs/libcuda.so");
        let e = judge(CudaLib::Driver, 12090, Some(&stub), Some(&drv)).unwrap_err();
        assert!(e.contains("stub /usr/local/cuda/lib64/stubs/libcuda.so") && e.contains("LD_LIBRARY_PATH"), "{e}");
        // An NVRTC 13 on a CUDA 12.4 driver: refused, saying which one to use.
        let n13 = r("libnvrtc.so", "/opt/cuda-13/lib64/libnvrtc.so.13.0.88");
        let e = judge(CudaLib::Nvrtc, 12040, Some(&n13), None).unwrap_err();
        assert!(e.contains("CUDA 13, newer than the driver's CUDA 12.4") && e.contains("libnvrtc.so.12"), "{e}");
        // The same file on a CUDA 13 driver is fine.
        assert!(judge(CudaLib::Nvrtc, 13000, Some(&n13), Some(&n13)).is_ok());
        // The versioned name decides when the file name has no version.
        let unversioned = r("libcublas.so.13", "/x/libcublas.so");
        assert!(judge(CudaLib::Cublas, 12080, Some(&unversioned), None).is_err());
        // cudarc would load another file than the one matching the driver: refused.
        let n12 = r("libnvrtc.so.12", "/site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
        let other = r("libnvrtc.so", "/usr/local/cuda-12.9/lib64/libnvrtc.so.12.9.86");
        let e = judge(CudaLib::Nvrtc, 12090, Some(&other), Some(&n12)).unwrap_err();
        assert!(e.contains("would be loaded before /site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"), "{e}");
        // Unknown driver (compile-only machine): only the stub check applies.
        assert!(judge(CudaLib::Nvrtc, 0, Some(&n13), Some(&n13)).is_ok());
        let e = judge(CudaLib::Nvrtc, 0, None, None).unwrap_err();
        assert!(e.contains("libnvrtc.so not found") && e.contains("libnvrtc.so.13, libnvrtc.so.12"), "{e}");
    }

    #[test]
    fn nccl_is_loaded_as_libnccl_so_2_and_a_missing_link_is_explained() {
        // NCCL's name does not depend on the driver (none on a machine without a GPU).
        assert_eq!(candidates(CudaLib::Nccl, 0), ["libnccl.so.2"]);
        let real = r("libnccl.so.2", "/site/nvidia/nccl/lib/libnccl.so.2");
        // cudarc finds no name of its list, though libnccl.so.2 loads: say which link to make.
        let e = judge(CudaLib::Nccl, 13000, None, Some(&real)).unwrap_err();
        assert!(e.contains("/site/nvidia/nccl/lib/libnccl.so.2") && e.contains("ln -sf"), "{e}");
        assert!(e.contains("libnccl.so`") && e.contains("LD_LIBRARY_PATH"), "{e}");
        // Nothing at all: the plain "not found".
        let e = judge(CudaLib::Nccl, 13000, None, None).unwrap_err();
        assert!(e.contains("libnccl.so not found") && e.contains("libnccl.so.2"), "{e}");
        // The link in place: cudarc's `libnccl.so` resolves to the same file.
        let link = r("libnccl.so", "/site/nvidia/nccl/lib/libnccl.so.2");
        assert_eq!(judge(CudaLib::Nccl, 13000, Some(&link), Some(&real)).unwrap().path, real.path);
        // A stub or another file first, or another major: refused.
        let stub = r("libnccl.so", "/opt/nccl/stubs/libnccl.so");
        assert!(judge(CudaLib::Nccl, 13000, Some(&stub), Some(&real)).unwrap_err().contains("stub"));
        let other = r("libnccl.so", "/usr/lib/libnccl.so.2.18.1");
        assert!(judge(CudaLib::Nccl, 0, Some(&other), Some(&real)).unwrap_err().contains("would be loaded before"));
        let three = r("libnccl.so", "/x/libnccl.so.3.0.0");
        assert!(judge(CudaLib::Nccl, 0, Some(&three), None).unwrap_err().contains("NCCL major version 3"));
    }

    #[test]
    fn nvrtc_must_not_be_newer_than_the_driver() {
        assert!(nvrtc_fits_driver((13, 0), 13000, false).is_ok());
        assert!(nvrtc_fits_driver((12, 9), 13000, false).is_ok());
        let e = nvrtc_fits_driver((13, 0), 12080, true).unwrap_err();
        assert!(e.contains("NVRTC 13.0 is newer than the driver's CUDA 12.8") && e.contains("libnvrtc.so.12"), "{e}");
        // Same major, newer minor: CUBIN loads, PTX does not.
        assert!(nvrtc_fits_driver((12, 9), 12040, true).is_ok());
        assert!(nvrtc_fits_driver((12, 9), 12040, false).unwrap_err().contains("PTX"));
        // Unknown driver version: nothing to check.
        assert!(nvrtc_fits_driver((13, 0), 0, false).is_ok());
    }

    #[test]
    fn maps_list_the_cuda_libraries_once() {
        let maps = "\
7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.575.57.08
7f01-7f02 r-xp 00001000 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.575.57.08
7f02-7f03 r--p 00000000 08:01 2 /venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13
7f03-7f04 r--p 00000000 08:01 3 /venv/nvidia/cublas/lib/libcublasLt.so.12
7f04-7f05 r--p 00000000 08:01 4 /venv/nvidia/cublas/lib/libcublas.so.12
7f05-7f06 r--p 00000000 08:01 5 /my dir/libcudnn.so.9
7f06-7f07 rw-p 00000000 00:00 0 
7f07-7f08 r--p 00000000 08:01 6 /usr/lib/libc.so.6
7f08-7f09 r--p 00000000 08:01 7 /nccl/libnccl.so.2.27.3
";
        let got = parse_maps(maps);
        let want = [
            (CudaLib::Driver, "/usr/lib/x86_64-linux-gnu/libcuda.so.575.57.08"),
            (CudaLib::Nvrtc, "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13"),
            (CudaLib::Cublas, "/venv/nvidia/cublas/lib/libcublas.so.12"),
            (CudaLib::Cudnn, "/my dir/libcudnn.so.9"),
            (CudaLib::Nccl, "/nccl/libnccl.so.2.27.3"),
        ];
        assert_eq!(got, want.map(|(l, p)| (l, PathBuf::from(p))));
    }
}
