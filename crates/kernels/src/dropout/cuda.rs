//! GPU dropout (`dropout.cu`): the counter-based mask of [`super::keep`], bit-identical.

use super::{Dropout, DropoutConfig};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{Launcher, KernelArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "dropout",
    code: include_str!("dropout.cu"),
    kernels: &["cb_dropout_fwd"],
    cooperative: &[],
}];

impl<E: Launcher> Dropout for GpuBackend<E> {
    unsafe fn dropout_forward_unchecked(
        &self,
        cfg: &DropoutConfig,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
        mask: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, y, mask) = (self.region(x)?, self.region_mut(y)?, self.region_mut(mask)?);
        // The scale is computed on the host, exactly as the CPU does.
        launch_n(
            &self.launcher,
            "cb_dropout_fwd",
            y.len,
            &[ptr(x), ptr(y), ptr(mask), int(y.len), KernelArg::F32(cfg.p), KernelArg::F32(cfg.scale()), KernelArg::U64(cfg.seed)],
        )
    }
}
