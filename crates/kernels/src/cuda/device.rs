//! [`CudaDevice`] (one GPU: context, kernels, cuDNN availability) and [`CudaLauncher`] (one
//! learner's stream with its cuBLAS and cuDNN handles and pinned staging buffers), the
//! executor of [`CudaBackend`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbow_tensor::Device;
use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};

use super::cache::{self, Target};
use super::common::{CudaOptions, CudnnStatus, DeviceInfo, DriverStatus, MemInfo};
use super::cudnn::{self, Cudnn};
use super::driver::{device_info, driver_status, status_error};
use super::gpu::GpuBackend;
use super::launch::{BLOCK, ColGemm, KernelArg, Launcher, Sealed, forbidden, recorded, replay_state};
use super::libs::{self, CudaLib};
use super::nvrtc;
use super::replay::{Op, Replay};
use crate::error::{KernelError, Result};

/// The backend of one learner on a GPU: [`GpuBackend`] on a [`CudaLauncher`] (its own stream,
/// cuBLAS handle, cuDNN handle). Make one with [`CudaDevice::new_backend`].
pub type CudaBackend = GpuBackend<CudaLauncher>;

/// A device buffer of `f32`s.
pub type CudaBuffer = CudaSlice<f32>;

pub(crate) fn drv(context: impl Into<String>, e: impl std::fmt::Debug) -> KernelError {
    KernelError::Cuda { context: context.into(), msg: format!("{e:?}") }
}

struct DeviceInner {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    target: Target,
    functions: HashMap<&'static str, CudaFunction>,
    cudnn: CudnnStatus,
    options: CudaOptions,
    nvrtc_version: (i32, i32),
    backends: AtomicUsize,
}

/// One GPU, opened: its primary context (event tracking off), every kernel compiled and
/// loaded, and whether cuDNN is used. Cheap to clone; shared by all its learners' backends.
#[derive(Clone)]
pub struct CudaDevice {
    inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({})", self.describe())
    }
}

impl CudaDevice {
    /// Opens GPU `ordinal` with [`CudaOptions::from_env`].
    pub fn open(ordinal: usize) -> Result<CudaDevice> {
        CudaDevice::open_with(ordinal, &CudaOptions::from_env())
    }

