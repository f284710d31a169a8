//! Without the `cuda` feature: the CUDA API's names, every function an error
//! ([`KernelError::NotCompiledWithCuda`]) and every type uninhabited, so code that uses the
//! CUDA backend compiles unchanged and fails cleanly at run time.

use crossbow_tensor::Device;

use super::common::{CompiledSource, CudaOptions, CudnnStatus, DeviceInfo, DriverStatus, KernelCacheStats, MemInfo};
use crate::augment::CropFlipGeom;
use crate::backend::{Backend, View, ViewMut};
use crate::batch_norm::BatchNormGeom;
use crate::conv2d::Conv2dGeom;
use crate::dropout::DropoutConfig;
use crate::error::{KernelError, Result};
use crate::gemm::GemmConfig;
use crate::linear::LinearGeom;
use crate::optim::SgdConfig;
use crate::pool::Pool2dGeom;
use crate::softmax_xent::SoftmaxXentGeom;

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

/// A CUDA event (uninhabited without the `cuda` feature).
#[derive(Debug)]
pub struct CudaEvent(Never);

/// A device buffer (uninhabited without the `cuda` feature).
#[derive(Debug)]
pub struct CudaBuffer(Never);

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

    pub fn new_backend(&self) -> Result<CudaBackend> {
        match self.0 {}
    }

    pub fn mem_info(&self) -> Result<MemInfo> {
        match self.0 {}
    }

    pub fn info(&self) -> &DeviceInfo {
        match self.0 {}
    }

    pub fn ordinal(&self) -> usize {
        match self.0 {}
    }

    pub fn kernel_target(&self) -> &str {
        match self.0 {}
    }

    pub fn cudnn_status(&self) -> &CudnnStatus {
        match self.0 {}
    }

    pub fn options(&self) -> &CudaOptions {
        match self.0 {}
    }

    pub fn synchronize(&self) -> Result<()> {
        match self.0 {}
    }

    pub fn describe(&self) -> String {
        match self.0 {}
    }
}

/// A learner's GPU backend (cannot exist without the `cuda` feature).
#[derive(Debug)]
pub struct CudaBackend(Never);

impl CudaBackend {
    pub fn cuda_device(&self) -> &CudaDevice {
        match self.0 {}
    }

    pub fn uses_cudnn(&self) -> bool {
        match self.0 {}
    }

    pub fn record_event(&self) -> Result<CudaEvent> {
        match self.0 {}
    }

    pub fn wait_event(&self, _event: &CudaEvent) -> Result<()> {
        match self.0 {}
    }

    pub fn wait_for(&self, _other: &CudaBackend) -> Result<()> {
        match self.0 {}
    }
}

impl Backend for CudaBackend {
    type Buffer = CudaBuffer;

    fn buffer_len(buf: &CudaBuffer) -> usize {
        match buf.0 {}
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

    fn upload(&self, _src: &[f32], _dst: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn download(&self, _src: View<'_, Self>, _dst: &mut [f32]) -> Result<()> {
        match self.0 {}
    }

    fn copy(&self, _src: View<'_, Self>, _dst: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn fill(&self, _dst: ViewMut<'_, Self>, _value: f32) -> Result<()> {
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

    fn gemm(&self, _cfg: &GemmConfig, _a: View<'_, Self>, _b: View<'_, Self>, _c: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn add(&self, _a: View<'_, Self>, _b: View<'_, Self>, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn sub(&self, _a: View<'_, Self>, _b: View<'_, Self>, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn mul(&self, _a: View<'_, Self>, _b: View<'_, Self>, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn axpy(&self, _alpha: f32, _x: View<'_, Self>, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn axpby(&self, _alpha: f32, _x: View<'_, Self>, _beta: f32, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn scale(&self, _alpha: f32, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn sum_squares(&self, _x: View<'_, Self>, _out: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn sgd_step(
        &self,
        _cfg: &SgdConfig,
        _param: ViewMut<'_, Self>,
        _grad: View<'_, Self>,
        _velocity: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn relu_forward(&self, _x: View<'_, Self>, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn relu_forward_inplace(&self, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn relu_backward(&self, _y: View<'_, Self>, _dy: View<'_, Self>, _dx: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn relu_backward_inplace(&self, _y: View<'_, Self>, _d: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn conv2d_workspace_len(&self, _g: &Conv2dGeom) -> usize {
        match self.0 {}
    }

    fn conv2d_forward(
        &self,
        _g: &Conv2dGeom,
        _x: View<'_, Self>,
        _params: View<'_, Self>,
        _y: ViewMut<'_, Self>,
        _workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn conv2d_backward_data(
        &self,
        _g: &Conv2dGeom,
        _dy: View<'_, Self>,
        _params: View<'_, Self>,
        _dx: ViewMut<'_, Self>,
        _workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn conv2d_backward_params(
        &self,
        _g: &Conv2dGeom,
        _x: View<'_, Self>,
        _dy: View<'_, Self>,
        _dparams: ViewMut<'_, Self>,
        _workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn linear_forward(
        &self,
        _g: &LinearGeom,
        _x: View<'_, Self>,
        _params: View<'_, Self>,
        _y: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn linear_backward_data(
        &self,
        _g: &LinearGeom,
        _dy: View<'_, Self>,
        _params: View<'_, Self>,
        _dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn linear_backward_params(
        &self,
        _g: &LinearGeom,
        _x: View<'_, Self>,
        _dy: View<'_, Self>,
        _dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn batch_norm_forward_train(
        &self,
        _g: &BatchNormGeom,
        _x: View<'_, Self>,
        _params: View<'_, Self>,
        _y: ViewMut<'_, Self>,
        _saved: ViewMut<'_, Self>,
        _running: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn batch_norm_forward_infer(
        &self,
        _g: &BatchNormGeom,
        _x: View<'_, Self>,
        _params: View<'_, Self>,
        _running: View<'_, Self>,
        _y: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn batch_norm_backward(
        &self,
        _g: &BatchNormGeom,
        _x: View<'_, Self>,
        _dy: View<'_, Self>,
        _params: View<'_, Self>,
        _saved: View<'_, Self>,
        _dx: ViewMut<'_, Self>,
        _dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn max_pool_forward(&self, _g: &Pool2dGeom, _x: View<'_, Self>, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn max_pool_backward(
        &self,
        _g: &Pool2dGeom,
        _x: View<'_, Self>,
        _y: View<'_, Self>,
        _dy: View<'_, Self>,
        _dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn avg_pool_forward(&self, _g: &Pool2dGeom, _x: View<'_, Self>, _y: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn avg_pool_backward(&self, _g: &Pool2dGeom, _dy: View<'_, Self>, _dx: ViewMut<'_, Self>) -> Result<()> {
        match self.0 {}
    }

    fn dropout_forward(
        &self,
        _cfg: &DropoutConfig,
        _x: View<'_, Self>,
        _y: ViewMut<'_, Self>,
        _mask: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn softmax_xent(
        &self,
        _g: &SoftmaxXentGeom,
        _logits: View<'_, Self>,
        _labels: View<'_, Self>,
        _dlogits: Option<ViewMut<'_, Self>>,
        _stats: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
    }

    fn crop_flip(
        &self,
        _g: &CropFlipGeom,
        _x: View<'_, Self>,
        _params: View<'_, Self>,
        _y: ViewMut<'_, Self>,
    ) -> Result<()> {
        match self.0 {}
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
