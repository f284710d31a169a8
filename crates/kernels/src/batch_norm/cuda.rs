//! GPU batch norm: cuDNN (`cudnn.rs`: `cudnnBatchNormalization*`, spatial mode) when the
//! device uses it and the call qualifies, else the kernels of `batch_norm.cu` (one block per
//! channel for the training passes, two-pass statistics in double).
//!
//! The fused calls run the epilogue inside those kernels; on the cuDNN path they run cuDNN's
//! batch norm and one element-wise kernel for the epilogue (forward) or the mask (backward).

use super::{BatchNorm, BatchNormGeom, Epilogue};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{DeviceRegion, Launcher, KernelArg, KernelSource, int, launch_blocks, launch_n, ptr};
use crate::error::Result;

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "batch_norm",
    code: include_str!("batch_norm.cu"),
    kernels: &["cb_bn_fwd_train", "cb_bn_fwd_infer", "cb_bn_bwd", "cb_bn_epilogue", "cb_bn_grad_mask"],
    cooperative: &["cb_bn_fwd_train", "cb_bn_bwd"],
}];

impl<E: Launcher> BatchNorm for GpuBackend<E> {
    unsafe fn batch_norm_forward_train_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, params, ep) = (self.region(x)?, self.region(params)?, self.epi(ep)?);
        forward_train(&self.launcher, g, x, ep, params, self.region_mut(y)?, self.region_mut(saved)?, self.region_mut(running)?)
    }

    unsafe fn batch_norm_forward_infer_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let ep = self.epi(ep)?;
        forward_infer(&self.launcher, g, self.region(x)?, ep, self.region(params)?, self.region(running)?, self.region_mut(y)?)
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
        let grad = Grad { dy, mask: None, dres: None };
        backward(&self.launcher, g, x, grad, params, saved, self.region_mut(dx)?, self.region_mut(dparams)?)
    }

    unsafe fn batch_norm_backward_fused_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        y: Option<View<'_, Self>>,
        dy: ViewMut<'_, Self>,
        params: View<'_, Self>,
        saved: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        dres: Option<ViewMut<'_, Self>>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (x, params, saved) = (self.region(x)?, self.region(params)?, self.region(saved)?);
        let mask = y.map(|y| self.region(y)).transpose()?;
        let dres = dres.map(|d| self.region_mut(d)).transpose()?;
        let grad = Grad { dy: self.region_mut(dy)?, mask, dres };
        backward(&self.launcher, g, x, grad, params, saved, self.region_mut(dx)?, self.region_mut(dparams)?)
    }
}

impl<E: Launcher> GpuBackend<E> {
    fn epi(&self, ep: Epilogue<'_, Self>) -> Result<Epi> {
        Ok(Epi { residual: ep.residual.map(|r| self.region(r)).transpose()?, relu: ep.relu })
    }
}

/// A fused forward call's epilogue on device regions.
#[derive(Clone, Copy)]
struct Epi {
    residual: Option<DeviceRegion>,
    relu: bool,
}

impl Epi {
    fn is_none(&self) -> bool {
        self.residual.is_none() && !self.relu
    }

    /// The epilogue's kernel arguments: the residual (null when none), and the ReLU flag last.
    fn residual_arg(&self) -> KernelArg {
        opt(self.residual)
    }

    fn relu_arg(&self) -> KernelArg {
        int(self.relu as usize)
    }
}

/// The gradient a backward call reads: `dy`, masked by `mask > 0` when the forward call
/// rectified, and where the masked gradient also goes (the residual's gradient).
struct Grad {
    dy: DeviceRegion,
    mask: Option<DeviceRegion>,
    dres: Option<DeviceRegion>,
}