    /// Opens GPU `ordinal`: checks the driver (an error, never a panic, without one),
    /// retains the primary context and turns its event tracking off, compiles (or loads
    /// from the caches) every kernel, and probes cuDNN.
    pub fn open_with(ordinal: usize, options: &CudaOptions) -> Result<CudaDevice> {
        let status = driver_status();
        if !matches!(status, DriverStatus::Ready { .. }) {
            return Err(status_error(&status));
        }
        super::env::check().map_err(|msg| KernelError::Cuda { context: format!("opening cuda:{ordinal}"), msg })?;
        let info = device_info(ordinal)?;
        // SAFETY (of the checks above): libcuda is loaded, so no driver call below panics.
        let ctx = CudaContext::new(ordinal).map_err(|e| drv(format!("creating a context on cuda:{ordinal}"), e))?;
        // Every slice allocated from now on carries no read/write events: each learner's
        // work is ordered on its own stream, and work across streams is ordered explicitly
        // (CudaBackend::record_event / wait_event / wait_for). Must precede any allocation.
        // SAFETY: see the stream-ordering contract in the module docs.
        unsafe { ctx.disable_event_tracking() };
        let driver_version = super::driver::driver_version_or_zero();
        // SAFETY: only tries to dlopen libcublas.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(KernelError::Cuda {
                context: format!("cuda:{ordinal}"),
                msg: "libcublas.so not found on the library path (needed for GEMM, linear and conv2d)".into(),
            });
        }
        libs::prepare(CudaLib::Cublas, driver_version)
            .map_err(|msg| KernelError::Cuda { context: format!("cuBLAS for cuda:{ordinal}"), msg })?;
        let nvrtc_version = nvrtc::nvrtc_version()?;
        let target = Target::for_device(info.compute_capability)?;
        // Modules from an NVRTC newer than the driver do not load: say so before compiling.
        libs::nvrtc_fits_driver(nvrtc_version, driver_version, matches!(target, Target::Cubin(_)))
            .map_err(|msg| KernelError::Cuda { context: format!("NVRTC for cuda:{ordinal}"), msg })?;
        let functions = cache::load_all(&ctx, ordinal, &target, options.kernel_cache.as_deref())?;
        let cudnn = if options.cudnn {
            cudnn::probe()
        } else {
            CudnnStatus::Disabled { reason: "disabled by option (CROSSBOW_DISABLE_CUDNN)".into() }
        };
        if let (true, CudnnStatus::Disabled { reason }) = (options.require_cudnn, &cudnn) {
            return Err(KernelError::Cuda {
                context: format!("cuda:{ordinal}"),
                msg: format!("{} is set but cuDNN is not used: {reason}", super::env::REQUIRE_CUDNN),
            });
        }
        Ok(CudaDevice {
            inner: Arc::new(DeviceInner {
                ctx,
                info,
                target,
                functions,
                cudnn,
                options: options.clone(),
                nvrtc_version,
                backends: AtomicUsize::new(0),
            }),
        })
    }

    /// A new learner backend: its own non-blocking stream, with a cuBLAS handle (and, when
    /// the device uses cuDNN, a cuDNN handle) bound to it.
    pub fn new_backend(&self) -> Result<CudaBackend> {
        let d = &self.inner;
        let o = d.info.ordinal;
        let stream = d.ctx.new_stream().map_err(|e| drv(format!("creating a stream on cuda:{o}"), e))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| drv("creating a cuBLAS handle", e))?;
        // SAFETY: live handle; the default math mode never uses TF32 for f32 GEMMs.
        unsafe {
            cudarc::cublas::sys::cublasSetMathMode(
                *blas.handle(),
                cudarc::cublas::sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            )
        }
        .result()
        .map_err(|e| drv("cublasSetMathMode", e))?;
        // A cuDNN handle that cannot be made leaves this backend on the fallback kernels
        // (uses_cudnn() tells; the GPU tests check it).
        let cudnn = match &d.cudnn {
            CudnnStatus::Enabled { .. } => {
                d.ctx.bind_to_thread().map_err(|e| drv("binding the context", e))?;
                match Cudnn::new(stream.cu_stream() as cudarc::cudnn::sys::cudaStream_t, d.options.deterministic) {
                    Ok(c) => Some(c),
                    Err(e) if d.options.require_cudnn => {
                        return Err(KernelError::Cuda {
                            context: format!("cuda:{o}"),
                            msg: format!("{} is set but no cuDNN handle could be made: {e}", super::env::REQUIRE_CUDNN),
                        });
                    }
                    Err(e) => {
                        eprintln!("crossbow: cuda:{o}: no cuDNN handle ({e}); this learner uses the fallback kernels");
                        None
                    }
                }
            }
            CudnnStatus::Disabled { .. } => None,
        };
        let event = |what: &str| d.ctx.new_event(None).map_err(|e| drv(format!("creating the {what} event"), e));
        let index = d.backends.fetch_add(1, Ordering::Relaxed);
        Ok(GpuBackend {
            launcher: CudaLauncher {
                dev: self.clone(),
                up: Mutex::new(Ring::new(
                    (0..d.options.staging_buffers.max(1))
                        .map(|_| Ok(Staging { buf: None, done: event("upload")? }))
                        .collect::<Result<Vec<_>>>()?,
                )),
                down: Mutex::new(Staging { buf: None, done: event("download")? }),
                reads: Mutex::new(Vec::new()),
                stream,
                blas,
                cudnn,
                index,
                // A graph cannot hold the synchronisation after every launch.
                replay: Mutex::new(Replay::new(d.options.graphs && !d.options.sync_launches)),
            },
        })
    }

    /// Free and total device memory in bytes.
    pub fn mem_info(&self) -> Result<MemInfo> {
        let (free, total) = self.inner.ctx.mem_get_info().map_err(|e| drv("cuMemGetInfo", e))?;
        Ok(MemInfo { free, total })
    }

    /// The driver's description of the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The device ordinal (`cuda:N`).
    pub fn ordinal(&self) -> usize {
        self.inner.info.ordinal
    }

    /// What the kernels were compiled for (`sm_90` CUBIN, or `compute_XY` PTX).
    pub fn kernel_target(&self) -> &str {
        self.inner.target.arch()
    }

    /// Whether convolution and batch norm use cuDNN, and why not.
    pub fn cudnn_status(&self) -> &CudnnStatus {
        &self.inner.cudnn
    }

    /// The options the device was opened with.
    pub fn options(&self) -> &CudaOptions {
        &self.inner.options
    }

    /// The context (for NCCL, events, or anything else cudarc offers).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// `Ok` when no error is pending on the context: none recorded by cudarc (e.g. by a
    /// drop on a thread that could not bind it) and none raised while waiting for all work.
    pub fn check_clean(&self) -> Result<()> {
        self.inner.ctx.check_err().map_err(|e| drv("an error recorded on the context", e))?;
        self.synchronize()
    }

    /// Waits for all work on every stream of the device.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.ctx.synchronize().map_err(|e| drv("cuCtxSynchronize", e))
    }

    /// One line: name, memory, kernel target, NVRTC, cuDNN.
    pub fn describe(&self) -> String {
        let d = &self.inner;
        let cudnn = match &d.cudnn {
            CudnnStatus::Enabled { version } => format!("cuDNN {version}"),
            CudnnStatus::Disabled { reason } => format!("no cuDNN: {reason}"),
        };
        format!(
            "cuda:{} ({}, {:.1} GiB, kernels for {} by NVRTC {}.{}, {cudnn})",
            d.info.ordinal,
            d.info.name,
            d.info.total_memory as f64 / (1u64 << 30) as f64,
            d.target.arch(),
            d.nvrtc_version.0,
            d.nvrtc_version.1
        )
    }
}

