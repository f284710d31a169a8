//! Types shared by the real CUDA module and the stub compiled without the `cuda` feature,
//! so callers need no `cfg`.

use std::path::PathBuf;

/// Environment variables the CUDA backend and its tests read.
pub mod env {
    /// `1`: never use cuDNN (convolution and batch norm run on the crate's own kernels).
    pub const DISABLE_CUDNN: &str = "CROSSBOW_DISABLE_CUDNN";
    /// Directory of the on-disk kernel cache; empty, `0` or `off` disables it.
    pub const KERNEL_CACHE: &str = "CROSSBOW_KERNEL_CACHE";
    /// `1`: behave as if no CUDA driver were installed (tests the CPU-only paths on a GPU
    /// machine).
    pub const FORCE_NO_CUDA: &str = "CROSSBOW_FORCE_NO_CUDA";
    /// `1`: synchronise after every kernel launch, so an asynchronous fault names its kernel
    /// (slow; for debugging).
    pub const SYNC_LAUNCHES: &str = "CROSSBOW_CUDA_SYNC";
    /// `1`: opening a device (or making a backend) fails when cuDNN is not actually used —
    /// missing, incomplete, disabled, or no handle — instead of falling back to the crate's
    /// kernels (`scripts/gpu-check.sh` sets it where cuDNN is installed).
    pub const REQUIRE_CUDNN: &str = "CROSSBOW_REQUIRE_CUDNN";
    /// `1`: GPU tests fail instead of printing `skipped: ...` (set by `scripts/gpu-check.sh`).
    pub const REQUIRE_GPU: &str = "CROSSBOW_REQUIRE_GPU";
    /// `1`: the NVRTC compile tests fail instead of skipping when libnvrtc is absent (CI).
    pub const REQUIRE_NVRTC: &str = "CROSSBOW_REQUIRE_NVRTC";
    /// `1`: let cuDNN use its fastest convolution algorithms even where they are not
    /// deterministic (atomics in the backward passes), giving up bit-identical reruns.
    pub const CUDNN_NONDETERMINISTIC: &str = "CROSSBOW_CUDNN_NONDETERMINISTIC";
    /// `0`: issue every learner's iteration launch by launch instead of replaying it as a
    /// CUDA graph (`crossbow_kernels::cuda::replay`; graphs are on by default). Values other
    /// than 0/1 (true/false, yes/no, on/off) are an error when a device is opened.
    pub const GRAPHS: &str = "CROSSBOW_CUDA_GRAPHS";

    /// Pinned staging buffers each learner's uploads rotate through, 1-64 (default 4; `1` is
    /// the single buffer of earlier versions, for comparing).
    pub const STAGING_BUFFERS: &str = "CROSSBOW_STAGING_BUFFERS";

    /// An error naming the variable and its value when [`GRAPHS`] or [`STAGING_BUFFERS`] is
    /// set to something it does not take (checked when a device is opened).
    pub fn check() -> Result<(), String> {
        check_values(std::env::var(GRAPHS).ok().as_deref(), std::env::var(STAGING_BUFFERS).ok().as_deref())
    }

    pub(crate) fn check_values(graphs: Option<&str>, staging: Option<&str>) -> Result<(), String> {
        if let Some(v) = graphs {
            let ok =
                ["0", "1", "true", "false", "yes", "no", "on", "off"].contains(&v.trim().to_ascii_lowercase().as_str());
            if !ok {
                return Err(format!("{GRAPHS}={v:?}: expected 0 (plain launches) or 1 (CUDA graphs, the default)"));
            }
        }
        if let Some(v) = staging.filter(|v| staging_buffers(v).is_none()) {
            return Err(format!("{STAGING_BUFFERS}={v:?}: expected a number of pinned buffers from 1 to 64"));
        }
        Ok(())
    }

    /// The number of staging buffers a value of [`STAGING_BUFFERS`] asks for.
    pub(crate) fn staging_buffers(v: &str) -> Option<usize> {
        v.trim().parse::<usize>().ok().filter(|n| (1..=64).contains(n))
    }

    /// True when the variable is set to `0`, `false`, `no` or `off`.
    pub fn off(name: &str) -> bool {
        matches!(
            std::env::var(name).as_deref().map(str::trim),
            Ok("0" | "false" | "no" | "off" | "FALSE" | "NO" | "OFF")
        )
    }

