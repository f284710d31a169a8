//! GPU SGD step (`optim.cu`).

use super::SgdConfig;
use crate::cuda::exec::{Dv, Exec, KArg, KernelSource, int, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource =
    KernelSource { module: "optim", code: include_str!("optim.cu"), kernels: &["cb_sgd"], cooperative: &[] };

pub(crate) fn sgd_step<E: Exec>(e: &E, cfg: &SgdConfig, p: Dv, g: Dv, v: Dv) -> Result<()> {
    launch_n(
        e,
        "cb_sgd",
        p.len,
        &[
            ptr(p),
            ptr(g),
            ptr(v),
            int(p.len),
            KArg::F32(cfg.lr),
            KArg::F32(cfg.momentum),
            KArg::F32(cfg.weight_decay),
            KArg::I32(cfg.nesterov as i32),
        ],
    )
}