fn opt(r: Option<DeviceRegion>) -> KernelArg {
    r.map_or(KernelArg::Ptr(0), ptr)
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

/// Whether cuDNN is there for batch norm of this geometry (it may still decline a call).
#[allow(unused_variables)]
fn via_cudnn<E: Launcher>(e: &E, g: &BatchNormGeom) -> Result<bool> {
    #[cfg(feature = "cuda")]
    {
        if super::cudnn::accepts(g) {
            return Ok(e.with_cudnn(|_| Ok(()))?.is_some());
        }
    }
    Ok(false)
}

fn dims(g: &BatchNormGeom) -> [KernelArg; 3] {
    [int(g.batch), int(g.channels), int(g.spatial)]
}

/// After cuDNN wrote `y = bn(x)`: the fused epilogue as one element-wise kernel.
fn epilogue_after_cudnn<E: Launcher>(e: &E, ep: Epi, y: DeviceRegion) -> Result<()> {
    if ep.is_none() {
        return Ok(());
    }
    launch_n(e, "cb_bn_epilogue", y.len, &[ptr(y), ep.residual_arg(), int(y.len), ep.relu_arg()])
}

#[allow(clippy::too_many_arguments)]
fn forward_train<E: Launcher>(e: &E, g: &BatchNormGeom, x: DeviceRegion, ep: Epi, params: DeviceRegion, y: DeviceRegion, saved: DeviceRegion, running: DeviceRegion) -> Result<()> {
    if cudnn(e, g, BnCall::Train { x, params, y, saved, running })? {
        return epilogue_after_cudnn(e, ep, y);
    }
    let mut a = vec![ptr(x), ep.residual_arg(), ptr(params), ptr(y), ptr(saved), ptr(running)];
    a.extend(dims(g));
    a.extend([KernelArg::F32(g.eps), KernelArg::F32(g.momentum), ep.relu_arg()]);
    launch_blocks(e, "cb_bn_fwd_train", g.channels, &a)
}

fn forward_infer<E: Launcher>(e: &E, g: &BatchNormGeom, x: DeviceRegion, ep: Epi, params: DeviceRegion, running: DeviceRegion, y: DeviceRegion) -> Result<()> {
    if cudnn(e, g, BnCall::Infer { x, params, running, y })? {
        return epilogue_after_cudnn(e, ep, y);
    }
    let mut a = vec![ptr(x), ep.residual_arg(), ptr(params), ptr(running), ptr(y)];
    a.extend(dims(g));
    a.extend([KernelArg::F32(g.eps), ep.relu_arg()]);
    launch_n(e, "cb_bn_fwd_infer", y.len, &a)
}

#[allow(clippy::too_many_arguments)]
fn backward<E: Launcher>(
    e: &E,
    g: &BatchNormGeom,
    x: DeviceRegion,
    grad: Grad,
    params: DeviceRegion,
    saved: DeviceRegion,
    dx: DeviceRegion,
    dparams: DeviceRegion,
) -> Result<()> {
    let Grad { dy, mask, dres } = grad;
    if (mask.is_some() || dres.is_some()) && via_cudnn(e, g)? {
        // cuDNN's backward reads a plain gradient: mask it first, into the residual's
        // gradient (which is that masked gradient) or else over `dy` (which the fused call may
        // overwrite).
        let masked = dres.unwrap_or(dy);
        launch_n(e, "cb_bn_grad_mask", dy.len, &[opt(mask), ptr(dy), ptr(masked), int(dy.len)])?;
        if cudnn(e, g, BnCall::Backward { x, dy: masked, params, saved, dx, dparams })? {
            return Ok(());
        }
        // cuDNN declined after all: the kernel below reads the masked gradient as it is.
        let mut a = vec![ptr(x), KernelArg::Ptr(0), ptr(masked), ptr(params), ptr(saved), ptr(dx), KernelArg::Ptr(0), ptr(dparams)];
        a.extend(dims(g));
        return launch_blocks(e, "cb_bn_bwd", g.channels, &a);
    }
    let mut a = vec![ptr(x), opt(mask), ptr(dy), ptr(params), ptr(saved), ptr(dx), opt(dres), ptr(dparams)];
    a.extend(dims(g));
    launch_blocks(e, "cb_bn_bwd", g.channels, &a)
}
