//! The shared part of cuDNN, through cudarc's raw bindings (cudarc's safe `Cudnn` handle is
//! not `Send`, and a backend must be): the availability probe, the handle, tensor
//! descriptors and status checks. One handle per backend, bound to the backend's stream,
//! used under a mutex (cuDNN handles must not be used concurrently). The ops that use cuDNN
//! keep their calls, plans and caches in their own folders (`conv2d/cudnn.rs`,
//! `batch_norm/cudnn.rs`) and reach the handle through [`Launcher::with_cudnn`].
//!
//! * Availability ([`probe`]): `libcudnn.so.9` loads, exports every function used (this
//!   module's and the ops' `SYMBOLS`; checked before any call: cudarc resolves symbols
//!   lazily and would panic on a missing one), and reports version ≥ 9.0.
//! * An op's call that cuDNN cannot serve (a geometry it cannot plan, ...) returns
//!   `Ok(false)`, and the op runs its fallback kernels instead.
//!
//! [`Launcher::with_cudnn`]: super::launch::Launcher::with_cudnn

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::cudnn::sys;

use super::common::CudnnStatus;
use super::launch::DeviceRegion;
use crate::batch_norm::BatchNormGeom;
use crate::batch_norm::cuda::BnCall;
use crate::conv2d::Conv2dGeom;
use crate::conv2d::cuda::ConvPass;
use crate::error::{KernelError, Result};

/// One cuDNN call as data (which call, its geometry, every device address), so that it can
/// be recorded into a CUDA graph and compared with the call a graph was captured from
/// ([`super::replay`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CudnnOp(pub(crate) CudnnCall);

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CudnnCall {
    Conv { pass: ConvPass, g: Conv2dGeom, a: DeviceRegion, b: DeviceRegion, out: DeviceRegion, ws: DeviceRegion },
    BatchNorm { g: BatchNormGeom, call: BnCall },
}

impl CudnnOp {
    /// Runs the call: `Ok(false)` when cuDNN does not take it (the op's fallback runs).
    pub(crate) fn run(&self, c: &Cudnn) -> Result<bool> {
        match &self.0 {
            CudnnCall::Conv { pass, g, a, b, out, ws } => crate::conv2d::cudnn::conv(c, *pass, g, *a, *b, *out, *ws),
            CudnnCall::BatchNorm { g, call } => crate::batch_norm::cudnn::batch_norm(c, g, *call),
        }
    }

    /// Whether cuDNN takes the call, decided from its geometry alone (a convolution plan
    /// exists; batch norm's conditions hold), issuing nothing: what a recording assumes. A
    /// call cuDNN then refuses at capture (an operand it finds misaligned) fails the capture,
    /// and the work runs plainly, with the fallback.
    pub(crate) fn accepted(&self, c: &Cudnn) -> bool {
        match &self.0 {
            CudnnCall::Conv { g, .. } => crate::conv2d::cudnn::workspace(c, g).is_some(),
            CudnnCall::BatchNorm { g, .. } => crate::batch_norm::cudnn::accepts(g),
        }
    }
}

/// The cuDNN functions this module calls.
const SYMBOLS: &[&str] = &[
    "cudnnGetVersion",
    "cudnnCreate",
    "cudnnDestroy",
    "cudnnSetStream",
    "cudnnCreateTensorDescriptor",
    "cudnnSetTensor4dDescriptor",
    "cudnnDestroyTensorDescriptor",
];

/// Every cuDNN function used: this module's, then each cuDNN op's.
fn all_symbols() -> impl Iterator<Item = &'static str> {
    [SYMBOLS, crate::conv2d::cudnn::SYMBOLS, crate::batch_norm::cudnn::SYMBOLS].into_iter().flatten().copied()
}

