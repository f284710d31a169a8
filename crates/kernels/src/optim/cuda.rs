//! GPU SGD step (`optim.cu`).

use super::{Optim, SgdConfig};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{Launcher, KernelArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] =
    &[KernelSource { module: "optim", code: include_str!("optim.cu"), kernels: &["cb_sgd"], cooperative: &[] }];

impl<E: Launcher> Optim for GpuBackend<E> {
    unsafe fn sgd_step_unchecked(
        &self,
        cfg: &SgdConfig,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (p, g, v) = (self.region_mut(param)?, self.region(grad)?, self.region_mut(velocity)?);
        launch_n(
            &self.launcher,
            "cb_sgd",
            p.len,
            &[
                ptr(p),
                ptr(g),
                ptr(v),
                int(p.len),
                KernelArg::F32(cfg.lr),
                KernelArg::F32(cfg.momentum),
                KernelArg::F32(cfg.weight_decay),
                KernelArg::I32(cfg.nesterov as i32),
            ],
        )
    }
}
