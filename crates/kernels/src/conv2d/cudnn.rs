//! conv2d on cuDNN (feature `cuda`): descriptors, algorithms and workspace of each geometry
//! (a [`ConvPlan`], made on first use and cached per backend), and the three passes.
//!
//! Accuracy: convolutions use `CUDNN_FMA_MATH` (no TF32 tensor cores, which Ampere+ would
//! otherwise allow for f32) and never the FFT algorithms, so results stay within the tests'
//! 1e-4 bound of the CPU. A geometry cuDNN cannot plan runs on the im2col fallback instead.
//!
//! Determinism: with [`crate::cuda::CudaOptions::deterministic`] (the default) only
//! algorithms cuDNN reports as `CUDNN_DETERMINISTIC` are chosen (the backward passes'
//! non-deterministic ones accumulate with atomics, so two runs could differ in the last
//! bits); the choices are listed by [`chosen_algorithms`] for `crossbow doctor`.

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cudnn::sys;

use super::Conv2dGeom;
use super::cuda::ConvPass;
use crate::cuda::cudnn::{Cudnn, ONE, TensorDesc, ZERO, check, check_or_fallback, cptr, i32_of, mptr};
use crate::cuda::launch::DeviceRegion;
use crate::error::{KernelError, Result};

/// The cuDNN functions conv2d calls (checked by the availability probe).
pub(crate) const SYMBOLS: &[&str] = &[
    "cudnnCreateFilterDescriptor",
    "cudnnSetFilter4dDescriptor",
    "cudnnDestroyFilterDescriptor",
    "cudnnCreateConvolutionDescriptor",
    "cudnnSetConvolution2dDescriptor",
    "cudnnSetConvolutionMathType",
    "cudnnDestroyConvolutionDescriptor",
    "cudnnGetConvolutionForwardAlgorithm_v7",
    "cudnnGetConvolutionForwardWorkspaceSize",
    "cudnnConvolutionForward",
    "cudnnGetConvolutionBackwardDataAlgorithm_v7",
    "cudnnGetConvolutionBackwardDataWorkspaceSize",
    "cudnnConvolutionBackwardData",
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
    "cudnnGetConvolutionBackwardFilterWorkspaceSize",
    "cudnnConvolutionBackwardFilter",
];

struct FilterDesc(sys::cudnnFilterDescriptor_t);
impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnCreateFilterDescriptor, destroyed once.
        let _ = unsafe { sys::cudnnDestroyFilterDescriptor(self.0) };
    }
}

struct ConvDesc(sys::cudnnConvolutionDescriptor_t);
impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnCreateConvolutionDescriptor, destroyed once.
        let _ = unsafe { sys::cudnnDestroyConvolutionDescriptor(self.0) };
    }
}

/// Descriptors, algorithms and workspace of one convolution geometry.
struct ConvPlan {
    x: TensorDesc,
    y: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    fwd: sys::cudnnConvolutionFwdAlgo_t,
    bwd_data: sys::cudnnConvolutionBwdDataAlgo_t,
    bwd_filter: sys::cudnnConvolutionBwdFilterAlgo_t,
    workspace_bytes: usize,
}

/// `cudnnConvolution*AlgoPerf_t` read as plain integers: the three structs share this
/// layout, and reading the enums as `u32` keeps an unknown value from being undefined
/// behaviour on the Rust side.
#[repr(C)]
#[derive(Clone, Copy)]
struct PerfRaw {
    algo: u32,
    status: u32,
    time: f32,
    memory: usize,
    determinism: u32,
    math_type: u32,
    reserved: [i32; 3],
}

const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<PerfRaw>() == size_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
    assert!(size_of::<PerfRaw>() == size_of::<sys::cudnnConvolutionBwdDataAlgoPerf_t>());
    assert!(size_of::<PerfRaw>() == size_of::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>());
    assert!(align_of::<PerfRaw>() == align_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
};

const PERF_ZERO: PerfRaw =
    PerfRaw { algo: 0, status: u32::MAX, time: 0.0, memory: 0, determinism: 0, math_type: 0, reserved: [0; 3] };

/// The first acceptable algorithm of a heuristic list: succeeded, not FFT-based, not
/// tensor-op math, and deterministic when `deterministic`.
fn pick(perf: &[PerfRaw], returned: i32, fft: &[u32], deterministic: bool) -> Option<u32> {
    let tensor_ops = [
        sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH as u32,
        sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION as u32,
    ];
    let det = sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC as u32;
    perf.iter()
        .take(returned.max(0) as usize)
        .filter(|p| !deterministic || p.determinism == det)
        .find(|p| p.status == 0 && !fft.contains(&p.algo) && !tensor_ops.contains(&p.math_type))
        .map(|p| p.algo)
}

