//! GPU fused SMA updates (`sma_step.cu`).

use super::SmaStep;
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{KernelArg, KernelSource, Launcher, int, launch_n, ptr};
use crate::error::Result;
use crate::optim::SgdConfig;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "sma_step",
    code: include_str!("sma_step.cu"),
    kernels: &["cb_sma_learner", "cb_sma_central"],
    cooperative: &[],
}];

impl<E: Launcher> SmaStep for GpuBackend<E> {
    unsafe fn sma_learner_step_unchecked(
        &self,
        cfg: &SgdConfig,
        alpha: f32,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
        z: View<'_, Self>,
        correction: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (p, g, v) = (self.region_mut(param)?, self.region(grad)?, self.region_mut(velocity)?);
        let (z, c) = (self.region(z)?, self.region_mut(correction)?);
        launch_n(
            &self.launcher,
            "cb_sma_learner",
            p.len,
            &[
                ptr(p),
                ptr(g),
                ptr(v),
                ptr(z),
                ptr(c),
                int(p.len),
                KernelArg::F32(alpha),
                KernelArg::F32(cfg.lr),
                KernelArg::F32(cfg.momentum),
                KernelArg::F32(cfg.weight_decay),
                KernelArg::I32(cfg.nesterov as i32),
            ],
        )
    }

    unsafe fn sma_central_step_unchecked(
        &self,
        momentum: f32,
        decay: f32,
        total: ViewMut<'_, Self>,
        z: ViewMut<'_, Self>,
        z_prev: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (t, z, zp) = (self.region_mut(total)?, self.region_mut(z)?, self.region_mut(z_prev)?);
        launch_n(
            &self.launcher,
            "cb_sma_central",
            t.len,
            &[ptr(t), ptr(z), ptr(zp), int(t.len), KernelArg::F32(momentum), KernelArg::F32(decay)],
        )
    }
}