/// Whether cuDNN can be used, without calling anything that could panic.
pub(crate) fn probe() -> CudnnStatus {
    // SAFETY: only tries to dlopen the library.
    if !unsafe { sys::is_culib_present() } {
        return CudnnStatus::Disabled { reason: "libcudnn.so.9 not found on the library path".into() };
    }
    if let Err(reason) = super::libs::prepare(super::libs::CudaLib::Cudnn, super::driver::driver_version_or_zero()) {
        return CudnnStatus::Disabled { reason };
    }
    // SAFETY: the library is present (checked above), so culib() does not panic.
    let lib = unsafe { sys::culib() };
    for s in all_symbols() {
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

pub(crate) fn check(what: &str, st: sys::cudnnStatus_t) -> Result<()> {
    st.result().map_err(|e| KernelError::Cuda { context: format!("cuDNN {what}"), msg: format!("{:?}", e.0) })
}

/// True for the statuses that mean "this call, with these operands, is not for cuDNN"
/// (`CUDNN_STATUS_BAD_PARAM*`, 2000-2999, e.g. a misaligned pointer; `CUDNN_STATUS_NOT_SUPPORTED*`,
/// 3000-3999): cuDNN refuses before launching anything, so the crate's own kernels can run
/// the call instead.
pub(crate) fn is_refusal(st: sys::cudnnStatus_t) -> bool {
    (2000..4000).contains(&(st as u32))
}

/// The outcome of a cuDNN call: `Ok(true)` done; `Ok(false)` when cuDNN refused it
/// ([`is_refusal`]; the reason is printed once per message and the caller runs its fallback
/// kernels); `Err` for any other failure.
pub(crate) fn check_or_fallback(what: &str, st: sys::cudnnStatus_t) -> Result<bool> {
    if is_refusal(st) {
        let line = format!("crossbow: cuDNN refused {what} ({st:?}); running crossbow's own kernels for it");
        static SAID: std::sync::OnceLock<Mutex<Vec<String>>> = std::sync::OnceLock::new();
        if let Ok(mut said) = SAID.get_or_init(|| Mutex::new(Vec::new())).lock()
            && !said.contains(&line)
        {
            eprintln!("{line}");
            said.push(line);
        }
        return Ok(false);
    }
    check(what, st).map(|()| true)
}

pub(crate) fn i32_of(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| KernelError::invalid("cudnn", format!("{what} {v} does not fit cuDNN's int")))
}

pub(crate) fn cptr(a: u64) -> *const c_void {
    a as usize as *const c_void
}

pub(crate) fn mptr(a: u64) -> *mut c_void {
    a as usize as *mut c_void
}

/// A 4-d NCHW f32 tensor descriptor, destroyed on drop.
pub(crate) struct TensorDesc(pub(crate) sys::cudnnTensorDescriptor_t);
impl TensorDesc {
    pub(crate) fn nchw(dims: [usize; 4]) -> Result<Self> {
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

struct Inner {
    handle: sys::cudnnHandle_t,
    /// Only deterministic algorithms ([`super::CudaOptions::deterministic`]).
    deterministic: bool,
    /// Each op's cache of descriptors and plans (see [`Cudnn::with`]), by type.
    caches: HashMap<TypeId, Box<dyn Any>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.caches.clear();
        // SAFETY: created by cudnnCreate, destroyed once, after its descriptors.
        let _ = unsafe { sys::cudnnDestroy(self.handle) };
    }
}

/// A backend's cuDNN handle and the ops' caches of descriptors and plans (opaque outside
/// the crate).
pub struct Cudnn {
    inner: Mutex<Inner>,
}

// SAFETY: the raw handle and descriptors are only used while holding the mutex, and cuDNN
// handles may move between threads (they must not be used by two threads at once).
unsafe impl Send for Cudnn {}
// SAFETY: as above.
unsafe impl Sync for Cudnn {}

/// `alpha = 1` of cuDNN's blending arguments.
pub(crate) const ONE: f32 = 1.0;
/// `beta = 0` of cuDNN's blending arguments.
pub(crate) const ZERO: f32 = 0.0;

impl Cudnn {
    /// A handle bound to `stream` (the caller has made the context current).
    pub(crate) fn new(stream: sys::cudaStream_t, deterministic: bool) -> Result<Cudnn> {
        let mut h = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cudnnCreate", unsafe { sys::cudnnCreate(&mut h) })?;
        let inner = Inner { handle: h, deterministic, caches: HashMap::new() };
        // SAFETY: live handle; the stream outlives the backend that owns this handle.
        check("cudnnSetStream", unsafe { sys::cudnnSetStream(h, stream) })?;
        Ok(Cudnn { inner: Mutex::new(inner) })
    }

    /// Runs `f` with the handle and the op's cache of type `C` (created empty on first
    /// use), under the handle's lock.
    pub(crate) fn with<C: Default + 'static, T>(&self, f: impl FnOnce(sys::cudnnHandle_t, &mut C) -> T) -> Result<T> {
        self.with_mode(|h, _, c| f(h, c))
    }

    /// As [`Cudnn::with`], also passing whether only deterministic algorithms may be used.
    pub(crate) fn with_mode<C: Default + 'static, T>(
        &self,
        f: impl FnOnce(sys::cudnnHandle_t, bool, &mut C) -> T,
    ) -> Result<T> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| KernelError::Cuda { context: "cuDNN".into(), msg: "lock poisoned by a panic".into() })?;
        let (handle, deterministic) = (inner.handle, inner.deterministic);
        let cache = inner.caches.entry(TypeId::of::<C>()).or_insert_with(|| Box::new(C::default()));
        match cache.downcast_mut::<C>() {
            Some(c) => Ok(f(handle, deterministic, c)),
            None => Err(KernelError::Cuda { context: "cuDNN".into(), msg: "cache of the wrong type".into() }),
        }
    }
}