/// The algorithms chosen in this process, one line per geometry and mode (for the doctor).
pub fn chosen_algorithms() -> Vec<String> {
    chosen().lock().map(|c| c.clone()).unwrap_or_default()
}

fn chosen() -> &'static std::sync::Mutex<Vec<String>> {
    static CHOSEN: std::sync::OnceLock<std::sync::Mutex<Vec<String>>> = std::sync::OnceLock::new();
    CHOSEN.get_or_init(|| std::sync::Mutex::new(Vec::new()))
}

fn fwd_algo(v: u32) -> Option<sys::cudnnConvolutionFwdAlgo_t> {
    use sys::cudnnConvolutionFwdAlgo_t as A;
    [
        A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        A::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        A::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        A::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        A::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
    ]
    .into_iter()
    .find(|a| *a as u32 == v)
}

fn bwd_data_algo(v: u32) -> Option<sys::cudnnConvolutionBwdDataAlgo_t> {
    use sys::cudnnConvolutionBwdDataAlgo_t as A;
    [
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
    ]
    .into_iter()
    .find(|a| *a as u32 == v)
}

fn bwd_filter_algo(v: u32) -> Option<sys::cudnnConvolutionBwdFilterAlgo_t> {
    use sys::cudnnConvolutionBwdFilterAlgo_t as A;
    [
        A::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
        A::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
        A::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
        A::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD,
        A::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
    ]
    .into_iter()
    .find(|a| *a as u32 == v)
}

fn no_algo(pass: &str) -> KernelError {
    KernelError::Cuda { context: format!("cuDNN {pass}"), msg: "no acceptable algorithm".into() }
}

impl ConvPlan {
    fn new(h: sys::cudnnHandle_t, g: &Conv2dGeom, deterministic: bool) -> Result<ConvPlan> {
        let x = TensorDesc::nchw([g.batch, g.in_channels, g.in_h, g.in_w])?;
        let y = TensorDesc::nchw([g.batch, g.out_channels, g.out_h(), g.out_w()])?;
        let mut wd = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("create filter descriptor", unsafe { sys::cudnnCreateFilterDescriptor(&mut wd) })?;
        let w = FilterDesc(wd);
        // SAFETY: live descriptor.
        check("set filter descriptor", unsafe {
            sys::cudnnSetFilter4dDescriptor(
                w.0,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                i32_of(g.out_channels, "c_out")?,
                i32_of(g.in_channels, "c_in")?,
                i32_of(g.kernel_h, "kh")?,
                i32_of(g.kernel_w, "kw")?,
            )
        })?;
        let mut cd = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("create convolution descriptor", unsafe { sys::cudnnCreateConvolutionDescriptor(&mut cd) })?;
        let conv = ConvDesc(cd);
        // SAFETY: live descriptor.
        check("set convolution descriptor", unsafe {
            sys::cudnnSetConvolution2dDescriptor(
                conv.0,
                i32_of(g.pad_h, "pad")?,
                i32_of(g.pad_w, "pad")?,
                i32_of(g.stride_h, "stride")?,
                i32_of(g.stride_w, "stride")?,
                1,
                1,
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
        })?;
        // SAFETY: live descriptor.
        check("set math type", unsafe {
            sys::cudnnSetConvolutionMathType(conv.0, sys::cudnnMathType_t::CUDNN_FMA_MATH)
        })?;

        let mut perf = [PERF_ZERO; 8];
        let mut n = 0i32;
        // SAFETY: `perf` has room for the 8 results requested; PerfRaw has the layout of
        // cudnnConvolutionFwdAlgoPerf_t.
        check("forward algorithm", unsafe {
            sys::cudnnGetConvolutionForwardAlgorithm_v7(h, x.0, w.0, conv.0, y.0, 8, &mut n, perf.as_mut_ptr().cast())
        })?;
        use sys::cudnnConvolutionBwdDataAlgo_t as D;
        use sys::cudnnConvolutionBwdFilterAlgo_t as F;
        use sys::cudnnConvolutionFwdAlgo_t as A;
        let fft = [A::CUDNN_CONVOLUTION_FWD_ALGO_FFT as u32, A::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING as u32];
        let fwd = pick(&perf, n, &fft, deterministic).and_then(fwd_algo).ok_or_else(|| no_algo("forward"))?;

        let mut perf = [PERF_ZERO; 8];
        // SAFETY: as above, 6 results requested.
        check("backward data algorithm", unsafe {
            sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                h,
                w.0,
                y.0,
                conv.0,
                x.0,
                6,
                &mut n,
                perf.as_mut_ptr().cast(),
            )
        })?;
        let fft = [D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT as u32, D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING as u32];
        let bwd_data =
            pick(&perf, n, &fft, deterministic).and_then(bwd_data_algo).ok_or_else(|| no_algo("backward data"))?;

        let mut perf = [PERF_ZERO; 8];
        // SAFETY: as above, 7 results requested.
        check("backward filter algorithm", unsafe {
            sys::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                h,
                x.0,
                y.0,
                conv.0,
                w.0,
                7,
                &mut n,
                perf.as_mut_ptr().cast(),
            )
        })?;
        let fft =
            [F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT as u32, F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING as u32];
        let bwd_filter =
            pick(&perf, n, &fft, deterministic).and_then(bwd_filter_algo).ok_or_else(|| no_algo("backward filter"))?;
        if let Ok(mut c) = chosen().lock() {
            let line = format!(
                "conv2d {}x{}x{}x{} -> {} k{}x{} s{} p{}{}: forward {fwd:?}, backward data {bwd_data:?}, backward filter {bwd_filter:?}",
                g.batch,
                g.in_channels,
                g.in_h,
                g.in_w,
                g.out_channels,
                g.kernel_h,
                g.kernel_w,
                g.stride_h,
                g.pad_h,
                if deterministic { " (deterministic)" } else { "" }
            );
            if !c.contains(&line) {
                c.push(line);
            }
        }

