//! GPU batch norm: cuDNN (`cudnn.rs`: `cudnnBatchNormalization*`, spatial mode) when the
//! device uses it and the call qualifies, else the kernels of `batch_norm.cu` (one block per
//! channel for the training passes, two-pass statistics in double).

use super::{BatchNorm, BatchNormGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::exec::{Dv, Exec, KArg, KernelSource, int, launch_blocks, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "batch_norm",
    code: include_str!("batch_norm.cu"),
    kernels: &["cb_bn_fwd_train", "cb_bn_fwd_infer", "cb_bn_bwd"],
    cooperative: &["cb_bn_fwd_train", "cb_bn_bwd"],
}];

impl<E: Exec> BatchNorm for GpuBackend<E> {
    unsafe fn batch_norm_forward_train_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, params) = (self.dv(x)?, self.dv(params)?);
        forward_train(&self.exec, g, x, params, self.dv_mut(y)?, self.dv_mut(saved)?, self.dv_mut(running)?)
    }

    unsafe fn batch_norm_forward_infer_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        forward_infer(&self.exec, g, self.dv(x)?, self.dv(params)?, self.dv(running)?, self.dv_mut(y)?)
    }

    unsafe fn batch_norm_backward_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        saved: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, dy, params, saved) = (self.dv(x)?, self.dv(dy)?, self.dv(params)?, self.dv(saved)?);
        backward(&self.exec, g, x, dy, params, saved, self.dv_mut(dx)?, self.dv_mut(dparams)?)
    }
}

/// A batch-norm call offered to cuDNN (views as in [`BatchNorm`]).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) enum BnCall {
    Train { x: Dv, params: Dv, y: Dv, saved: Dv, running: Dv },
    Infer { x: Dv, params: Dv, running: Dv, y: Dv },
    Backward { x: Dv, dy: Dv, params: Dv, saved: Dv, dx: Dv, dparams: Dv },
}

/// Runs `call` through cuDNN (`cudnn.rs`) when the executor has it and the call qualifies:
/// `Ok(true)` when done, `Ok(false)` when the kernels of `batch_norm.cu` must run.
#[allow(unused_variables)]
fn cudnn<E: Exec>(e: &E, g: &BatchNormGeom, call: BnCall) -> Result<bool> {
    #[cfg(feature = "cuda")]
    if let Some(done) = e.with_cudnn(|c| super::cudnn::batch_norm(c, g, call))? {
        return Ok(done);
    }
    Ok(false)
}

fn dims(g: &BatchNormGeom) -> [KArg; 3] {
    [int(g.batch), int(g.channels), int(g.spatial)]
}

fn forward_train<E: Exec>(e: &E, g: &BatchNormGeom, x: Dv, params: Dv, y: Dv, saved: Dv, running: Dv) -> Result<()> {
    if cudnn(e, g, BnCall::Train { x, params, y, saved, running })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(params), ptr(y), ptr(saved), ptr(running)];
    a.extend(dims(g));
    a.extend([KArg::F32(g.eps), KArg::F32(g.momentum)]);
    launch_blocks(e, "cb_bn_fwd_train", g.channels, &a)
}

fn forward_infer<E: Exec>(e: &E, g: &BatchNormGeom, x: Dv, params: Dv, running: Dv, y: Dv) -> Result<()> {
    if cudnn(e, g, BnCall::Infer { x, params, running, y })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(params), ptr(running), ptr(y)];
    a.extend(dims(g));
    a.push(KArg::F32(g.eps));
    launch_n(e, "cb_bn_fwd_infer", y.len, &a)
}

#[allow(clippy::too_many_arguments)]
fn backward<E: Exec>(
    e: &E,
    g: &BatchNormGeom,
    x: Dv,
    dy: Dv,
    params: Dv,
    saved: Dv,
    dx: Dv,
    dparams: Dv,
) -> Result<()> {
    if cudnn(e, g, BnCall::Backward { x, dy, params, saved, dx, dparams })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(dy), ptr(params), ptr(saved), ptr(dx), ptr(dparams)];
    a.extend(dims(g));
    launch_blocks(e, "cb_bn_bwd", g.channels, &a)
}
