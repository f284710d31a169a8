//! GPU dropout (`dropout.cu`): the counter-based mask of [`super::keep`], bit-identical.

use super::DropoutConfig;
use crate::cuda::exec::{Dv, Exec, KArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource = KernelSource {
    module: "dropout",
    code: include_str!("dropout.cu"),
    kernels: &["cb_dropout_fwd"],
    cooperative: &[],
};

pub(crate) fn forward<E: Exec>(e: &E, cfg: &DropoutConfig, x: Dv, y: Dv, mask: Dv) -> Result<()> {
    // The scale is computed on the host, exactly as the CPU does.
    launch_n(
        e,
        "cb_dropout_fwd",
        y.len,
        &[ptr(x), ptr(y), ptr(mask), int(y.len), KArg::F32(cfg.p), KArg::F32(cfg.scale()), KArg::U64(cfg.seed)],
    )
}
