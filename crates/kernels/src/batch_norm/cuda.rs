//! GPU batch norm: cuDNN (`cudnnBatchNormalization*`, spatial mode) when the device uses it
//! and the call qualifies, else the kernels of `batch_norm.cu` (one block per channel for
//! the training passes, two-pass statistics in double).

use super::BatchNormGeom;
use crate::cuda::exec::{BnCall, Dv, Exec, KArg, KernelSource, int, launch_blocks, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCE: KernelSource = KernelSource {
    module: "batch_norm",
    code: include_str!("batch_norm.cu"),
    kernels: &["cb_bn_fwd_train", "cb_bn_fwd_infer", "cb_bn_bwd"],
    cooperative: &["cb_bn_fwd_train", "cb_bn_bwd"],
};

fn dims(g: &BatchNormGeom) -> [KArg; 3] {
    [int(g.batch), int(g.channels), int(g.spatial)]
}

pub(crate) fn forward_train<E: Exec>(
    e: &E,
    g: &BatchNormGeom,
    x: Dv,
    params: Dv,
    y: Dv,
    saved: Dv,
    running: Dv,
) -> Result<()> {
    if e.batch_norm_cudnn(g, BnCall::Train { x, params, y, saved, running })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(params), ptr(y), ptr(saved), ptr(running)];
    a.extend(dims(g));
    a.extend([KArg::F32(g.eps), KArg::F32(g.momentum)]);
    launch_blocks(e, "cb_bn_fwd_train", g.channels, &a)
}

pub(crate) fn forward_infer<E: Exec>(e: &E, g: &BatchNormGeom, x: Dv, params: Dv, running: Dv, y: Dv) -> Result<()> {
    if e.batch_norm_cudnn(g, BnCall::Infer { x, params, running, y })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(params), ptr(running), ptr(y)];
    a.extend(dims(g));
    a.push(KArg::F32(g.eps));
    launch_n(e, "cb_bn_fwd_infer", y.len, &a)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<E: Exec>(
    e: &E,
    g: &BatchNormGeom,
    x: Dv,
    dy: Dv,
    params: Dv,
    saved: Dv,
    dx: Dv,
    dparams: Dv,
) -> Result<()> {
    if e.batch_norm_cudnn(g, BnCall::Backward { x, dy, params, saved, dx, dparams })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(dy), ptr(params), ptr(saved), ptr(dx), ptr(dparams)];
    a.extend(dims(g));
    launch_blocks(e, "cb_bn_bwd", g.channels, &a)
}
