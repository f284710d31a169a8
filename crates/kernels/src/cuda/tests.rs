//! CPU-only tests of the CUDA backend: the kernel lists, driver detection, NVRTC
//! compilation of every source (tests named `nvrtc_*`, which CI runs with the PyPI NVRTC),
//! and the disk cache. The GPU backend itself runs every op folder's tests on the kernel
//! emulator (their `emu` variants).

use std::path::PathBuf;

#[cfg(feature = "cuda")]
use super::cache::{self, Origin, Target};
use super::common::env;
#[cfg(feature = "cuda")]
use super::launch::KernelSource;
use super::launch::sources;
use super::*;
#[cfg(feature = "cuda")]
use crate::KernelError;

#[cfg(feature = "cuda")]
/// NVRTC present, or skip (a failure when `CROSSBOW_REQUIRE_NVRTC=1`).
fn nvrtc_or_skip(test: &str) -> bool {
    if nvrtc_available() {
        return true;
    }
    assert!(!env::flag(env::REQUIRE_NVRTC), "{test}: libnvrtc not found but {} is set", env::REQUIRE_NVRTC);
    println!("{test}: skipped: no NVRTC library");
    false
}

#[test]
#[cfg(feature = "cuda")]
fn driver_detection_never_panics() {
    let status = driver_status();
    println!("driver: {}", status.describe());
    match device_count() {
        Ok(n) => assert_eq!(n, status.devices()),
        Err(KernelError::NoCudaDriver(reason)) => {
            let msg = KernelError::NoCudaDriver(reason).to_string();
            assert!(msg.starts_with("no CUDA driver found"), "{msg}");
            assert!(matches!(CudaDevice::open(0), Err(KernelError::NoCudaDriver(_))));
            assert!(devices().is_err());
        }
        Err(e) => println!("driver present but failing: {e}"),
    }
}

#[test]
fn every_kernel_is_listed_once_and_named_cb() {
    let mut seen = std::collections::HashSet::new();
    let mut modules = std::collections::HashSet::new();
    for s in sources() {
        assert!(modules.insert(s.module), "module {} listed twice", s.module);
        for k in s.kernels {
            assert!(k.starts_with("cb_"), "{k}");
            assert!(seen.insert(*k), "{k} listed twice");
            assert!(s.code.contains(&format!("void {k}(")), "{k} not defined in {}.cu", s.module);
        }
        for k in s.cooperative {
            assert!(s.kernels.contains(k), "cooperative {k} not in the kernel list");
        }
        // A kernel using shared memory must be launched as cooperative by the emulator.
        for chunk in s.code.split("extern \"C\" __global__ void ").skip(1) {
            let name = chunk.split('(').next().unwrap_or_default();
            if chunk.contains("__shared__") || chunk.contains("cb_block_sum") {
                assert!(s.is_cooperative(name), "{name} uses shared memory but is not listed as cooperative");
            }
        }
    }
}

#[cfg(feature = "cuda")]
fn compile_all(test: &str, arch: &str) {
    if !nvrtc_or_skip(test) {
        return;
    }
    let t = std::time::Instant::now();
    let out = compile_all_for_arch(arch).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.len(), sources().count());
    for c in &out {
        assert!(c.ptx_len > 0, "{}: empty PTX", c.module);
        assert!(c.cubin_len > 0, "{}: no CUBIN for {arch}", c.module);
        assert!(c.log.is_empty(), "{}.cu compiled with warnings for {arch}:\n{}", c.module, c.log);
        println!("{arch} {:>13}: PTX {:>6} B, CUBIN {:>6} B", c.module, c.ptx_len, c.cubin_len);
    }
    println!("{test}: {} sources in {:.2?} with NVRTC {:?}", out.len(), t.elapsed(), nvrtc_version());
}

#[test]
#[cfg(feature = "cuda")]
fn nvrtc_compiles_every_kernel_sm80() {
    compile_all("nvrtc_compiles_every_kernel_sm80", "sm_80");
}

#[test]
#[cfg(feature = "cuda")]
fn nvrtc_compiles_every_kernel_sm90() {
    compile_all("nvrtc_compiles_every_kernel_sm90", "sm_90");
}

#[test]
#[cfg(feature = "cuda")]
fn nvrtc_compiles_ptx_for_a_virtual_arch_and_rejects_bad_archs() {
    if !nvrtc_or_skip("nvrtc_compiles_ptx_for_a_virtual_arch") {
        return;
    }
    let out = compile_all_for_arch("compute_90").unwrap_or_else(|e| panic!("{e}"));
    assert!(out.iter().all(|c| c.ptx_len > 0 && c.cubin_len == 0));
    assert!(compile_all_for_arch("90").is_err());
    assert!(compile_all_for_arch("sm_").is_err());
}

