//! CPU SGD step.

use super::{Optim, SgdConfig};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;

impl Optim for CpuBackend {
    unsafe fn sgd_step_unchecked(
        &self,
        cfg: &SgdConfig,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
    ) -> Result<()> {
        sgd_step(cfg, host_slice_mut(param), host_slice(grad), host_slice_mut(velocity));
        Ok(())
    }
}

fn sgd_step(cfg: &SgdConfig, p: &mut [f32], grad: &[f32], v: &mut [f32]) {
    let (lr, mu, wd) = (cfg.lr, cfg.momentum, cfg.weight_decay);
    if cfg.nesterov {
        for ((pv, &gv), vv) in p.iter_mut().zip(grad).zip(v.iter_mut()) {
            let g = gv + wd * *pv;
            *vv = mu * *vv - lr * g;
            *pv += mu * *vv - lr * g;
        }
    } else {
        for ((pv, &gv), vv) in p.iter_mut().zip(grad).zip(v.iter_mut()) {
            let g = gv + wd * *pv;
            *vv = mu * *vv - lr * g;
            *pv += *vv;
        }
    }
}
