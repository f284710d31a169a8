//! Argument checks shared by every backend: each op's lengths and constants are validated
//! here, once, so all backends reject the same bad calls with the same errors.

use crate::batch_norm::BatchNormGeom;
use crate::conv2d::Conv2dGeom;
use crate::dropout::DropoutConfig;
use crate::error::{KernelError, Result, check_len};
use crate::gemm::GemmConfig;
use crate::optim::SgdConfig;
use crate::pool::Pool2dGeom;

/// Every `others[i].1` equals `n`.
pub(crate) fn same_len(op: &'static str, n: usize, others: &[(&'static str, usize)]) -> Result<()> {
    for &(arg, len) in others {
        check_len(op, arg, n, len)?;
    }
    Ok(())
}

pub(crate) fn gemm(cfg: &GemmConfig, a: usize, b: usize, c: usize) -> Result<()> {
    let (la, lb, lc) = cfg.lens()?;
    check_len("gemm", "a", la, a)?;
    check_len("gemm", "b", lb, b)?;
    check_len("gemm", "c", lc, c)
}

pub(crate) fn sgd(cfg: &SgdConfig, param: usize, grad: usize, velocity: usize) -> Result<()> {
    cfg.validate()?;
    same_len("sgd_step", param, &[("grad", grad), ("velocity", velocity)])
}

/// A conv2d pass: `input`/`params`/`output` lengths (for the backward passes, `dx` is the
/// input and `dy` the output side) and a workspace of at least `ws_need` elements.
pub(crate) fn conv2d(
    op: &'static str,
    g: &Conv2dGeom,
    input: usize,
    params: usize,
    output: usize,
    ws_have: usize,
    ws_need: usize,
) -> Result<()> {
    g.check_lens(op, input, params, output)?;
    if ws_have >= ws_need {
        Ok(())
    } else {
        Err(KernelError::Length { op: "conv2d", arg: "workspace", expected: ws_need, actual: ws_have })
    }
}

pub(crate) fn bn_train(
    g: &BatchNormGeom,
    x: usize,
    params: usize,
    y: usize,
    saved: usize,
    running: usize,
) -> Result<()> {
    let op = "batch_norm_forward_train";
    g.check(op, x, params, y)?;
    check_len(op, "saved", g.stats_len(), saved)?;
    check_len(op, "running", g.stats_len(), running)
}

pub(crate) fn bn_infer(g: &BatchNormGeom, x: usize, params: usize, running: usize, y: usize) -> Result<()> {
    let op = "batch_norm_forward_infer";
    g.check(op, x, params, y)?;
    check_len(op, "running", g.stats_len(), running)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn bn_backward(
    g: &BatchNormGeom,
    x: usize,
    dy: usize,
    params: usize,
    saved: usize,
    dx: usize,
    dparams: usize,
) -> Result<()> {
    let op = "batch_norm_backward";
    g.check(op, x, params, dy)?;
    check_len(op, "saved", g.stats_len(), saved)?;
    check_len(op, "dx", g.len(), dx)?;
    check_len(op, "dparams", g.stats_len(), dparams)
}

pub(crate) fn max_pool_backward(g: &Pool2dGeom, x: usize, y: usize, dy: usize, dx: usize) -> Result<()> {
    let op = "max_pool_backward";
    g.check(op, x, y)?;
    check_len(op, "dy", g.output_len(), dy)?;
    check_len(op, "dx", g.input_len(), dx)
}

pub(crate) fn dropout(cfg: &DropoutConfig, x: usize, y: usize, mask: usize) -> Result<()> {
    cfg.validate()?;
    same_len("dropout_forward", x, &[("y", y), ("mask", mask)])
}
