//! cuDNN for convolution and batch norm, through cudarc's raw bindings (cudarc's safe
//! `Cudnn` handle is not `Send`, and a backend must be). One handle per backend, bound to
//! the backend's stream, used under a mutex (cuDNN handles must not be used concurrently).
//!
//! * Availability ([`probe`]): `libcudnn.so.9` loads, exports every function used here
//!   (checked before any call: cudarc resolves symbols lazily and would panic on a missing
//!   one), and reports version ≥ 9.0.
//! * Accuracy: convolutions use `CUDNN_FMA_MATH` (no TF32 tensor cores, which Ampere+
//!   would otherwise allow for f32) and never the FFT algorithms, so results stay within the
//!   suite's 1e-4 bound of the CPU.
//! * A geometry cuDNN cannot plan (or a batch norm with `eps < 1e-5`, or fewer than two
//!   values per channel) runs on the fallback kernels instead.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::cudnn::sys;

use super::common::CudnnStatus;
use super::exec::{BnCall, ConvPass, Dv};
use crate::batch_norm::BatchNormGeom;
use crate::conv2d::Conv2dGeom;
use crate::error::{KernelError, Result};

/// Every cuDNN function this module calls.
const SYMBOLS: &[&str] = &[
    "cudnnGetVersion",
    "cudnnCreate",
    "cudnnDestroy",
    "cudnnSetStream",
    "cudnnCreateTensorDescriptor",
    "cudnnSetTensor4dDescriptor",
    "cudnnDestroyTensorDescriptor",
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
    "cudnnBatchNormalizationForwardTraining",
    "cudnnBatchNormalizationForwardInference",
    "cudnnBatchNormalizationBackward",
];

/// Whether cuDNN can be used, without calling anything that could panic.
pub(crate) fn probe() -> CudnnStatus {
    // SAFETY: only tries to dlopen the library.
    if !unsafe { sys::is_culib_present() } {
        return CudnnStatus::Disabled { reason: "libcudnn.so.9 not found on the library path".into() };
    }
    // SAFETY: the library is present (checked above), so culib() does not panic.
    let lib = unsafe { sys::culib() };
    for s in SYMBOLS {
        // SAFETY: only looks the symbol up; it is never called through this pointer.
        if unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err() {
            return CudnnStatus::Disabled { reason: format!("the cuDNN library lacks {s}") };
        }
    }
    let version = cudarc::cudnn::result::get_version();
    if version < 90000 {
        return CudnnStatus::Disabled { reason: format!("cuDNN {version} is older than 9.0") };
    }
    CudnnStatus::Enabled { version }
}

fn check(what: &str, st: sys::cudnnStatus_t) -> Result<()> {
    st.result().map_err(|e| KernelError::Cuda { context: format!("cuDNN {what}"), msg: format!("{:?}", e.0) })
}

fn i32_of(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| KernelError::invalid("cudnn", format!("{what} {v} does not fit cuDNN's int")))
}

fn cptr(a: u64) -> *const c_void {
    a as usize as *const c_void
}

fn mptr(a: u64) -> *mut c_void {
    a as usize as *mut c_void
}