#[test]
#[cfg(feature = "cuda")]
fn nvrtc_target_selection() {
    if !nvrtc_or_skip("nvrtc_target_selection") {
        return;
    }
    // A known architecture gets a CUBIN (no JIT at load); an unknown newer one the newest
    // PTX this NVRTC knows; an older-than-supported one is an error, not a panic.
    assert_eq!(Target::for_device((9, 0)).unwrap(), Target::Cubin("sm_90".into()));
    assert_eq!(Target::for_device((8, 0)).unwrap(), Target::Cubin("sm_80".into()));
    match Target::for_device((99, 9)).unwrap() {
        Target::Ptx(a) => assert!(a.starts_with("compute_"), "{a}"),
        other => panic!("{other:?}"),
    }
    assert!(Target::for_device((1, 0)).is_err());
}

#[cfg(feature = "cuda")]
const BROKEN: KernelSource = KernelSource {
    module: "broken",
    code: "extern \"C\" __global__ void cb_broken(float* y) { y[0] = undefined_name; }\n",
    kernels: &["cb_broken"],
    cooperative: &[],
};

#[test]
#[cfg(feature = "cuda")]
fn nvrtc_compile_errors_carry_the_log() {
    if !nvrtc_or_skip("nvrtc_compile_errors_carry_the_log") {
        return;
    }
    let e = nvrtc::compile(&BROKEN, "sm_90").unwrap_err().to_string();
    assert!(e.contains("broken.cu") && e.contains("undefined_name"), "{e}");
    // Line numbers refer to the .cu file, not the prelude.
    assert!(e.contains("broken.cu(1)"), "{e}");
}

