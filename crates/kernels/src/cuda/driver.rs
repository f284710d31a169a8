//! Finding the CUDA driver without panicking: cudarc panics on the first driver call when
//! `libcuda.so` cannot be loaded, so the library is looked for first, and every later call
//! goes through `Result`s.

use cudarc::driver::{result, sys};

use super::common::{DeviceInfo, DriverStatus, env};
use super::libs::{self, CudaLib};
use crate::error::{KernelError, Result};

/// The driver's CUDA version read from `libcuda.so.1` itself (never a stub, never through
/// cudarc), once per process; `Err` says why there is none.
pub(crate) fn driver_version_checked() -> std::result::Result<i32, String> {
    static V: std::sync::OnceLock<std::result::Result<i32, String>> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let v = libs::driver_version_direct()?;
        // The file cudarc will load must be that libcuda.so.1, not a stub found first.
        libs::prepare(CudaLib::Driver, v)?;
        Ok(v)
    })
    .clone()
}

/// The driver's CUDA version, 0 when unknown (no driver).
pub(crate) fn driver_version_or_zero() -> i32 {
    if env::flag(env::FORCE_NO_CUDA) { 0 } else { driver_version_checked().unwrap_or(0) }
}

/// Whether CUDA can be used here, and how many GPUs there are. Never panics.
pub fn driver_status() -> DriverStatus {
    if env::flag(env::FORCE_NO_CUDA) {
        return DriverStatus::NoDriver { reason: format!("{} is set", env::FORCE_NO_CUDA) };
    }
    // libcuda.so.1 by that name, its version, and the check that cudarc will load the same
    // file (never a stub found first on the library path): see `libs`.
    if let Err(reason) = driver_version_checked() {
        // SAFETY: only tries to dlopen libcuda by its candidate names.
        let any = unsafe { sys::is_culib_present() };
        return if reason.contains("stub") || any && !reason.contains("could not be loaded") {
            DriverStatus::Failed { reason }
        } else {
            DriverStatus::NoDriver { reason }
        };
    }
    if let Err(e) = result::init() {
        // No device is an ordinary answer, not a failure.
        if e.0 == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE {
            return DriverStatus::Ready { devices: 0, driver_version: driver_version().unwrap_or(0) };
        }
        return DriverStatus::Failed { reason: format!("cuInit: {e:?}") };
    }
    match result::device::get_count() {
        Ok(n) => DriverStatus::Ready { devices: n.max(0) as usize, driver_version: driver_version().unwrap_or(0) },
        Err(e) => DriverStatus::Failed { reason: format!("cuDeviceGetCount: {e:?}") },
    }
}

fn driver_version() -> Option<i32> {
    driver_version_checked().ok()
}

/// The error for a status that is not `Ready`.
pub(crate) fn status_error(status: &DriverStatus) -> KernelError {
    match status {
        DriverStatus::NoDriver { reason } => KernelError::NoCudaDriver(reason.clone()),
        DriverStatus::NotCompiled => KernelError::NotCompiledWithCuda,
        other => KernelError::Cuda { context: "CUDA driver".into(), msg: other.describe() },
    }
}

/// Number of CUDA devices: `Ok(0)` with a driver but no GPU; an error when there is no
/// driver ([`KernelError::NoCudaDriver`]: "no CUDA driver found ...") or it fails. Never
/// panics.
pub fn device_count() -> Result<usize> {
    match driver_status() {
        DriverStatus::Ready { devices, .. } => Ok(devices),
        other => Err(status_error(&other)),
    }
}

fn drv(context: &str, e: result::DriverError) -> KernelError {
    KernelError::Cuda { context: context.into(), msg: format!("{e:?}") }
}

/// What the driver reports about device `ordinal` (no context is created).
pub fn device_info(ordinal: usize) -> Result<DeviceInfo> {
    let n = device_count()?;
    if ordinal >= n {
        return Err(KernelError::invalid(
            "cuda",
            format!("device cuda:{ordinal} does not exist ({n} CUDA device{} found)", if n == 1 { "" } else { "s" }),
        ));
    }
    let ord = i32::try_from(ordinal).map_err(|_| KernelError::invalid("cuda", "device ordinal too large"))?;
    let dev = result::device::get(ord).map_err(|e| drv("cuDeviceGet", e))?;
    let name = result::device::get_name(dev).map_err(|e| drv("cuDeviceGetName", e))?;
    use sys::CUdevice_attribute_enum as A;
    // SAFETY: `dev` is a valid device handle.
    let (major, minor, total) = unsafe {
        (
            result::device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .map_err(|e| drv("cuDeviceGetAttribute", e))?,
            result::device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                .map_err(|e| drv("cuDeviceGetAttribute", e))?,
            result::device::total_mem(dev).map_err(|e| drv("cuDeviceTotalMem", e))?,
        )
    };
    Ok(DeviceInfo { ordinal, name, compute_capability: (major, minor), total_memory: total })
}

/// Every CUDA device (empty with a driver but no GPU; an error without a driver).
pub fn devices() -> Result<Vec<DeviceInfo>> {
    (0..device_count()?).map(device_info).collect()
}
