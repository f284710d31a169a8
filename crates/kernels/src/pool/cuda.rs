//! GPU pooling (`pool.cu`). Always the crate's own kernels, also when cuDNN is present:
//! cuDNN cannot express the CPU's semantics exactly (Caffe ceil mode with windows clipped
//! at the border, gradient to the first maximum of a window, averages over in-bounds
//! elements of clipped windows), and these kernels reproduce the CPU's accumulation order.

use super::{Pool2d, Pool2dGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{DeviceRegion, Launcher, KernelArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "pool",
    code: include_str!("pool.cu"),
    kernels: &["cb_max_pool_fwd", "cb_max_pool_bwd", "cb_avg_pool_fwd", "cb_avg_pool_bwd"],
    cooperative: &[],
}];

/// `NC, H, W, OH, OW, KH, KW, SH, SW, PH, PW`.
fn dims(g: &Pool2dGeom) -> [KernelArg; 11] {
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

fn args(bufs: &[DeviceRegion], g: &Pool2dGeom) -> Vec<KernelArg> {
    bufs.iter().map(|&d| ptr(d)).chain(dims(g)).collect()
}

impl<E: Launcher> Pool2d for GpuBackend<E> {
    unsafe fn max_pool_forward_unchecked(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let (x, y) = (self.region(x)?, self.region_mut(y)?);
        launch_n(&self.launcher, "cb_max_pool_fwd", y.len, &args(&[x, y], g))
    }

    unsafe fn max_pool_backward_unchecked(
        &self,
        g: &Pool2dGeom,
        x: View<'_, Self>,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, y, dy, dx) = (self.region(x)?, self.region(y)?, self.region(dy)?, self.region_mut(dx)?);
        launch_n(&self.launcher, "cb_max_pool_bwd", dx.len, &args(&[x, y, dy, dx], g))
    }

    unsafe fn avg_pool_forward_unchecked(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let (x, y) = (self.region(x)?, self.region_mut(y)?);
        launch_n(&self.launcher, "cb_avg_pool_fwd", y.len, &args(&[x, y], g))
    }

    unsafe fn avg_pool_backward_unchecked(
        &self,
        g: &Pool2dGeom,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (dy, dx) = (self.region(dy)?, self.region_mut(dx)?);
        launch_n(&self.launcher, "cb_avg_pool_bwd", dx.len, &args(&[dy, dx], g))
    }
}