    /// True when the variable is set to `1`, `true` or `yes`.
    pub fn flag(name: &str) -> bool {
        matches!(std::env::var(name).as_deref().map(str::trim), Ok("1" | "true" | "yes" | "TRUE" | "YES"))
    }
}

/// Whether CUDA can be used on this machine; from [`super::driver_status`], which never
/// panics (the driver library is looked for before the first driver call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverStatus {
    /// Built without the `cuda` feature.
    NotCompiled,
    /// No loadable `libcuda.so` (or [`env::FORCE_NO_CUDA`] is set).
    NoDriver {
        /// Why: `libcuda.so` could not be loaded, or [`env::FORCE_NO_CUDA`] is set.
        reason: String,
    },
    /// The driver library loaded but could not be initialised.
    Failed {
        /// The driver's error from initialisation.
        reason: String,
    },
    /// The driver works; `devices` may be 0.
    Ready {
        /// GPUs the driver reports.
        devices: usize,
        /// The driver's CUDA version as `1000 * major + 10 * minor` (12040 for 12.4).
        driver_version: i32,
    },
}

impl DriverStatus {
    /// Number of usable GPUs (0 unless [`DriverStatus::Ready`]).
    pub fn devices(&self) -> usize {
        match self {
            DriverStatus::Ready { devices, .. } => *devices,
            _ => 0,
        }
    }

    /// One line for logs and `--devices auto` reports.
    pub fn describe(&self) -> String {
        match self {
            DriverStatus::NotCompiled => "built without CUDA support".into(),
            DriverStatus::NoDriver { reason } => format!("no CUDA driver found ({reason})"),
            DriverStatus::Failed { reason } => format!("the CUDA driver failed to initialise ({reason})"),
            DriverStatus::Ready { devices, driver_version } => format!(
                "CUDA driver {}.{} with {devices} device{}",
                driver_version / 1000,
                (driver_version % 1000) / 10,
                if *devices == 1 { "" } else { "s" }
            ),
        }
    }
}

/// A GPU as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The driver's index of the device, `0..device_count()`.
    pub ordinal: usize,
    /// The marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// `(major, minor)`, e.g. `(9, 0)` for an H100/H200.
    pub compute_capability: (i32, i32),
    /// Bytes of device memory.
    pub total_memory: usize,
}

impl DeviceInfo {
    /// The NVRTC architecture of the device, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.compute_capability.0, self.compute_capability.1)
    }
}

/// Free and total device memory in bytes (for the tuner's memory check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes not allocated by any process at the time of the query.
    pub free: usize,
    /// Bytes of device memory in all.
    pub total: usize,
}

/// How convolution and batch norm run on a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudnnStatus {
    /// Through cuDNN.
    Enabled {
        /// cuDNN's version as `cudnnGetVersion` reports it, e.g. 90100 for 9.1.0.
        version: usize,
    },
    /// Through the crate's own kernels (im2col + cuBLAS, batch-norm kernels), and why.
    Disabled {
        /// Why: disabled by option, or the library is missing, incomplete or older than 9.0.
        reason: String,
    },
}

impl CudnnStatus {
    /// True for [`CudnnStatus::Enabled`].
    pub fn is_enabled(&self) -> bool {
        matches!(self, CudnnStatus::Enabled { .. })
    }
}

/// Options of a [`super::CudaDevice`]; [`CudaOptions::from_env`] is what
/// `CudaDevice::open` uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// Use cuDNN when its library is present (default true; [`env::DISABLE_CUDNN`] clears it).
    pub cudnn: bool,
    /// Synchronise after every launch (default false; [`env::SYNC_LAUNCHES`]).
    pub sync_launches: bool,
    /// Fail when cuDNN is not actually used (default false; [`env::REQUIRE_CUDNN`]).
    pub require_cudnn: bool,
    /// On-disk kernel cache directory, `None` for none ([`kernel_cache_dir`]).
    pub kernel_cache: Option<PathBuf>,
    /// Only deterministic cuDNN convolution algorithms, so that a run repeated gives the
    /// same bits (default true; [`env::CUDNN_NONDETERMINISTIC`] clears it).
    pub deterministic: bool,
    /// Replay each learner's forward and backward pass as a CUDA graph when it is identical
    /// to the last one (default true; [`env::GRAPHS`] `=0` clears it; off while
    /// `sync_launches`).
    pub graphs: bool,
    /// Pinned staging buffers per learner for uploads, used in turn (default 4: an
    /// iteration uploads images and labels, so the host can stage iteration t + 1 while the
    /// device still copies iteration t's; at least 1; [`env::STAGING_BUFFERS`]).
    pub staging_buffers: usize,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            cudnn: true,
            sync_launches: false,
            require_cudnn: false,
            kernel_cache: kernel_cache_dir(),
            deterministic: true,
            graphs: true,
            staging_buffers: 4,
        }
    }
}

