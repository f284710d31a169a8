//! GPU crop-and-flip (`augment.cu`).

use super::{Augment, CropFlipGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{Launcher, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "augment",
    code: include_str!("augment.cu"),
    kernels: &["cb_crop_flip"],
    cooperative: &[],
}];

impl<E: Launcher> Augment for GpuBackend<E> {
    unsafe fn crop_flip_unchecked(
        &self,
        g: &CropFlipGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, params, y) = (self.region(x)?, self.region(params)?, self.region_mut(y)?);
        launch_n(
            &self.launcher,
            "cb_crop_flip",
            y.len,
            &[ptr(x), ptr(params), ptr(y), int(g.batch), int(g.channels), int(g.height), int(g.width), int(g.pad)],
        )
    }
}