/// A pinned host buffer for one direction of copies, and the event of the last copy that
/// used it.
struct Staging {
    buf: Option<PinnedHostSlice<f32>>,
    done: CudaEvent,
}

/// A started download ([`crate::Backend::start_download`]): the pinned buffer the device
/// copies into, the event that marks the copy's end, and how many values it holds.
pub struct ReadSlot {
    buf: PinnedHostSlice<f32>,
    done: CudaEvent,
    len: usize,
}

/// Most `f32`s staged per copy (4 MiB); larger copies go in chunks.
const STAGING: usize = 1 << 20;

impl Staging {
    /// The pinned buffer with room for `n <= STAGING` elements, once the previous copy
    /// through it has finished.
    fn get(&mut self, ctx: &Arc<CudaContext>, n: usize, write_combined: bool) -> Result<*mut f32> {
        self.done.synchronize().map_err(|e| drv("waiting for a staged copy", e))?;
        if self.buf.as_ref().is_none_or(|b| b.len() < n) {
            self.buf = None;
            // At least 64 Ki elements, so small copies do not reallocate.
            let len = if n > STAGING { n } else { STAGING.min(n.max(1 << 16)) };
            let flags = if write_combined { cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED } else { 0 };
            // SAFETY: the memory is written before it is read (uploads) or written by the
            // device before the host reads it (downloads).
            let b = unsafe { ctx.alloc_pinned_with_flags::<f32>(len, flags) }.map_err(|e| drv("cuMemHostAlloc", e))?;
            self.buf = Some(b);
        }
        match self.buf.as_mut() {
            Some(b) => b.as_mut_ptr().map_err(|e| drv("pinned buffer", e)),
            None => Err(KernelError::Cuda { context: "staging".into(), msg: "no pinned buffer".into() }),
        }
    }
}

/// Slots used in turn: the pinned upload buffers, so that an upload waits only for the copy
/// that used its buffer `len` uploads earlier, not for the last one (which is queued behind
/// all the stream's work so far).
pub(crate) struct Ring<T> {
    slots: Vec<T>,
    next: usize,
}

impl<T> Ring<T> {
    pub(crate) fn new(slots: Vec<T>) -> Self {
        assert!(!slots.is_empty(), "a ring needs a slot");
        Ring { slots, next: 0 }
    }

    /// The next slot, in turn.
    pub(crate) fn next_slot(&mut self) -> &mut T {
        let i = self.next;
        self.next = (i + 1) % self.slots.len();
        &mut self.slots[i]
    }
}

/// A captured graph. `CudaGraph` holds raw driver handles and is not `Send`; it is only
/// touched under its executor's replay mutex, as the driver's thread-safety rules for graph
/// objects require.
pub struct GraphExec(cudarc::driver::CudaGraph);

// SAFETY: every use of the graph (launch, drop) happens under the launcher's replay mutex or
// when the launcher is dropped, never from two threads at once.
unsafe impl Send for GraphExec {}

