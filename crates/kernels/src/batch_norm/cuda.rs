//! GPU batch norm: cuDNN (`cudnn.rs`: `cudnnBatchNormalization*`, spatial mode) when the
//! device uses it and the call qualifies, else the kernels of `batch_norm.cu` (one block per
//! channel for the training passes, two-pass statistics in double).

use super::{BatchNorm, BatchNormGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{DeviceRegion, Launcher, KernelArg, KernelSource, int, launch_blocks, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "batch_norm",
    code: include_str!("batch_norm.cu"),
    kernels: &["cb_bn_fwd_train", "cb_bn_fwd_infer", "cb_bn_bwd"],
    cooperative: &["cb_bn_fwd_train", "cb_bn_bwd"],
}];

impl<E: Launcher> BatchNorm for GpuBackend<E> {
    unsafe fn batch_norm_forward_train_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, params) = (self.region(x)?, self.region(params)?);
        forward_train(&self.launcher, g, x, params, self.region_mut(y)?, self.region_mut(saved)?, self.region_mut(running)?)
    }

    unsafe fn batch_norm_forward_infer_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        forward_infer(&self.launcher, g, self.region(x)?, self.region(params)?, self.region(running)?, self.region_mut(y)?)
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
        let (x, dy, params, saved) = (self.region(x)?, self.region(dy)?, self.region(params)?, self.region(saved)?);
        backward(&self.launcher, g, x, dy, params, saved, self.region_mut(dx)?, self.region_mut(dparams)?)
    }
}

/// A batch-norm call offered to cuDNN (views as in [`BatchNorm`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) enum BnCall {
    Train { x: DeviceRegion, params: DeviceRegion, y: DeviceRegion, saved: DeviceRegion, running: DeviceRegion },
    Infer { x: DeviceRegion, params: DeviceRegion, running: DeviceRegion, y: DeviceRegion },
    Backward { x: DeviceRegion, dy: DeviceRegion, params: DeviceRegion, saved: DeviceRegion, dx: DeviceRegion, dparams: DeviceRegion },
}

/// Runs `call` through cuDNN (`cudnn.rs`) when the executor has it and the call qualifies:
/// `Ok(true)` when done, `Ok(false)` when the kernels of `batch_norm.cu` must run.
#[allow(unused_variables)]
fn cudnn<E: Launcher>(e: &E, g: &BatchNormGeom, call: BnCall) -> Result<bool> {
    #[cfg(feature = "cuda")]
    {
        let op = crate::cuda::cudnn::CudnnOp(crate::cuda::cudnn::CudnnCall::BatchNorm { g: *g, call });
        if let Some(done) = e.cudnn_op(op)? {
            return Ok(done);
        }
    }
    Ok(false)
}

fn dims(g: &BatchNormGeom) -> [KernelArg; 3] {
    [int(g.batch), int(g.channels), int(g.spatial)]
}

fn forward_train<E: Launcher>(e: &E, g: &BatchNormGeom, x: DeviceRegion, params: DeviceRegion, y: DeviceRegion, saved: DeviceRegion, running: DeviceRegion) -> Result<()> {
    if cudnn(e, g, BnCall::Train { x, params, y, saved, running })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(params), ptr(y), ptr(saved), ptr(running)];
    a.extend(dims(g));
    a.extend([KernelArg::F32(g.eps), KernelArg::F32(g.momentum)]);
    launch_blocks(e, "cb_bn_fwd_train", g.channels, &a)
}

fn forward_infer<E: Launcher>(e: &E, g: &BatchNormGeom, x: DeviceRegion, params: DeviceRegion, running: DeviceRegion, y: DeviceRegion) -> Result<()> {
    if cudnn(e, g, BnCall::Infer { x, params, running, y })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(params), ptr(running), ptr(y)];
    a.extend(dims(g));
    a.push(KernelArg::F32(g.eps));
    launch_n(e, "cb_bn_fwd_infer", y.len, &a)
}

#[allow(clippy::too_many_arguments)]
fn backward<E: Launcher>(
    e: &E,
    g: &BatchNormGeom,
    x: DeviceRegion,
    dy: DeviceRegion,
    params: DeviceRegion,
    saved: DeviceRegion,
    dx: DeviceRegion,
    dparams: DeviceRegion,
) -> Result<()> {
    if cudnn(e, g, BnCall::Backward { x, dy, params, saved, dx, dparams })? {
        return Ok(());
    }
    let mut a = vec![ptr(x), ptr(dy), ptr(params), ptr(saved), ptr(dx), ptr(dparams)];
    a.extend(dims(g));
    launch_blocks(e, "cb_bn_bwd", g.channels, &a)
}
