//! The executor interface behind [`super::GpuBackend`]: what an op's GPU code needs (launch
//! a named kernel, a column-major GEMM, copies, and optionally cuDNN), implemented by
//! [`super::CudaLauncher`] on a real GPU, by the host emulator of the CPU tests (`cuda::emu`),
//! and — without the `cuda` feature — by the uninhabited `NoDevice` (so `CudaBackend`
//! exists and cannot be constructed). Op code (each op's `cuda.rs`) is written once against
//! it, so the CPU tests run the very launch sequences, arguments and GEMM calls the GPU runs.
//!
//! Device memory is addressed by raw `u64` addresses (a CUDA device pointer, or a host
//! pointer under the emulator) in [`DeviceRegion`]s built from range-checked views, so every address
//! an op computes lies inside a buffer whose length was checked against the geometry.

use std::sync::{Mutex, MutexGuard};

use crossbow_tensor::Device;

use super::replay::{Op, Replay};
use crate::error::{KernelError, Result};

/// Threads per block of every launch (`CB_BLOCK` in `prelude.cuh`).
pub const BLOCK: u32 = 256;
/// Most blocks a grid-stride launch uses.
pub const MAX_GRID: usize = 8192;

/// The prelude prepended to every kernel source.
pub const PRELUDE: &str = include_str!("prelude.cuh");

/// One `.cu` source: its module name, text, kernels, and which of them use shared memory
/// and `__syncthreads()` (launched with exactly [`BLOCK`] threads; the emulator runs their
/// threads concurrently).
#[derive(Debug)]
pub struct KernelSource {
    /// Module name: the `.cu` file's stem, used in `#line` directives and cache keys.
    pub module: &'static str,
    /// The CUDA C source, without the prelude.
    pub code: &'static str,
    /// Every `extern "C"` kernel the source defines, by name.
    pub kernels: &'static [&'static str],
    /// The subset of `kernels` that use shared memory and `__syncthreads()`.
    pub cooperative: &'static [&'static str],
}

impl KernelSource {
    /// The text that is compiled: the prelude, then the source with its own line numbers.
    pub fn full_text(&self) -> String {
        format!("{PRELUDE}\n#line 1 \"{}.cu\"\n{}", self.module, self.code)
    }

    /// True when `kernel` is cooperative.
    pub fn is_cooperative(&self, kernel: &str) -> bool {
        self.cooperative.contains(&kernel)
    }
}

/// Every kernel source: the `SOURCES` of each op folder's `cuda.rs`, in the order of the
/// crate's op list.
pub fn sources() -> impl Iterator<Item = &'static KernelSource> {
    crate::KERNEL_SOURCES.iter().flat_map(|s| s.iter())
}

/// The source that defines `kernel`.
pub fn source_of(kernel: &str) -> Option<&'static KernelSource> {
    sources().find(|s| s.kernels.contains(&kernel))
}

/// 64-bit FNV-1a: stable across builds and platforms (unlike `DefaultHasher`); the key of
/// the kernel caches.
#[cfg(any(feature = "cuda", feature = "testing"))]
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separate the parts, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A region of device memory: address of its first `f32` and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRegion {
    /// Address of the first `f32` (device pointer, or host pointer under the emulator).
    pub addr: u64,
    /// Length in `f32`s, not bytes.
    pub len: usize,
}

impl DeviceRegion {
    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.addr + 4 * i as u64
    }

    /// The sub-region `[off, off + len)` (callers stay inside; checked in debug builds).
    pub fn sub(&self, off: usize, len: usize) -> DeviceRegion {
        debug_assert!(off + len <= self.len, "sub-view {off}+{len} of {}", self.len);
        DeviceRegion { addr: self.at(off), len }
    }
}

/// A kernel argument, in the kernel's parameter order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A `float*` / `const float*` (0 = null).
    Ptr(u64),
    /// An `i64` (`long long`).
    I64(i64),
    /// A `u64` (`unsigned long long`).
    U64(u64),
    /// A `float`.
    F32(f32),
    /// An `int`.
    I32(i32),
}

/// `KernelArg::Ptr` of a region.
pub fn ptr(d: DeviceRegion) -> KernelArg {
    KernelArg::Ptr(d.addr)
}