/// One learner's executor on a GPU: a non-blocking stream, cuBLAS (and cuDNN) bound to it,
/// pinned staging buffers for host↔device copies, and its CUDA graph state.
pub struct CudaLauncher {
    dev: CudaDevice,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    cudnn: Option<Cudnn>,
    up: Mutex<Ring<Staging>>,
    down: Mutex<Staging>,
    /// Pinned buffers of finished started downloads, for the next ones.
    reads: Mutex<Vec<ReadSlot>>,
    index: usize,
    replay: Mutex<Replay<GraphExec>>,
}

impl Sealed for CudaLauncher {}

/// Teardown order, on whatever thread drops the backend (it may never have bound the
/// context): bind the context, wait for the stream's work (buffers it used may be freed
/// next), destroy the cuDNN handle while its stream still exists; the cuBLAS handle and the
/// stream go after this (field order), the stream last as the handles hold it.
impl Drop for CudaLauncher {
    fn drop(&mut self) {
        if self.bind().is_ok() {
            let _ = self.stream.synchronize();
        }
        if let Ok(mut r) = self.replay.lock() {
            r.set_enabled(false);
        }
        self.cudnn.take();
    }
}

fn locked<'a, T>(m: &'a Mutex<T>) -> Result<std::sync::MutexGuard<'a, T>> {
    m.lock().map_err(|_| KernelError::Cuda { context: "staging buffer".into(), msg: "lock poisoned by a panic".into() })
}

fn int32(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| KernelError::invalid("gemm", format!("{what} = {v} does not fit cuBLAS's int")))
}

impl CudaLauncher {
    fn bind(&self) -> Result<()> {
        self.dev.inner.ctx.bind_to_thread().map_err(|e| drv("binding the CUDA context", e))
    }

    fn check_device(&self, buf: &CudaSlice<f32>) -> Result<()> {
        if buf.ordinal() == self.dev.ordinal() {
            Ok(())
        } else {
            Err(KernelError::invalid(
                "cuda",
                format!("a buffer of cuda:{} was passed to a backend of cuda:{}", buf.ordinal(), self.dev.ordinal()),
            ))
        }
    }
}

impl Launcher for CudaLauncher {
    type Buffer = CudaSlice<f32>;

    fn buffer_len(buf: &CudaSlice<f32>) -> usize {
        buf.len()
    }

    fn addr(&self, buf: &CudaSlice<f32>) -> Result<u64> {
        self.check_device(buf)?;
        let (p, _no_events) = buf.device_ptr(&self.stream);
        Ok(p)
    }

    fn addr_mut(&self, buf: &mut CudaSlice<f32>) -> Result<u64> {
        self.addr(buf)
    }

    fn device(&self) -> Device {
        Device::Cuda(self.dev.ordinal())
    }

    fn describe(&self) -> String {
        let path = if self.cudnn.is_some() { "cuDNN" } else { "fallback kernels" };
        format!("{} stream {} ({path})", self.dev.describe(), self.index)
    }

    fn alloc(&self, len: usize) -> Result<CudaSlice<f32>> {
        if len.checked_mul(4).is_none_or(|b| b > isize::MAX as usize) {
            return Err(KernelError::invalid("alloc", format!("{len} f32s is too large")));
        }
        let ctx = format!("allocating {len} f32s on cuda:{}", self.dev.ordinal());
        if len == 0 {
            // cuMemAlloc rejects 0 bytes: hold one element, report length 0.
            let one = self.stream.alloc_zeros::<f32>(1).map_err(|e| drv(&ctx, e))?;
            let ptr = one.leak();
            // SAFETY: `ptr` is a live allocation of 4 bytes owned by nobody else; the
            // returned slice frees it; length 0 is within it.
            return Ok(unsafe { self.stream.upgrade_device_ptr(ptr, 0) });
        }
        self.stream.alloc_zeros::<f32>(len).map_err(|e| drv(ctx, e))
    }

