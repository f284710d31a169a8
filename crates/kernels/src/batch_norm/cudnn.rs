//! Batch norm on cuDNN (feature `cuda`): `cudnnBatchNormalization*` in spatial mode, with
//! the descriptors of each shape cached per backend. A call cuDNN cannot serve (`eps <
//! 1e-5`, fewer than two values per channel, sizes beyond `int`) runs on `batch_norm.cu`.

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cudnn::sys;

use super::BatchNormGeom;
use super::cuda::BnCall;
use crate::cuda::cudnn::{Cudnn, ONE, TensorDesc, ZERO, check_or_fallback, cptr, mptr};
use crate::error::Result;

/// The cuDNN functions batch norm calls (checked by the availability probe).
pub(crate) const SYMBOLS: &[&str] = &[
    "cudnnBatchNormalizationForwardTraining",
    "cudnnBatchNormalizationForwardInference",
    "cudnnBatchNormalizationBackward",
];

/// Descriptors of one batch-norm shape: `x` as `[n, c, spatial, 1]`, the per-channel
/// parameters as `[1, c, 1, 1]`.
struct BnDescs {
    x: TensorDesc,
    p: TensorDesc,
}

/// A backend's descriptors, by `(batch, channels, spatial)`.
#[derive(Default)]
struct Descs(HashMap<(usize, usize, usize), BnDescs>);

/// A batch-norm call, if cuDNN handles it: `eps >= 1e-5` (`CUDNN_BN_MIN_EPSILON` was
/// 1e-5 in older cuDNN; the f32 `1e-5`, a hair below it as a double, is passed as 1e-5),
/// at least two values per channel, sizes within `int`.
pub(crate) fn batch_norm(c: &Cudnn, g: &BatchNormGeom, call: BnCall) -> Result<bool> {
    if !accepts(g) {
        return Ok(false);
    }
    c.with(|h, cache: &mut Descs| run(h, &mut cache.0, g, call))?
}

/// Whether cuDNN serves batch norm of this geometry (the conditions above).
pub(crate) fn accepts(g: &BatchNormGeom) -> bool {
    f64::from(g.eps) >= 1e-5 - 1e-12 && g.count() >= 2 && i32::try_from(g.len()).is_ok()
}

fn run(
    h: sys::cudnnHandle_t,
    descs: &mut HashMap<(usize, usize, usize), BnDescs>,
    g: &BatchNormGeom,
    call: BnCall,
) -> Result<bool> {
    let key = (g.batch, g.channels, g.spatial);
    let d = match descs.entry(key) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => v.insert(BnDescs {
            x: TensorDesc::nchw([g.batch, g.channels, g.spatial, 1])?,
            p: TensorDesc::nchw([1, g.channels, 1, 1])?,
        }),
    };
    let c = g.channels;
    let (one, zero) = (&ONE as *const f32 as *const c_void, &ZERO as *const f32 as *const c_void);
    let mode = sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL;
    let (eps, mom) = (f64::from(g.eps).max(1e-5), f64::from(g.momentum));
    // SAFETY: descriptors match the checked lengths; parameter pairs are the two halves
    // of views of 2*c elements.
    let st = unsafe {
        match call {
            BnCall::Train { x, params, y, saved, running } => sys::cudnnBatchNormalizationForwardTraining(
                h,
                mode,
                one,
                zero,
                d.x.0,
                cptr(x.addr),
                d.x.0,
                mptr(y.addr),
                d.p.0,
                cptr(params.addr),
                cptr(params.at(c)),
                mom,
                mptr(running.addr),
                mptr(running.at(c)),
                eps,
                mptr(saved.addr),
                mptr(saved.at(c)),
            ),
            BnCall::Infer { x, params, running, y } => sys::cudnnBatchNormalizationForwardInference(
                h,
                mode,
                one,
                zero,
                d.x.0,
                cptr(x.addr),
                d.x.0,
                mptr(y.addr),
                d.p.0,
                cptr(params.addr),
                cptr(params.at(c)),
                cptr(running.addr),
                cptr(running.at(c)),
                eps,
            ),
            BnCall::Backward { x, dy, params, saved, dx, dparams } => sys::cudnnBatchNormalizationBackward(
                h,
                mode,
                one,
                zero,
                one,
                zero,
                d.x.0,
                cptr(x.addr),
                d.x.0,
                cptr(dy.addr),
                d.x.0,
                mptr(dx.addr),
                d.p.0,
                cptr(params.addr),
                mptr(dparams.addr),
                mptr(dparams.at(c)),
                eps,
                cptr(saved.addr),
                cptr(saved.at(c)),
            ),
        }
    };
    check_or_fallback(&format!("batch norm {g:?}"), st)
}
