//! GPU ReLU (`activation.cu`).

use super::Activation;
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{Launcher, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "activation",
    code: include_str!("activation.cu"),
    kernels: &["cb_relu_fwd", "cb_relu_fwd_inplace", "cb_relu_bwd", "cb_relu_bwd_inplace"],
    cooperative: &[],
}];

impl<E: Launcher> Activation for GpuBackend<E> {
    fn relu_forward_inplace(&self, y: ViewMut<'_, Self>) -> Result<()> {
        let y = self.region_mut(y)?;
        launch_n(&self.launcher, "cb_relu_fwd_inplace", y.len, &[ptr(y), int(y.len)])
    }

    unsafe fn relu_forward_unchecked(&self, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let (x, y) = (self.region(x)?, self.region_mut(y)?);
        launch_n(&self.launcher, "cb_relu_fwd", y.len, &[ptr(x), ptr(y), int(y.len)])
    }

    unsafe fn relu_backward_unchecked(
        &self,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (y, dy, dx) = (self.region(y)?, self.region(dy)?, self.region_mut(dx)?);
        launch_n(&self.launcher, "cb_relu_bwd", dx.len, &[ptr(y), ptr(dy), ptr(dx), int(dx.len)])
    }

    unsafe fn relu_backward_inplace_unchecked(&self, y: View<'_, Self>, d: ViewMut<'_, Self>) -> Result<()> {
        let (y, d) = (self.region(y)?, self.region_mut(d)?);
        launch_n(&self.launcher, "cb_relu_bwd_inplace", d.len, &[ptr(y), ptr(d), int(d.len)])
    }
}