    fn upload(&self, src: &[f32], dst: u64) -> Result<()> {
        forbidden(self, "an upload")?;
        self.bind()?;
        let ctx = self.dev.context();
        let mut ring = locked(&self.up)?;
        for (i, chunk) in src.chunks(STAGING).enumerate() {
            let st = ring.next_slot();
            let p = st.get(ctx, chunk.len(), true)?;
            // SAFETY: `p` points to at least chunk.len() pinned f32s no copy is using.
            let host = unsafe { std::slice::from_raw_parts_mut(p, chunk.len()) };
            host.copy_from_slice(chunk);
            // SAFETY: `dst` has room for src.len() f32s (checked by the caller); the pinned
            // buffer stays untouched until `done` has passed.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    dst + 4 * (i * STAGING) as u64,
                    &host[..],
                    self.stream.cu_stream(),
                )
            }
            .map_err(|e| drv("cuMemcpyHtoDAsync", e))?;
            st.done.record(&self.stream).map_err(|e| drv("cuEventRecord", e))?;
        }
        Ok(())
    }

    fn download(&self, src: u64, dst: &mut [f32]) -> Result<()> {
        forbidden(self, "a download")?;
        self.bind()?;
        let ctx = self.dev.context();
        let mut st = locked(&self.down)?;
        if dst.is_empty() {
            return self.synchronize();
        }
        for (i, chunk) in dst.chunks_mut(STAGING).enumerate() {
            let p = st.get(ctx, chunk.len(), false)?;
            // SAFETY: `p` points to at least chunk.len() pinned f32s.
            let host = unsafe { std::slice::from_raw_parts_mut(p, chunk.len()) };
            // SAFETY: `src` holds dst.len() f32s (checked by the caller).
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(host, src + 4 * (i * STAGING) as u64, self.stream.cu_stream())
            }
            .map_err(|e| drv("cuMemcpyDtoHAsync", e))?;
            st.done.record(&self.stream).map_err(|e| drv("cuEventRecord", e))?;
            st.done.synchronize().map_err(|e| drv("waiting for a download", e))?;
            chunk.copy_from_slice(host);
        }
        Ok(())
    }

    type Pending = ReadSlot;

    fn start_download(&self, src: u64, len: usize) -> Result<ReadSlot> {
        forbidden(self, "a download")?;
        self.bind()?;
        let ctx = self.dev.context();
        // A finished read's buffer when one is large enough, else a new one (64 values at
        // least, so the loss reads of a run reuse one or two buffers).
        let reused = {
            let mut free = locked(&self.reads)?;
            free.iter().position(|r| r.buf.len() >= len).map(|i| free.swap_remove(i))
        };
        let mut slot = match reused {
            Some(r) => r,
            None => ReadSlot {
                // SAFETY: the device writes the buffer before the host reads it.
                buf: unsafe { ctx.alloc_pinned::<f32>(len.max(64)) }.map_err(|e| drv("cuMemHostAlloc", e))?,
                done: ctx.new_event(None).map_err(|e| drv("creating a read event", e))?,
                len,
            },
        };
        slot.len = len;
        let p = slot.buf.as_mut_ptr().map_err(|e| drv("pinned buffer", e))?;
        // SAFETY: `p` points to at least `len` pinned f32s no other copy uses.
        let host = unsafe { std::slice::from_raw_parts_mut(p, len) };
        if len > 0 {
            // SAFETY: `src` holds `len` f32s (checked by the caller); the host reads the
            // buffer only after `done` has passed.
            unsafe { cudarc::driver::result::memcpy_dtoh_async(host, src, self.stream.cu_stream()) }
                .map_err(|e| drv("cuMemcpyDtoHAsync", e))?;
        }
        slot.done.record(&self.stream).map_err(|e| drv("cuEventRecord", e))?;
        Ok(slot)
    }

    fn finish_download(&self, mut slot: ReadSlot) -> Result<Vec<f32>> {
        self.bind()?;
        slot.done.synchronize().map_err(|e| drv("waiting for a started download", e))?;
        let p = slot.buf.as_mut_ptr().map_err(|e| drv("pinned buffer", e))?;
        // SAFETY: the copy into the first `len` values has finished.
        let v = unsafe { std::slice::from_raw_parts(p, slot.len) }.to_vec();
        locked(&self.reads)?.push(slot);
        Ok(v)
    }

    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<()> {
        if recorded(self, || Op::Copy { src, dst, len })? {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: both regions hold `len` f32s (checked by the caller).
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, 4 * len, self.stream.cu_stream()) }
            .map_err(|e| drv("cuMemcpyDtoDAsync", e))
    }

    fn synchronize(&self) -> Result<()> {
        forbidden(self, "a synchronisation")?;
        self.stream
            .synchronize()
            .map_err(|e| drv(format!("synchronizing cuda:{} stream {}", self.dev.ordinal(), self.index), e))
    }

    type Event = CudaEvent;

    fn record(&self) -> Result<CudaEvent> {
        forbidden(self, "an event record")?;
        self.stream.record_event(None).map_err(|e| drv("cuEventRecord", e))
    }

    fn wait(&self, event: &CudaEvent) -> Result<()> {
        forbidden(self, "an event wait")?;
        self.stream.wait(event).map_err(|e| drv("cuStreamWaitEvent", e))
    }

    fn launch(&self, kernel: &'static str, grid: u32, args: &[KernelArg]) -> Result<()> {
        if recorded(self, || Op::Launch { kernel, grid, args: args.to_vec() })? {
            return Ok(());
        }
        let f = self.dev.inner.functions.get(kernel).ok_or_else(|| KernelError::Cuda {
            context: "kernel launch".into(),
            msg: format!("kernel {kernel} is not loaded"),
        })?;
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                KernelArg::Ptr(v) | KernelArg::U64(v) => b.arg(v),
                KernelArg::I64(v) => b.arg(v),
                KernelArg::F32(v) => b.arg(v),
                KernelArg::I32(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match the kernel's parameters (each op's cuda.rs, checked
        // by the emulator tests), and every address lies in a length-checked buffer.
        unsafe { b.launch(cfg) }.map_err(|e| drv(format!("launching {kernel} ({grid} blocks)"), e))?;
        if self.dev.inner.options.sync_launches {
            self.stream.synchronize().map_err(|e| drv(format!("running {kernel}"), e))?;
        }
        Ok(())
    }

    fn gemm(&self, g: &ColGemm) -> Result<()> {
        use cudarc::cublas::sys::cublasOperation_t as BlasOp;
        if recorded(self, || Op::Gemm(*g))? {
            return Ok(());
        }
        self.bind()?;
        let op = |t: bool| if t { BlasOp::CUBLAS_OP_T } else { BlasOp::CUBLAS_OP_N };
        let (m, n, k) = (int32(g.m, "m")?, int32(g.n, "n")?, int32(g.k, "k")?);
        let (lda, ldb, ldc) = (int32(g.lda, "lda")?, int32(g.ldb, "ldb")?, int32(g.ldc, "ldc")?);
        let h = *self.blas.handle();
        let (a, b, c) = (g.a as usize as *const f32, g.b as usize as *const f32, g.c as usize as *mut f32);
        // SAFETY: the operands lie in buffers whose lengths the op checked against these
        // dimensions; the handle is bound to this backend's stream.
        let r = unsafe {
            if g.batch == 1 {
                cudarc::cublas::result::sgemm(
                    h,
                    op(g.trans_a),
                    op(g.trans_b),
                    m,
                    n,
                    k,
                    &g.alpha,
                    a,
                    lda,
                    b,
                    ldb,
                    &g.beta,
                    c,
                    ldc,
                )
            } else {
                let s = |v: usize| i64::try_from(v).map_err(|_| KernelError::invalid("gemm", "stride too large"));
                cudarc::cublas::result::sgemm_strided_batched(
                    h,
                    op(g.trans_a),
                    op(g.trans_b),
                    m,
                    n,
                    k,
                    &g.alpha,
                    a,
                    lda,
                    s(g.stride_a)?,
                    b,
                    ldb,
                    s(g.stride_b)?,
                    &g.beta,
                    c,
                    ldc,
                    s(g.stride_c)?,
                    int32(g.batch, "batch")?,
                )
            }
        };
        r.map_err(|e| drv(format!("cuBLAS sgemm {}x{}x{} batch {}", g.m, g.n, g.k, g.batch), e))?;
        if self.dev.inner.options.sync_launches {
            self.synchronize()?;
        }
        Ok(())
    }

    fn with_cudnn<T>(&self, f: impl FnOnce(&Cudnn) -> Result<T>) -> Result<Option<T>> {
        let Some(c) = self.cudnn.as_ref() else { return Ok(None) };
        self.bind()?;
        let out = f(c)?;
        if self.dev.inner.options.sync_launches {
            self.synchronize()?;
        }
        Ok(Some(out))
    }

    fn cudnn_op(&self, op: cudnn::CudnnOp) -> Result<Option<bool>> {
        let Some(c) = self.cudnn.as_ref() else { return Ok(None) };
        self.bind()?;
        {
            let mut r = replay_state(&self.replay)?;
            if r.recording() {
                let accepted = op.accepted(c);
                if accepted {
                    r.record(|| Op::Cudnn(op));
                }
                return Ok(Some(accepted));
            }
        }
        let done = op.run(c)?;
        if self.dev.inner.options.sync_launches {
            self.synchronize()?;
        }
        Ok(Some(done))
    }

    type Graph = GraphExec;

    fn replay(&self) -> &Mutex<Replay<GraphExec>> {
        &self.replay
    }

    fn issue(&self, op: &Op) -> Result<bool> {
        match op {
            Op::Launch { kernel, grid, args } => self.launch(kernel, *grid, args)?,
            Op::Gemm(g) => self.gemm(g)?,
            Op::Copy { src, dst, len } => self.copy(*src, *dst, *len)?,
            Op::Cudnn(c) => match self.cudnn.as_ref() {
                Some(h) => {
                    self.bind()?;
                    return c.run(h);
                }
                None => return Ok(false),
            },
        }
        Ok(true)
    }

    /// Stream capture of exactly `ops` (thread-local mode: other threads' devices are not
    /// disturbed), instantiated. A refused cuDNN call or any failure ends the capture and
    /// discards it.
    fn capture(&self, ops: &[Op]) -> Result<GraphExec> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        self.bind()?;
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| drv("cuStreamBeginCapture", e))?;
        let mut failed = None;
        for op in ops {
            match self.issue(op) {
                Ok(true) => {}
                Ok(false) => {
                    failed = Some(format!("cuDNN refused {op:?} during capture"));
                    break;
                }
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        let graph = self.stream.end_capture(CUgraphInstantiate_flags(0));
        if let Some(why) = failed {
            drop(graph);
            return Err(KernelError::Cuda { context: "graph capture".into(), msg: why });
        }
        match graph {
            Ok(Some(g)) => Ok(GraphExec(g)),
            Ok(None) => {
                Err(KernelError::Cuda { context: "graph capture".into(), msg: "the driver returned no graph".into() })
            }
            Err(e) => Err(drv("cuStreamEndCapture / cuGraphInstantiate", e)),
        }
    }

    fn launch_graph(&self, graph: &GraphExec) -> Result<()> {
        graph.0.launch().map_err(|e| drv("cuGraphLaunch", e))?;
        Ok(())
    }
}

