//! GPU fused softmax + cross-entropy + accuracy (`softmax_xent.cu`).

use super::{SoftmaxXent, SoftmaxXentGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::exec::{Exec, KArg, KernelSource, int, launch_blocks, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "softmax_xent",
    code: include_str!("softmax_xent.cu"),
    kernels: &["cb_softmax_xent"],
    cooperative: &["cb_softmax_xent"],
}];

impl<E: Exec> SoftmaxXent for GpuBackend<E> {
    unsafe fn softmax_xent_unchecked(
        &self,
        g: &SoftmaxXentGeom,
        logits: View<'_, Self>,
        labels: View<'_, Self>,
        dlogits: Option<ViewMut<'_, Self>>,
        stats: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (d, has) = match dlogits {
            Some(d) => (KArg::Ptr(self.dv_mut(d)?.addr), 1),
            None => (KArg::Ptr(0), 0),
        };
        launch_blocks(
            &self.exec,
            "cb_softmax_xent",
            1,
            &[
                ptr(self.dv(logits)?),
                ptr(self.dv(labels)?),
                d,
                ptr(self.dv_mut(stats)?),
                int(g.batch),
                int(g.classes),
                KArg::F32(g.grad_scale),
                KArg::I32(has),
            ],
        )
    }
}