struct TensorDesc(sys::cudnnTensorDescriptor_t);
impl TensorDesc {
    fn nchw(dims: [usize; 4]) -> Result<Self> {
        let mut d = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("create tensor descriptor", unsafe { sys::cudnnCreateTensorDescriptor(&mut d) })?;
        let t = TensorDesc(d);
        let [n, c, h, w] = dims;
        // SAFETY: `t.0` is a live descriptor.
        check("set tensor descriptor", unsafe {
            sys::cudnnSetTensor4dDescriptor(
                t.0,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
                i32_of(n, "n")?,
                i32_of(c, "c")?,
                i32_of(h, "h")?,
                i32_of(w, "w")?,
            )
        })?;
        Ok(t)
    }
}
impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnCreateTensorDescriptor, destroyed once.
        let _ = unsafe { sys::cudnnDestroyTensorDescriptor(self.0) };
    }
}

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
/// tensor-op math.
fn pick(perf: &[PerfRaw], returned: i32, fft: &[u32]) -> Option<u32> {
    let tensor_ops = [
        sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH as u32,
        sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION as u32,
    ];
    perf.iter()
        .take(returned.max(0) as usize)
        .find(|p| p.status == 0 && !fft.contains(&p.algo) && !tensor_ops.contains(&p.math_type))
        .map(|p| p.algo)
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
    fn new(h: sys::cudnnHandle_t, g: &Conv2dGeom) -> Result<ConvPlan> {
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
        let fwd = pick(&perf, n, &fft).and_then(fwd_algo).ok_or_else(|| no_algo("forward"))?;

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
        let bwd_data = pick(&perf, n, &fft).and_then(bwd_data_algo).ok_or_else(|| no_algo("backward data"))?;

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
        let bwd_filter = pick(&perf, n, &fft).and_then(bwd_filter_algo).ok_or_else(|| no_algo("backward filter"))?;

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

/// Descriptors of one batch-norm shape: `x` as `[n, c, spatial, 1]`, the per-channel
/// parameters as `[1, c, 1, 1]`.
struct BnDescs {
    x: TensorDesc,
    p: TensorDesc,
}

struct Inner {
    handle: sys::cudnnHandle_t,
    plans: HashMap<Conv2dGeom, Option<ConvPlan>>,
    bn: HashMap<(usize, usize, usize), BnDescs>,
    reported: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.plans.clear();
        self.bn.clear();
        // SAFETY: created by cudnnCreate, destroyed once, after its descriptors.
        let _ = unsafe { sys::cudnnDestroy(self.handle) };
    }
}

/// A backend's cuDNN handle and its cached plans.
pub(crate) struct Cudnn {
    inner: Mutex<Inner>,
}

// SAFETY: the raw handle and descriptors are only used while holding the mutex, and cuDNN
// handles may move between threads (they must not be used by two threads at once).
unsafe impl Send for Cudnn {}
// SAFETY: as above.
unsafe impl Sync for Cudnn {}

const ONE: f32 = 1.0;
const ZERO: f32 = 0.0;

impl Cudnn {
    /// A handle bound to `stream` (the caller has made the context current).
    pub(crate) fn new(stream: sys::cudaStream_t) -> Result<Cudnn> {
        let mut h = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cudnnCreate", unsafe { sys::cudnnCreate(&mut h) })?;
        let inner = Inner { handle: h, plans: HashMap::new(), bn: HashMap::new(), reported: false };
        // SAFETY: live handle; the stream outlives the backend that owns this handle.
        check("cudnnSetStream", unsafe { sys::cudnnSetStream(h, stream) })?;
        Ok(Cudnn { inner: Mutex::new(inner) })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| KernelError::Cuda { context: "cuDNN".into(), msg: "lock poisoned by a panic".into() })
    }

    /// The plan of `g`, made on first use; `None` when cuDNN cannot plan it (reported once
    /// per backend on stderr; the fallback runs instead).
    fn with_plan<T>(
        &self,
        g: &Conv2dGeom,
        f: impl FnOnce(sys::cudnnHandle_t, &ConvPlan) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut inner = self.lock()?;
        let handle = inner.handle;
        if !inner.plans.contains_key(g) {
            let plan = match ConvPlan::new(handle, g) {
                Ok(p) => Some(p),
                Err(e) => {
                    if !inner.reported {
                        eprintln!("crossbow: cuDNN cannot plan conv2d {g:?} ({e}); using the im2col fallback");
                        inner.reported = true;
                    }
                    None
                }
            };
            inner.plans.insert(*g, plan);
        }
        match inner.plans.get(g) {
            Some(Some(plan)) => f(handle, plan).map(Some),
            _ => Ok(None),
        }
    }

    /// Workspace `f32`s for all passes of `g`, or `None` when cuDNN does not handle it.
    pub(crate) fn conv_workspace(&self, g: &Conv2dGeom) -> Option<usize> {
        self.with_plan(g, |_, p| Ok(p.workspace_bytes.div_ceil(4))).ok().flatten()
    }

    /// One convolution pass (`a`, `b`, `out` as in [`super::exec::Exec::conv2d_cudnn`]).
    pub(crate) fn conv(&self, pass: ConvPass, g: &Conv2dGeom, a: Dv, b: Dv, out: Dv, ws: Dv) -> Result<bool> {
        let done = self.with_plan(g, |h, p| {
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
            check(&format!("conv2d {pass:?}"), st)
        })?;
        Ok(done.is_some())
    }

    /// A batch-norm call, if cuDNN handles it: `eps >= 1e-5` (`CUDNN_BN_MIN_EPSILON` was
    /// 1e-5 in older cuDNN; the f32 `1e-5`, a hair below it as a double, is passed as 1e-5),
    /// at least two values per channel, sizes within `int`.
    pub(crate) fn batch_norm(&self, g: &BatchNormGeom, call: BnCall) -> Result<bool> {
        if f64::from(g.eps) < 1e-5 - 1e-12 || g.count() < 2 || i32::try_from(g.len()).is_err() {
            return Ok(false);
        }
        let mut inner = self.lock()?;
        let h = inner.handle;
        let key = (g.batch, g.channels, g.spatial);
        let d = match inner.bn.entry(key) {
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
        check("batch norm", st)?;
        Ok(true)
    }
}
