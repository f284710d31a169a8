//! GPU SGD step (`optim.cu`).

use super::{Optim, SgdConfig};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::exec::{Exec, KArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] =
    &[KernelSource { module: "optim", code: include_str!("optim.cu"), kernels: &["cb_sgd"], cooperative: &[] }];

impl<E: Exec> Optim for GpuBackend<E> {
    unsafe fn sgd_step_unchecked(
        &self,
        cfg: &SgdConfig,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (p, g, v) = (self.dv_mut(param)?, self.dv(grad)?, self.dv_mut(velocity)?);
        launch_n(
            &self.exec,
            "cb_sgd",
            p.len,
            &[
                ptr(p),
                ptr(g),
                ptr(v),
                int(p.len),
                KArg::F32(cfg.lr),
                KArg::F32(cfg.momentum),
                KArg::F32(cfg.weight_decay),
                KArg::I32(cfg.nesterov as i32),
            ],
        )
    }
}