        let (mut s1, mut s2, mut s3) = (0usize, 0usize, 0usize);
        // SAFETY: live handle and descriptors; valid out-pointers.
        unsafe {
            check(
                "forward workspace",
                sys::cudnnGetConvolutionForwardWorkspaceSize(h, x.0, w.0, conv.0, y.0, fwd, &mut s1),
            )?;
            check(
                "backward data workspace",
                sys::cudnnGetConvolutionBackwardDataWorkspaceSize(h, w.0, y.0, conv.0, x.0, bwd_data, &mut s2),
            )?;
            check(
                "backward filter workspace",
                sys::cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x.0, y.0, conv.0, w.0, bwd_filter, &mut s3),
            )?;
        }
        Ok(ConvPlan { x, y, w, conv, fwd, bwd_data, bwd_filter, workspace_bytes: s1.max(s2).max(s3) })
    }
}

/// A backend's plans, by geometry (`None`: cuDNN cannot plan it), and whether a failed plan
/// was reported.
#[derive(Default)]
struct Plans {
    plans: HashMap<Conv2dGeom, Option<ConvPlan>>,
    reported: bool,
}

/// Runs `f` with the plan of `g`, made on first use; `Ok(None)` when cuDNN cannot plan it
/// (reported once per backend on stderr; the fallback runs instead).
fn with_plan<T>(
    c: &Cudnn,
    g: &Conv2dGeom,
    f: impl FnOnce(sys::cudnnHandle_t, &ConvPlan) -> Result<T>,
) -> Result<Option<T>> {
    c.with_mode(|handle, deterministic, cache: &mut Plans| {
        if !cache.plans.contains_key(g) {
            let plan = match ConvPlan::new(handle, g, deterministic) {
                Ok(p) => Some(p),
                Err(e) => {
                    if !cache.reported {
                        eprintln!("crossbow: cuDNN cannot plan conv2d {g:?} ({e}); using the im2col fallback");
                        cache.reported = true;
                    }
                    None
                }
            };
            cache.plans.insert(*g, plan);
        }
        match cache.plans.get(g) {
            Some(Some(plan)) => f(handle, plan).map(Some),
            _ => Ok(None),
        }
    })?
}

/// Workspace `f32`s for all passes of `g`, or `None` when cuDNN does not handle it.
pub(crate) fn workspace(c: &Cudnn, g: &Conv2dGeom) -> Option<usize> {
    with_plan(c, g, |_, p| Ok(p.workspace_bytes.div_ceil(4))).ok().flatten()
}

