//! GPU element-wise and vector ops (`vector.cu`), plus the per-channel bias kernels conv2d
//! and linear share.

use super::{BinaryOp, Vector};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{DeviceRegion, Launcher, KernelArg, KernelSource, int, launch_blocks, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "vector",
    code: include_str!("vector.cu"),
    kernels: &[
        "cb_add",
        "cb_sub",
        "cb_mul",
        "cb_axpy",
        "cb_axpby",
        "cb_scale",
        "cb_fill",
        "cb_sum_squares",
        "cb_channel_add",
        "cb_channel_sum",
    ],
    cooperative: &["cb_sum_squares", "cb_channel_sum"],
}];

impl<E: Launcher> Vector for GpuBackend<E> {
    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()> {
        let y = self.region_mut(y)?;
        launch_n(&self.launcher, "cb_scale", y.len, &[KernelArg::F32(alpha), ptr(y), int(y.len)])
    }

    unsafe fn binary_unchecked(
        &self,
        op: BinaryOp,
        a: View<'_, Self>,
        b: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let kernel = match op {
            BinaryOp::Add => "cb_add",
            BinaryOp::Sub => "cb_sub",
            BinaryOp::Mul => "cb_mul",
        };
        let (a, b, y) = (self.region(a)?, self.region(b)?, self.region_mut(y)?);
        launch_n(&self.launcher, kernel, y.len, &[ptr(a), ptr(b), ptr(y), int(y.len)])
    }

    unsafe fn axpy_unchecked(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let (x, y) = (self.region(x)?, self.region_mut(y)?);
        launch_n(&self.launcher, "cb_axpy", y.len, &[KernelArg::F32(alpha), ptr(x), ptr(y), int(y.len)])
    }

    unsafe fn axpby_unchecked(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) -> Result<()> {
        axpby(&self.launcher, alpha, self.region(x)?, beta, self.region_mut(y)?)
    }

    /// One block (also for an empty `x`, which gives 0).
    unsafe fn sum_squares_unchecked(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) -> Result<()> {
        let (x, out) = (self.region(x)?, self.region_mut(out)?);
        launch_blocks(&self.launcher, "cb_sum_squares", 1, &[ptr(x), ptr(out), int(x.len)])
    }
}

/// `y = alpha * x + beta * y` (also zero-fills for GEMMs with `k == 0`).
pub(crate) fn axpby<E: Launcher>(e: &E, alpha: f32, x: DeviceRegion, beta: f32, y: DeviceRegion) -> Result<()> {
    launch_n(e, "cb_axpby", y.len, &[KernelArg::F32(alpha), ptr(x), KernelArg::F32(beta), ptr(y), int(y.len)])
}

/// `y = value` ([`crate::Backend::fill`]).
pub(crate) fn fill<E: Launcher>(e: &E, y: DeviceRegion, value: f32) -> Result<()> {
    launch_n(e, "cb_fill", y.len, &[KernelArg::F32(value), ptr(y), int(y.len)])
}

/// `y[(n*c + ch)*p + i] += b[ch]` over `[n, c, p]`.
pub(crate) fn channel_add<E: Launcher>(e: &E, y: DeviceRegion, b: DeviceRegion, n: usize, c: usize, p: usize) -> Result<()> {
    debug_assert!(y.len == n * c * p && b.len == c);
    launch_n(e, "cb_channel_add", y.len, &[ptr(y), ptr(b), int(n), int(c), int(p)])
}

/// `out[ch] = sum over n, i of x[(n*c + ch)*p + i]`.
pub(crate) fn channel_sum<E: Launcher>(e: &E, x: DeviceRegion, out: DeviceRegion, n: usize, c: usize, p: usize) -> Result<()> {
    debug_assert!(x.len == n * c * p && out.len == c);
    launch_blocks(e, "cb_channel_sum", c, &[ptr(x), ptr(out), int(n), int(c), int(p)])
}
