//! CPU dropout.

use super::{Dropout, DropoutConfig, keep};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;

impl Dropout for CpuBackend {
    unsafe fn dropout_forward_unchecked(
        &self,
        cfg: &DropoutConfig,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
        mask: ViewMut<'_, Self>,
    ) -> Result<()> {
        let s = cfg.scale();
        for (i, ((yo, mo), &xv)) in host_slice_mut(y).iter_mut().zip(host_slice_mut(mask).iter_mut()).zip(host_slice(x)).enumerate() {
            let m = if keep(cfg.seed, i as u64, cfg.p) { s } else { 0.0 };
            *mo = m;
            *yo = xv * m;
        }
        Ok(())
    }
}