#[cfg(feature = "cuda")]
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let d = std::env::temp_dir().join(format!("crossbow-kcache-{tag}-{}-{nanos}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[cfg(feature = "cuda")]
fn only_file(dir: &std::path::Path) -> PathBuf {
    let files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[test]
#[cfg(feature = "cuda")]
fn nvrtc_disk_cache_hits_and_survives_corruption() {
    if !nvrtc_or_skip("nvrtc_disk_cache_hits_and_survives_corruption") {
        return;
    }
    let dir = temp_dir("cache");
    let src = &crate::dropout::cuda::SOURCES[0];
    let target = Target::Cubin("sm_90".into());
    let (img, origin, key) = cache::image(src, &target, Some(&dir), false).unwrap();
    assert_eq!(origin, Origin::Compiled);
    assert!(img.cubin && !img.bytes.is_empty());
    let file = only_file(&dir);
    assert!(file.file_name().is_some_and(|n| n.to_string_lossy().starts_with("dropout-sm_90-")));

    let (again, origin, _) = cache::image(src, &target, Some(&dir), false).unwrap();
    assert_eq!((origin, &again), (Origin::Disk, &img));

    // Flip one payload byte, truncate, replace with garbage, or empty: ignored, recompiled,
    // rewritten.
    let good = std::fs::read(&file).unwrap();
    let mut flipped = good.clone();
    flipped[40] ^= 0x55;
    for bad in [flipped, good[..good.len() / 2].to_vec(), b"not a cache file".to_vec(), Vec::new()] {
        assert!(cache::decode(key, &bad).is_none());
        std::fs::write(&file, &bad).unwrap();
        let before = kernel_cache_stats().disk_rejected;
        let (img2, origin, _) = cache::image(src, &target, Some(&dir), false).unwrap();
        assert_eq!((origin, &img2), (Origin::Compiled, &img));
        assert!(kernel_cache_stats().disk_rejected > before);
        assert_eq!(std::fs::read(&file).unwrap(), good, "the entry was rewritten");
    }
    // Another key never matches.
    assert!(cache::decode(key ^ 1, &good).is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg(feature = "cuda")]
fn nvrtc_unwritable_cache_dir_is_not_fatal() {
    if !nvrtc_or_skip("nvrtc_unwritable_cache_dir_is_not_fatal") {
        return;
    }
    // A regular file where the directory should be.
    let blocker = temp_dir("blocker");
    std::fs::write(&blocker, b"x").unwrap();
    let before = kernel_cache_stats().disk_write_errors;
    let (img, origin, _) =
        cache::image(&crate::augment::cuda::SOURCES[0], &Target::Ptx("compute_80".into()), Some(&blocker), false)
            .unwrap();
    assert_eq!(origin, Origin::Compiled);
    assert!(!img.cubin && img.bytes.starts_with(b"//"));
    assert!(kernel_cache_stats().disk_write_errors > before);
    let _ = std::fs::remove_file(&blocker);
}

#[test]
fn kernel_cache_dir_follows_the_environment() {
    // Only reads the environment; the default depends on HOME / XDG_CACHE_HOME.
    match std::env::var_os(env::KERNEL_CACHE) {
        Some(v) if v.is_empty() || v == "0" || v == "off" => assert_eq!(kernel_cache_dir(), None),
        Some(v) => assert_eq!(kernel_cache_dir(), Some(PathBuf::from(v))),
        None => {
            if let Some(d) = kernel_cache_dir() {
                assert!(d.ends_with("crossbow/kernels"), "{}", d.display());
            }
        }
    }
}

#[test]
fn emulator_signature_check_is_exact() {
    use super::emu::check_signature;
    use super::launch::KernelArg as A;
    let ok = [A::F32(1.0), A::Ptr(8), A::I64(3)];
    check_signature("k", "fpl", &ok).unwrap();
    // An i32 where the kernel takes an i64: the GPU would read 4 undefined bytes.
    let e = check_signature("k", "fpl", &[A::F32(1.0), A::Ptr(8), A::I32(3)]).unwrap_err().to_string();
    assert!(e.contains("k parameter 2 is an i64") && e.contains("an int (32-bit)"), "{e}");
    // Signedness, kind and count matter too.
    assert!(check_signature("k", "L", &[A::I64(1)]).is_err());
    assert!(check_signature("k", "l", &[A::U64(1)]).is_err());
    assert!(check_signature("k", "f", &[A::I32(1)]).is_err());
    assert!(check_signature("k", "p", &[A::I64(1)]).is_err());
    assert!(check_signature("k", "d", &[A::F32(1.0)]).is_err());
    assert!(check_signature("k", "?", &[A::I64(1)]).is_err());
    let e = check_signature("k", "fpl", &ok[..2]).unwrap_err().to_string();
    assert!(e.contains("takes 3 parameters"), "{e}");
    assert!(check_signature("k", "fp", &ok).is_err());
}

/// The emulator refuses a launch whose argument widths differ from the compiled kernel's
/// parameter types (today's launches all pass: every op's `emu` tests run through it).
#[test]
fn emulator_rejects_a_wrong_width_argument() {
    use super::launch::{KernelArg as A, Launcher};
    use crate::Backend;
    let Some(be) = emu::emu_backend().unwrap() else {
        println!("emulator_rejects_a_wrong_width_argument: skipped: no C++ compiler");
        return;
    };
    let mut buf = be.alloc(100).unwrap();
    let p = be.launcher.addr_mut(&mut buf).unwrap();
    // cb_fill(float value, float* y, i64 n).
    be.launcher.launch("cb_fill", 1, &[A::F32(2.0), A::Ptr(p), A::I64(100)]).unwrap();
    for bad in [
        vec![A::F32(3.0), A::Ptr(p), A::I32(100)],
        vec![A::F32(3.0), A::Ptr(p), A::U64(100)],
        vec![A::I32(3), A::Ptr(p), A::I64(100)],
        vec![A::F32(3.0), A::Ptr(p)],
        vec![A::F32(3.0), A::Ptr(p), A::I64(100), A::I64(1)],
    ] {
        let e = be.launcher.launch("cb_fill", 1, &bad).unwrap_err().to_string();
        assert!(e.contains("cb_fill"), "{e}");
    }
    // Nothing ran: the buffer still holds the first fill.
    let mut host = vec![0.0f32; 100];
    be.download(crate::View::whole(&buf), &mut host).unwrap();
    assert!(host.iter().all(|&v| v == 2.0));
}

/// The NVRTC file cudarc loads is the one the library check resolved, and the process maps
/// (what `crossbow doctor` prints) name it.
#[test]
#[cfg(feature = "cuda")]
fn nvrtc_loaded_library_is_the_checked_one() {
    if !nvrtc_or_skip("nvrtc_loaded_library_is_the_checked_one") {
        return;
    }
    nvrtc_version().unwrap();
    let resolved = libs::resolve_like_cudarc(libs::CudaLib::Nvrtc).expect("cudarc's NVRTC");
    assert!(!libs::is_stub(&resolved.path));
    let loaded = libs::loaded_libraries();
    println!("resolved {resolved:?}; loaded {loaded:?}");
    assert!(
        loaded
            .iter()
            .any(|(l, p)| *l == libs::CudaLib::Nvrtc && std::fs::canonicalize(p).ok().as_ref() == Some(&resolved.path)),
        "{resolved:?} not in {loaded:?}"
    );
}
