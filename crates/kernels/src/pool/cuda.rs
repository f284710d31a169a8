//! GPU pooling (`pool.cu`). Always the crate's own kernels, also when cuDNN is present:
//! cuDNN cannot express the CPU's semantics exactly (Caffe ceil mode with windows clipped
//! at the border, gradient to the first maximum of a window, averages over in-bounds
//! elements of clipped windows), and these kernels reproduce the CPU's accumulation order.

use super::Pool2dGeom;
use crate::cuda::exec::{Dv, Exec, KArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource = KernelSource {
    module: "pool",
    code: include_str!("pool.cu"),
    kernels: &["cb_max_pool_fwd", "cb_max_pool_bwd", "cb_avg_pool_fwd", "cb_avg_pool_bwd"],
    cooperative: &[],
};

/// `NC, H, W, OH, OW, KH, KW, SH, SW, PH, PW`.
fn dims(g: &Pool2dGeom) -> [KArg; 11] {
    [
        int(g.batch * g.channels),
        int(g.in_h),
        int(g.in_w),
        int(g.out_h()),
        int(g.out_w()),
        int(g.kernel_h),
        int(g.kernel_w),
        int(g.stride_h),
        int(g.stride_w),
        int(g.pad_h),
        int(g.pad_w),
    ]
}

fn args(bufs: &[Dv], g: &Pool2dGeom) -> Vec<KArg> {
    bufs.iter().map(|&d| ptr(d)).chain(dims(g)).collect()
}

pub(crate) fn max_forward<E: Exec>(e: &E, g: &Pool2dGeom, x: Dv, y: Dv) -> Result<()> {
    launch_n(e, "cb_max_pool_fwd", y.len, &args(&[x, y], g))
}

pub(crate) fn max_backward<E: Exec>(e: &E, g: &Pool2dGeom, x: Dv, y: Dv, dy: Dv, dx: Dv) -> Result<()> {
    launch_n(e, "cb_max_pool_bwd", dx.len, &args(&[x, y, dy, dx], g))
}

pub(crate) fn avg_forward<E: Exec>(e: &E, g: &Pool2dGeom, x: Dv, y: Dv) -> Result<()> {
    launch_n(e, "cb_avg_pool_fwd", y.len, &args(&[x, y], g))
}

pub(crate) fn avg_backward<E: Exec>(e: &E, g: &Pool2dGeom, dy: Dv, dx: Dv) -> Result<()> {
    launch_n(e, "cb_avg_pool_bwd", dx.len, &args(&[dy, dx], g))
}