/// Stream-level controls of a learner's backend, for the engine.
impl GpuBackend<CudaLauncher> {
    /// The device this backend runs on.
    pub fn cuda_device(&self) -> &CudaDevice {
        &self.launcher.dev
    }

    /// The backend's stream (every op is enqueued on it, in call order).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.launcher.stream
    }

    /// True when convolution and batch norm go through cuDNN on this backend.
    pub fn uses_cudnn(&self) -> bool {
        self.launcher.cudnn.is_some()
    }

    /// An event marking all work enqueued so far on this backend's stream.
    pub fn record_event(&self) -> Result<CudaEvent> {
        self.launcher.stream.record_event(None).map_err(|e| drv("cuEventRecord", e))
    }

    /// Makes this backend's later work wait for `event` (recorded on any stream of the
    /// device), without blocking the host.
    pub fn wait_event(&self, event: &CudaEvent) -> Result<()> {
        self.launcher.stream.wait(event).map_err(|e| drv("cuStreamWaitEvent", e))
    }

    /// Makes this backend's later work wait for everything enqueued so far on `other`.
    pub fn wait_for(&self, other: &CudaBackend) -> Result<()> {
        self.launcher.stream.join(&other.launcher.stream).map_err(|e| drv("cuStreamWaitEvent", e))
    }
}

#[cfg(test)]
mod ring_tests {
    use super::Ring;

    /// Uploads take the staging buffers in turn, so the n-th upload reuses (and waits for)
    /// only the copy of upload n - len.
    #[test]
    fn staging_buffers_are_used_in_turn() {
        let mut r = Ring::new(vec![0usize, 1, 2, 3]);
        let order: Vec<usize> = (0..9).map(|_| *r.next_slot()).collect();
        assert_eq!(order, [0, 1, 2, 3, 0, 1, 2, 3, 0]);
        let mut one = Ring::new(vec![7]);
        assert_eq!((*one.next_slot(), *one.next_slot()), (7, 7));
    }
}
