//! GPU fused softmax + cross-entropy + accuracy (`softmax_xent.cu`).

use super::SoftmaxXentGeom;
use crate::cuda::exec::{Dv, Exec, KArg, KernelSource, int, launch_blocks, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource = KernelSource {
    module: "softmax_xent",
    code: include_str!("softmax_xent.cu"),
    kernels: &["cb_softmax_xent"],
    cooperative: &["cb_softmax_xent"],
};

pub(crate) fn forward<E: Exec>(
    e: &E,
    g: &SoftmaxXentGeom,
    logits: Dv,
    labels: Dv,
    dlogits: Option<Dv>,
    stats: Dv,
) -> Result<()> {
    let (d, has) = match dlogits {
        Some(d) => (KArg::Ptr(d.addr), 1),
        None => (KArg::Ptr(0), 0),
    };
    launch_blocks(
        e,
        "cb_softmax_xent",
        1,
        &[
            ptr(logits),
            ptr(labels),
            d,
            ptr(stats),
            int(g.batch),
            int(g.classes),
            KArg::F32(g.grad_scale),
            KArg::I32(has),
        ],
    )
}
