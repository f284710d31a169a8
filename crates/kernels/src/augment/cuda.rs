//! GPU crop-and-flip (`augment.cu`).

use super::CropFlipGeom;
use crate::cuda::exec::{Dv, Exec, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource =
    KernelSource { module: "augment", code: include_str!("augment.cu"), kernels: &["cb_crop_flip"], cooperative: &[] };

pub(crate) fn crop_flip<E: Exec>(e: &E, g: &CropFlipGeom, x: Dv, params: Dv, y: Dv) -> Result<()> {
    launch_n(
        e,
        "cb_crop_flip",
        y.len,
        &[ptr(x), ptr(params), ptr(y), int(g.batch), int(g.channels), int(g.height), int(g.width), int(g.pad)],
    )
}
