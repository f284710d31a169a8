//! GPU leaky ReLU (`leaky_relu.cu`).

use super::LeakyRelu;
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{Launcher, KernelArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "leaky_relu",
    code: include_str!("leaky_relu.cu"),
    kernels: &["cb_leaky_relu_fwd", "cb_leaky_relu_bwd"],
    cooperative: &[],
}];

impl<E: Launcher> LeakyRelu for GpuBackend<E> {
    unsafe fn leaky_relu_forward_unchecked(&self, slope: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let (x, y) = (self.region(x)?, self.region_mut(y)?);
        launch_n(&self.launcher, "cb_leaky_relu_fwd", y.len, &[ptr(x), ptr(y), KernelArg::F32(slope), int(y.len)])
    }

    unsafe fn leaky_relu_backward_unchecked(
        &self,
        slope: f32,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (y, dy, dx) = (self.region(y)?, self.region(dy)?, self.region_mut(dx)?);
        launch_n(&self.launcher, "cb_leaky_relu_bwd", dx.len, &[ptr(y), ptr(dy), ptr(dx), KernelArg::F32(slope), int(dx.len)])
    }
}