impl CudaOptions {
    /// Defaults adjusted by [`env::DISABLE_CUDNN`], [`env::SYNC_LAUNCHES`] and
    /// [`env::REQUIRE_CUDNN`].
    pub fn from_env() -> Self {
        CudaOptions {
            cudnn: !env::flag(env::DISABLE_CUDNN),
            sync_launches: env::flag(env::SYNC_LAUNCHES),
            require_cudnn: env::flag(env::REQUIRE_CUDNN),
            deterministic: !env::flag(env::CUDNN_NONDETERMINISTIC),
            graphs: !env::off(env::GRAPHS),
            staging_buffers: std::env::var(env::STAGING_BUFFERS)
                .ok()
                .and_then(|v| env::staging_buffers(&v))
                .unwrap_or(CudaOptions::default().staging_buffers),
            ..CudaOptions::default()
        }
    }
}

/// Where compiled kernels are cached on disk: `$CROSSBOW_KERNEL_CACHE` (empty, `0` or
/// `off` = no disk cache), else `$XDG_CACHE_HOME/crossbow/kernels`, else
/// `$HOME/.cache/crossbow/kernels`, else none.
pub fn kernel_cache_dir() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(v) = std::env::var_os(env::KERNEL_CACHE) {
        let s = v.to_string_lossy();
        if s.is_empty() || s == "0" || s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
            return None;
        }
        return Some(PathBuf::from(v));
    }
    if let Some(x) = non_empty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(x).join("crossbow").join("kernels"));
    }
    non_empty("HOME").map(|h| PathBuf::from(h).join(".cache").join("crossbow").join("kernels"))
}

/// Counters of the kernel module cache (process-wide).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCacheStats {
    /// Sources compiled with NVRTC.
    pub compiled: u64,
    /// Images read back from the disk cache.
    pub disk_hits: u64,
    /// Disk cache files that were corrupt, stale or unloadable (ignored and rewritten).
    pub disk_rejected: u64,
    /// Disk cache writes that failed (never fatal).
    pub disk_write_errors: u64,
    /// Modules found already loaded in this process.
    pub memory_hits: u64,
}

/// One kernel source compiled by [`super::compile_all_for_arch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledSource {
    /// The op folder / module name (`vector`, `conv2d`, ...).
    pub module: &'static str,
    /// Bytes of PTX.
    pub ptx_len: usize,
    /// Bytes of CUBIN (0 when compiled for a virtual `compute_XX` architecture).
    pub cubin_len: usize,
    /// The NVRTC log (warnings); empty for a clean compile.
    pub log: String,
}

#[cfg(test)]
mod env_tests {
    use super::env::{GRAPHS, STAGING_BUFFERS, check_values, staging_buffers};

    /// A bad value of the graph or staging variable is an error naming the variable and the
    /// value; good values and unset pass.
    #[test]
    fn bad_graph_and_staging_values_are_errors_that_name_them() {
        assert!(check_values(None, None).is_ok());
        assert!(check_values(Some("0"), Some("1")).is_ok());
        assert!(check_values(Some(" off "), Some("64")).is_ok());
        let e = check_values(Some("maybe"), None).unwrap_err();
        assert!(e.contains(GRAPHS) && e.contains("maybe"), "{e}");
        for bad in ["0", "65", "-1", "four", ""] {
            let e = check_values(None, Some(bad)).unwrap_err();
            assert!(e.contains(STAGING_BUFFERS) && e.contains(&format!("{bad:?}")), "{e}");
        }
        assert_eq!(staging_buffers(" 2 "), Some(2));
    }
}