/// One convolution pass (no bias) if cuDNN handles `g`: `Ok(true)` when done, `Ok(false)`
/// when the caller must run the fallback (cuDNN cannot plan `g`, or refused this call's
/// operands, e.g. a pointer it finds misaligned: said once on stderr). `(a, b) -> out` is `(x, weights) -> y` forward,
/// `(dy, weights) -> dx` for the data gradient, and `(x, dy) -> dweights` for the filter
/// gradient.
pub(crate) fn conv(c: &Cudnn, pass: ConvPass, g: &Conv2dGeom, a: DeviceRegion, b: DeviceRegion, out: DeviceRegion, ws: DeviceRegion) -> Result<bool> {
    let done = with_plan(c, g, |h, p| {
        let (one, zero) = (&ONE as *const f32 as *const c_void, &ZERO as *const f32 as *const c_void);
        let (wsp, wsb) = (mptr(ws.addr), 4 * ws.len);
        // SAFETY: descriptors match the geometry whose lengths the backend checked;
        // the workspace holds at least `workspace_bytes`.
        let st = unsafe {
            match pass {
                ConvPass::Forward => sys::cudnnConvolutionForward(
                    h,
                    one,
                    p.x.0,
                    cptr(a.addr),
                    p.w.0,
                    cptr(b.addr),
                    p.conv.0,
                    p.fwd,
                    wsp,
                    wsb,
                    zero,
                    p.y.0,
                    mptr(out.addr),
                ),
                ConvPass::BackwardData => sys::cudnnConvolutionBackwardData(
                    h,
                    one,
                    p.w.0,
                    cptr(b.addr),
                    p.y.0,
                    cptr(a.addr),
                    p.conv.0,
                    p.bwd_data,
                    wsp,
                    wsb,
                    zero,
                    p.x.0,
                    mptr(out.addr),
                ),
                ConvPass::BackwardFilter => sys::cudnnConvolutionBackwardFilter(
                    h,
                    one,
                    p.x.0,
                    cptr(a.addr),
                    p.y.0,
                    cptr(b.addr),
                    p.conv.0,
                    p.bwd_filter,
                    wsp,
                    wsb,
                    zero,
                    p.w.0,
                    mptr(out.addr),
                ),
            }
        };
        check_or_fallback(&format!("conv2d {pass:?} {g:?}"), st)
    })?;
    Ok(done == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(algo: u32, deterministic: bool) -> PerfRaw {
        let determinism = if deterministic {
            sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC
        } else {
            sys::cudnnDeterminism_t::CUDNN_NON_DETERMINISTIC
        };
        PerfRaw { algo, status: 0, determinism: determinism as u32, math_type: 0, ..PERF_ZERO }
    }

    /// With determinism asked for, a faster non-deterministic algorithm listed first is passed
    /// over; without, the heuristic's first acceptable one wins; none deterministic: none
    /// (the geometry runs on the fallback kernels).
    #[test]
    fn deterministic_plans_skip_non_deterministic_algorithms() {
        let list = [perf(0, false), perf(1, true), perf(2, true)];
        assert_eq!(pick(&list, 3, &[], true), Some(1));
        assert_eq!(pick(&list, 3, &[], false), Some(0));
        assert_eq!(pick(&list, 3, &[1], true), Some(2), "FFT excluded");
        assert_eq!(pick(&list[..1], 1, &[], true), None);
        assert_eq!(pick(&list, 1, &[], true), None, "only the returned entries count");
    }

    /// A misaligned pointer or an unsupported shape makes the call fall back to crossbow's
    /// kernels (`Ok(false)`); success is `Ok(true)`; any other failure stays an error.
    #[test]
    fn cudnn_refusals_fall_back_other_failures_do_not() {
        use crate::cuda::cudnn::check_or_fallback;
        use sys::cudnnStatus_t as S;
        assert!(check_or_fallback("t", S::CUDNN_STATUS_SUCCESS).unwrap());
        for s in [S::CUDNN_STATUS_BAD_PARAM, S::CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, S::CUDNN_STATUS_NOT_SUPPORTED, S::CUDNN_STATUS_NOT_SUPPORTED_SHAPE] {
            assert!(!check_or_fallback("t", s).unwrap(), "{s:?}");
        }
        for s in [S::CUDNN_STATUS_EXECUTION_FAILED, S::CUDNN_STATUS_INTERNAL_ERROR, S::CUDNN_STATUS_ALLOC_FAILED] {
            assert!(check_or_fallback("t", s).is_err(), "{s:?}");
        }
    }
}