/// `KernelArg::I64` of a size.
pub fn int(n: usize) -> KernelArg {
    KernelArg::I64(n as i64)
}

/// Blocks of a grid-stride launch over `n` elements.
pub fn grid_for(n: usize) -> u32 {
    n.div_ceil(BLOCK as usize).clamp(1, MAX_GRID) as u32
}

/// A grid-stride launch over `n` elements; nothing is launched when `n == 0`.
pub fn launch_n<E: Launcher>(e: &E, kernel: &'static str, n: usize, args: &[KernelArg]) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    e.launch(kernel, grid_for(n), args)
}

/// A launch of exactly `blocks` blocks (one per channel, ...).
pub fn launch_blocks<E: Launcher>(e: &E, kernel: &'static str, blocks: usize, args: &[KernelArg]) -> Result<()> {
    if blocks == 0 {
        return Ok(());
    }
    let grid = u32::try_from(blocks)
        .ok()
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or_else(|| KernelError::invalid("cuda launch", format!("{kernel}: {blocks} blocks is too many")))?;
    e.launch(kernel, grid, args)
}

/// A (strided-batched) GEMM with cuBLAS's column-major semantics:
/// `C_i = alpha * op(A_i) * op(B_i) + beta * C_i` for `i < batch`, `op(A)` is `m × k`,
/// `op(B)` is `k × n`, `C` is `m × n`, all column-major with leading dimensions `ld*`;
/// `X_i` starts `i * stride_x` elements after `X`. With `beta == 0`, `C` is not read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColGemm {
    /// `op(A) = A^T` (`A` stored `k × m`).
    pub trans_a: bool,
    /// `op(B) = B^T` (`B` stored `n × k`).
    pub trans_b: bool,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// The contracted dimension: columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: f32,
    /// Address of `A` (of `A_0` when batched).
    pub a: u64,
    /// Leading dimension of `A`: elements between consecutive columns as stored.
    pub lda: usize,
    /// Address of `B` (of `B_0` when batched).
    pub b: u64,
    /// Leading dimension of `B`: elements between consecutive columns as stored.
    pub ldb: usize,
    /// Scale of the old `C` (0: `C` is not read).
    pub beta: f32,
    /// Address of `C` (of `C_0` when batched).
    pub c: u64,
    /// Leading dimension of `C`: elements between consecutive columns.
    pub ldc: usize,
    /// Number of GEMMs (1 for a plain GEMM).
    pub batch: usize,
    /// Elements from `A_i` to `A_{i+1}`.
    pub stride_a: usize,
    /// Elements from `B_i` to `B_{i+1}`.
    pub stride_b: usize,
    /// Elements from `C_i` to `C_{i+1}`.
    pub stride_c: usize,
}

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// What a [`super::GpuBackend`] runs on. Implemented in this crate only (sealed).
pub trait Launcher: Sealed + Send + Sync + 'static {
    /// Device memory holding `f32`s.
    type Buffer: Send + Sync + 'static;
    /// Number of `f32`s in a buffer.
    fn buffer_len(buf: &Self::Buffer) -> usize;
    /// Address of the first element of a buffer (an error for a buffer of another device).
    fn addr(&self, buf: &Self::Buffer) -> Result<u64>;
    /// Address of the first element of a buffer that will be written.
    fn addr_mut(&self, buf: &mut Self::Buffer) -> Result<u64>;
    /// The device.
    fn device(&self) -> Device;
    /// A description for logs.
    fn describe(&self) -> String;
    /// A zero-filled buffer.
    fn alloc(&self, len: usize) -> Result<Self::Buffer>;
    /// Host → device, `src.len()` elements to `dst`.
    fn upload(&self, src: &[f32], dst: u64) -> Result<()>;
    /// Device → host after all pending work, `dst.len()` elements from `src`.
    fn download(&self, src: u64, dst: &mut [f32]) -> Result<()>;
    /// A started device → host copy.
    type Pending: Send + 'static;
    /// Starts copying `len` elements from `src` to host memory behind the queued work.
    fn start_download(&self, src: u64, len: usize) -> Result<Self::Pending>;
    /// Waits for a started copy and returns its values.
    fn finish_download(&self, pending: Self::Pending) -> Result<Vec<f32>>;
    /// Device → device, `len` elements.
    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<()>;
    /// Waits for all pending work.
    fn synchronize(&self) -> Result<()>;
    /// A point in the executor's queue.
    type Event: Send + Sync + 'static;
    /// Records the current end of the queue.
    fn record(&self) -> Result<Self::Event>;
    /// Makes later work wait for `event`.
    fn wait(&self, event: &Self::Event) -> Result<()>;
    /// Launches `kernel` with `grid` blocks of [`BLOCK`] threads.
    fn launch(&self, kernel: &'static str, grid: u32, args: &[KernelArg]) -> Result<()>;
    /// Runs a column-major GEMM.
    fn gemm(&self, g: &ColGemm) -> Result<()>;

    /// What a recorded unit of work is replayed with: a CUDA graph; under the emulator the
    /// frozen op list ([`super::replay`]).
    type Graph: Send + 'static;
    /// The executor's replay state: while it records, `launch`, `gemm`, `copy` and cuDNN
    /// calls are recorded instead of issued, and `upload`, `download`, `synchronize`,
    /// `record` and `wait` fail the recording.
    fn replay(&self) -> &Mutex<Replay<Self::Graph>>;
    /// Issues one op plainly: `Ok(false)` when cuDNN refused it (the op code's fallback must
    /// run instead).
    fn issue(&self, op: &Op) -> Result<bool>;
    /// Captures `ops` into a graph; nothing runs until it is launched.
    fn capture(&self, ops: &[Op]) -> Result<Self::Graph>;
    /// Launches a captured graph on the executor's queue.
    fn launch_graph(&self, graph: &Self::Graph) -> Result<()>;

    /// Runs one cuDNN call given as data ([`super::cudnn::CudnnOp`]): `Ok(None)` when this
    /// executor has no cuDNN, `Ok(Some(false))` when cuDNN does not take the call (the op's
    /// fallback kernels run), `Ok(Some(true))` when done (or recorded).
    #[cfg(feature = "cuda")]
    fn cudnn_op(&self, op: super::cudnn::CudnnOp) -> Result<Option<bool>> {
        let _ = op;
        Ok(None)
    }

    /// Most `f32`s of im2col workspace the conv2d fallback uses per chunk of images.
    fn conv_col_budget(&self) -> usize {
        crate::conv2d::cuda::COL_BUDGET
    }

    /// Runs `f` with this executor's cuDNN handle (context bound, and synchronised after
    /// when launches are), or returns `Ok(None)` when it has none: then the op runs its
    /// fallback kernels. For host-side queries only (workspace sizes, plans): work on the
    /// stream goes through [`Launcher::cudnn_op`], as data, so that a recording can hold it.
    /// Ops' `cuda.rs` files are the only callers.
    #[cfg(feature = "cuda")]
    fn with_cudnn<T>(&self, f: impl FnOnce(&super::cudnn::Cudnn) -> Result<T>) -> Result<Option<T>> {
        let _ = f;
        Ok(None)
    }
}

/// The replay state, locked.
pub(crate) fn replay_state<G>(m: &Mutex<Replay<G>>) -> Result<MutexGuard<'_, Replay<G>>> {
    m.lock().map_err(|_| KernelError::Cuda { context: "graph replay".into(), msg: "state poisoned by a panic".into() })
}

/// True when `op` was recorded (a recording is in progress): the caller issues nothing.
#[cfg(any(feature = "cuda", feature = "testing"))]
pub(crate) fn recorded<E: Launcher>(e: &E, op: impl FnOnce() -> Op) -> Result<bool> {
    Ok(replay_state(e.replay())?.record(op))
}

/// An error while a recording is in progress (`what` cannot be part of a graph; the
/// recording fails and the work runs again plainly), `Ok` otherwise.
#[cfg(any(feature = "cuda", feature = "testing"))]
pub(crate) fn forbidden<E: Launcher>(e: &E, what: &str) -> Result<()> {
    if replay_state(e.replay())?.forbid(what) {
        return Err(KernelError::Cuda {
            context: "graph recording".into(),
            msg: format!("{what} cannot be part of a graph"),
        });
    }
    Ok(())
}
