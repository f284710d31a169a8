//! GPU fused softmax + cross-entropy + accuracy (`softmax_xent.cu`).

use super::{SoftmaxXent, SoftmaxXentGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{Launcher, KernelArg, KernelSource, int, launch_blocks, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "softmax_xent",
    code: include_str!("softmax_xent.cu"),
    kernels: &["cb_softmax_xent"],
    cooperative: &["cb_softmax_xent"],
}];

impl<E: Launcher> SoftmaxXent for GpuBackend<E> {
    unsafe fn softmax_xent_unchecked(
        &self,
        g: &SoftmaxXentGeom,
        logits: View<'_, Self>,
        labels: View<'_, Self>,
        dlogits: Option<ViewMut<'_, Self>>,
        stats: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (d, has) = match dlogits {
            Some(d) => (KernelArg::Ptr(self.region_mut(d)?.addr), 1),
            None => (KernelArg::Ptr(0), 0),
        };
        launch_blocks(
            &self.launcher,
            "cb_softmax_xent",
            1,
            &[
                ptr(self.region(logits)?),
                ptr(self.region(labels)?),
                d,
                ptr(self.region_mut(stats)?),
                int(g.batch),
                int(g.classes),
                KernelArg::F32(g.grad_scale),
                KernelArg::I32(has),
            ],
        )
    }
}
