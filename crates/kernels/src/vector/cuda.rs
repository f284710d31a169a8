//! GPU element-wise and vector ops (`vector.cu`), plus the per-channel bias kernels conv2d
//! and linear share.

use crate::cuda::exec::{Dv, Exec, KArg, KernelSource, int, launch_blocks, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource = KernelSource {
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
};

/// `y = a (op) b` for `cb_add`, `cb_sub`, `cb_mul` (lengths checked by the caller).
pub(crate) fn binary<E: Exec>(e: &E, kernel: &'static str, a: Dv, b: Dv, y: Dv) -> Result<()> {
    launch_n(e, kernel, y.len, &[ptr(a), ptr(b), ptr(y), int(y.len)])
}

pub(crate) fn axpy<E: Exec>(e: &E, alpha: f32, x: Dv, y: Dv) -> Result<()> {
    launch_n(e, "cb_axpy", y.len, &[KArg::F32(alpha), ptr(x), ptr(y), int(y.len)])
}

pub(crate) fn axpby<E: Exec>(e: &E, alpha: f32, x: Dv, beta: f32, y: Dv) -> Result<()> {
    launch_n(e, "cb_axpby", y.len, &[KArg::F32(alpha), ptr(x), KArg::F32(beta), ptr(y), int(y.len)])
}

pub(crate) fn scale<E: Exec>(e: &E, alpha: f32, y: Dv) -> Result<()> {
    launch_n(e, "cb_scale", y.len, &[KArg::F32(alpha), ptr(y), int(y.len)])
}

pub(crate) fn fill<E: Exec>(e: &E, y: Dv, value: f32) -> Result<()> {
    launch_n(e, "cb_fill", y.len, &[KArg::F32(value), ptr(y), int(y.len)])
}

/// `out[0] = sum(x^2)`: one block (also for an empty `x`, which gives 0).
pub(crate) fn sum_squares<E: Exec>(e: &E, x: Dv, out: Dv) -> Result<()> {
    launch_blocks(e, "cb_sum_squares", 1, &[ptr(x), ptr(out), int(x.len)])
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
