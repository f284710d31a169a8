//! Without the `cuda` feature: the CUDA API's names, every function an error
//! ([`KernelError::NotCompiledWithCuda`]) and every type uninhabited, so code that uses the
//! CUDA backend compiles unchanged and fails cleanly at run time.
//!
//! [`CudaBackend`] is the real [`GpuBackend`] — every op's GPU code included — over the
//! uninhabited executor [`NoDevice`], so it has exactly the real backend's API and can never
//! be constructed; only the device-level API ([`CudaDevice`]) and the free functions are
//! written out here.

use crossbow_tensor::Device;

use super::common::{CompiledSource, CudaOptions, CudnnStatus, DeviceInfo, DriverStatus, KernelCacheStats, MemInfo};
use super::gpu::GpuBackend;
use super::launch::{ColGemm, KernelArg, Launcher, Sealed};
use super::replay::{Op, Replay};
use crate::error::{KernelError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Never {}

/// [`DriverStatus::NotCompiled`].
pub fn driver_status() -> DriverStatus {
    DriverStatus::NotCompiled
}

/// Always [`KernelError::NotCompiledWithCuda`].
pub fn device_count() -> Result<usize> {
    Err(KernelError::NotCompiledWithCuda)
}

/// Always [`KernelError::NotCompiledWithCuda`].
pub fn device_info(_ordinal: usize) -> Result<DeviceInfo> {
    Err(KernelError::NotCompiledWithCuda)
}

/// Always [`KernelError::NotCompiledWithCuda`].
pub fn devices() -> Result<Vec<DeviceInfo>> {
    Err(KernelError::NotCompiledWithCuda)
}

/// Always false.
pub fn nvrtc_available() -> bool {
    false
}

/// Always [`KernelError::NotCompiledWithCuda`].
pub fn nvrtc_version() -> Result<(i32, i32)> {
    Err(KernelError::NotCompiledWithCuda)
}

/// Always [`KernelError::NotCompiledWithCuda`].
pub fn compile_all_for_arch(_arch: &str) -> Result<Vec<CompiledSource>> {
    Err(KernelError::NotCompiledWithCuda)
}

/// All zeros.
pub fn kernel_cache_stats() -> KernelCacheStats {
    KernelCacheStats::default()
}

/// The cuDNN convolution algorithms chosen: none without the `cuda` feature.
pub fn cudnn_conv_algorithms() -> Vec<String> {
    Vec::new()
}

/// Compilations per kernel module key: none without the `cuda` feature.
pub fn kernel_compile_counts() -> std::collections::HashMap<String, u64> {
    std::collections::HashMap::new()
}

// The types below hold a private uninhabited field rather than being empty enums, so that
// code outside this module that uses them (callers' GPU paths) is not linted as unreachable.

/// A CUDA event (uninhabited without the `cuda` feature).
#[derive(Debug)]
pub struct CudaEvent(Never);

/// A device buffer (uninhabited without the `cuda` feature).
#[derive(Debug)]
pub struct CudaBuffer(Never);

/// The executor of [`CudaBackend`] without the `cuda` feature: uninhabited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoDevice(Never);

/// The name the real executor has with the `cuda` feature.
pub type CudaLauncher = NoDevice;

/// A learner's GPU backend (cannot exist without the `cuda` feature).
pub type CudaBackend = GpuBackend<NoDevice>;

impl Sealed for NoDevice {}

impl Launcher for NoDevice {
    type Buffer = CudaBuffer;

    fn buffer_len(buf: &CudaBuffer) -> usize {
        match buf.0 {}
    }

    fn addr(&self, _buf: &CudaBuffer) -> Result<u64> {
        match self.0 {}
    }

    fn addr_mut(&self, _buf: &mut CudaBuffer) -> Result<u64> {
        match self.0 {}
    }

    fn device(&self) -> Device {
        match self.0 {}
    }

    fn describe(&self) -> String {
        match self.0 {}
    }

    fn alloc(&self, _len: usize) -> Result<CudaBuffer> {
        match self.0 {}
    }

    fn upload(&self, _src: &[f32], _dst: u64) -> Result<()> {
        match self.0 {}
    }

    fn download(&self, _src: u64, _dst: &mut [f32]) -> Result<()> {
        match self.0 {}
    }

    type Pending = Vec<f32>;

    fn start_download(&self, _src: u64, _len: usize) -> Result<Vec<f32>> {
        match self.0 {}
    }

    fn finish_download(&self, _pending: Vec<f32>) -> Result<Vec<f32>> {
        match self.0 {}
    }

    fn copy(&self, _src: u64, _dst: u64, _len: usize) -> Result<()> {
        match self.0 {}
    }

    fn synchronize(&self) -> Result<()> {
        match self.0 {}
    }

    type Event = CudaEvent;

    fn record(&self) -> Result<CudaEvent> {
        match self.0 {}
    }

    fn wait(&self, _event: &CudaEvent) -> Result<()> {
        match self.0 {}
    }

    fn launch(&self, _kernel: &'static str, _grid: u32, _args: &[KernelArg]) -> Result<()> {
        match self.0 {}
    }

    fn gemm(&self, _g: &ColGemm) -> Result<()> {
        match self.0 {}
    }

    type Graph = ();

    fn replay(&self) -> &std::sync::Mutex<Replay<()>> {
        match self.0 {}
    }

    fn issue(&self, _op: &Op) -> Result<bool> {
        match self.0 {}
    }

    fn capture(&self, _ops: &[Op]) -> Result<()> {
        match self.0 {}
    }

    fn launch_graph(&self, _graph: &()) -> Result<()> {
        match self.0 {}
    }
}

/// A GPU (cannot be opened without the `cuda` feature).
#[derive(Clone, Debug)]
pub struct CudaDevice(Never);

impl CudaDevice {
    /// Always [`KernelError::NotCompiledWithCuda`].
    pub fn open(_ordinal: usize) -> Result<CudaDevice> {
        Err(KernelError::NotCompiledWithCuda)
    }

    /// Always [`KernelError::NotCompiledWithCuda`].
    pub fn open_with(_ordinal: usize, _options: &CudaOptions) -> Result<CudaDevice> {
        Err(KernelError::NotCompiledWithCuda)
    }

    /// A new learner backend (uncallable: no `CudaDevice` exists without `cuda`).
    pub fn new_backend(&self) -> Result<CudaBackend> {
        match self.0 {}
    }

    /// Free and total device memory in bytes (uncallable without `cuda`).
    pub fn mem_info(&self) -> Result<MemInfo> {
        match self.0 {}
    }

    /// The driver's description of the device (uncallable without `cuda`).
    pub fn info(&self) -> &DeviceInfo {
        match self.0 {}
    }

    /// The device ordinal (`cuda:N`) (uncallable without `cuda`).
    pub fn ordinal(&self) -> usize {
        match self.0 {}
    }

    /// What the kernels were compiled for (uncallable without `cuda`).
    pub fn kernel_target(&self) -> &str {
        match self.0 {}
    }

    /// Whether convolution and batch norm use cuDNN (uncallable without `cuda`).
    pub fn cudnn_status(&self) -> &CudnnStatus {
        match self.0 {}
    }

    /// The options the device was opened with (uncallable without `cuda`).
    pub fn options(&self) -> &CudaOptions {
        match self.0 {}
    }

    /// Unreachable: a `CudaDevice` cannot exist without the `cuda` feature.
    pub fn check_clean(&self) -> Result<()> {
        match self.0 {}
    }

    /// Waits for all work on every stream of the device (uncallable without `cuda`).
    pub fn synchronize(&self) -> Result<()> {
        match self.0 {}
    }

    /// One line: name, memory, kernel target, NVRTC, cuDNN (uncallable without `cuda`).
    pub fn describe(&self) -> String {
        match self.0 {}
    }
}

/// Stream-level controls of a learner's backend (as with the `cuda` feature).
impl GpuBackend<NoDevice> {
    /// The device this backend runs on (uncallable: `GpuBackend<NoDevice>` has no value).
    pub fn cuda_device(&self) -> &CudaDevice {
        match self.launcher.0 {}
    }

    /// True when convolution and batch norm go through cuDNN (uncallable without `cuda`).
    pub fn uses_cudnn(&self) -> bool {
        match self.launcher.0 {}
    }

    /// An event marking all work enqueued so far on this backend's stream (uncallable without `cuda`).
    pub fn record_event(&self) -> Result<CudaEvent> {
        match self.launcher.0 {}
    }

    /// Makes this backend's later work wait for `event` (uncallable without `cuda`).
    pub fn wait_event(&self, _event: &CudaEvent) -> Result<()> {
        match self.launcher.0 {}
    }

    /// Makes this backend's later work wait for everything enqueued on `other` (uncallable without `cuda`).
    pub fn wait_for(&self, _other: &CudaBackend) -> Result<()> {
        match self.launcher.0 {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_is_a_clean_error() {
        assert_eq!(driver_status(), DriverStatus::NotCompiled);
        assert!(matches!(device_count(), Err(KernelError::NotCompiledWithCuda)));
        assert!(matches!(devices(), Err(KernelError::NotCompiledWithCuda)));
        assert!(matches!(CudaDevice::open(0), Err(KernelError::NotCompiledWithCuda)));
        assert!(matches!(compile_all_for_arch("sm_90"), Err(KernelError::NotCompiledWithCuda)));
        assert!(!nvrtc_available());
        assert_eq!(kernel_cache_stats(), KernelCacheStats::default());
    }
}
