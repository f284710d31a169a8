//! GPU element-wise and vector ops (`vector.cu`), plus the per-channel bias kernels conv2d
//! and linear share.

use super::{BinaryOp, Vector};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::exec::{Dv, Exec, KArg, KernelSource, int, launch_blocks, launch_n, ptr};
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

impl<E: Exec> Vector for GpuBackend<E> {
    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()> {
        let y = self.dv_mut(y)?;
        launch_n(&self.exec, "cb_scale", y.len, &[KArg::F32(alpha), ptr(y), int(y.len)])
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
        let (a, b, y) = (self.dv(a)?, self.dv(b)?, self.dv_mut(y)?);
        launch_n(&self.exec, kernel, y.len, &[ptr(a), ptr(b), ptr(y), int(y.len)])
    }

    unsafe fn axpy_unchecked(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let (x, y) = (self.dv(x)?, self.dv_mut(y)?);
        launch_n(&self.exec, "cb_axpy", y.len, &[KArg::F32(alpha), ptr(x), ptr(y), int(y.len)])
    }

    unsafe fn axpby_unchecked(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) -> Result<()> {
        axpby(&self.exec, alpha, self.dv(x)?, beta, self.dv_mut(y)?)
    }

    /// One block (also for an empty `x`, which gives 0).
    unsafe fn sum_squares_unchecked(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) -> Result<()> {
        let (x, out) = (self.dv(x)?, self.dv_mut(out)?);
        launch_blocks(&self.exec, "cb_sum_squares", 1, &[ptr(x), ptr(out), int(x.len)])
    }
}

/// `y = alpha * x + beta * y` (also zero-fills for GEMMs with `k == 0`).
pub(crate) fn axpby<E: Exec>(e: &E, alpha: f32, x: Dv, beta: f32, y: Dv) -> Result<()> {
    launch_n(e, "cb_axpby", y.len, &[KArg::F32(alpha), ptr(x), KArg::F32(beta), ptr(y), int(y.len)])
}

/// `y = value` ([`crate::Backend::fill`]).
pub(crate) fn fill<E: Exec>(e: &E, y: Dv, value: f32) -> Result<()> {
    launch_n(e, "cb_fill", y.len, &[KArg::F32(value), ptr(y), int(y.len)])
}

/// `y[(n*c + ch)*p + i] += b[ch]` over `[n, c, p]`.
pub(crate) fn channel_add<E: Exec>(e: &E, y: Dv, b: Dv, n: usize, c: usize, p: usize) -> Result<()> {
    debug_assert!(y.len == n * c * p && b.len == c);
    launch_n(e, "cb_channel_add", y.len, &[ptr(y), ptr(b), int(n), int(c), int(p)])
}

/// `out[ch] = sum over n, i of x[(n*c + ch)*p + i]`.
pub(crate) fn channel_sum<E: Exec>(e: &E, x: Dv, out: Dv, n: usize, c: usize, p: usize) -> Result<()> {
    debug_assert!(x.len == n * c * p && out.len == c);
    launch_blocks(e, "cb_channel_sum", c, &[ptr(x), ptr(out), int(n), int(c), int(p)])
}
