//! The GPU backend: [`GpuBackend`] over an executor ([`launch::Launcher`]). With the feature
//! `cuda` the executor is [`CudaLauncher`] (cudarc, cuBLAS, cuDNN) and [`CudaBackend`] =
//! `GpuBackend<CudaLauncher>`; without it `CudaLauncher` is uninhabited and the device-level entry
//! points return [`KernelError::NotCompiledWithCuda`](crate::KernelError), so callers need no
//! `cfg`. With the feature `testing`, `emu` runs the same backend on a host emulator of
//! the kernels (with or without `cuda`).
//!
//! # What runs where
//!
//! | op | on the GPU |
//! |---|---|
//! | GEMM, linear | cuBLAS `sgemm` (row-major through the column-major transpose trick, `gemm/cuda.rs`), bias kernels of `vector.cu` |
//! | conv2d | cuDNN (`conv2d/cudnn.rs`: `CUDNN_FMA_MATH`, no FFT algorithms) when enabled, else im2col / col2im (`conv2d.cu`) + strided-batched cuBLAS |
//! | batch norm | cuDNN spatial batch norm (`batch_norm/cudnn.rs`) when enabled, else `batch_norm.cu` (two-pass, double accumulation) |
//! | pooling | always `pool.cu` (cuDNN cannot express the CPU's ceil-mode / tie / divisor rules exactly) |
//! | every other op | its folder's own `.cu` (`activation.cu`, `dropout.cu`, `vector.cu`, ...) |
//!
//! Each op's kernels live next to it (`src/<op>/<op>.cu`, listed in the folder's
//! `cuda.rs` as `SOURCES` and launched from the same file's `impl<E: Launcher> <Op> for
//! GpuBackend<E>`), are embedded with `include_str!` after the shared `prelude.cuh`, and are
//! compiled with NVRTC (`--fmad=false`, so element-wise results equal the CPU's) when a
//! device is opened.
//!
//! # Devices, learners, streams
//!
//! [`CudaDevice::open`] (or [`CudaDevice::open_with`] and [`CudaOptions`]) opens one GPU:
//! it checks for the driver first ([`driver_status`] never panics, unlike cudarc's first
//! driver call when `libcuda` is missing), retains the primary context, compiles or loads
//! every kernel, and probes cuDNN. [`CudaDevice::new_backend`] then makes one
//! [`CudaBackend`] per learner: its own non-blocking stream, with its own cuBLAS handle
//! and (when cuDNN is used) cuDNN handle bound to that stream, and pinned staging buffers
//! for host↔device copies. Ops are enqueued on the stream in call order;
//! [`crate::Backend::download`] and [`crate::Backend::synchronize`] wait.
//!
//! # Event tracking is off
//!
//! cudarc can attach a read and a write event to every buffer and make each launch wait on
//! and record them per argument. With one stream per learner that is pure overhead
//! (cudarc#386), so the context's event tracking is disabled right after it is created.
//! The contract instead: a buffer is used by the backend that allocated it, or, when
//! another stream reads or writes it (the synchroniser's stream, another learner), the
//! engine orders the two with [`CudaBackend::record_event`] / [`CudaBackend::wait_event`]
//! (or [`CudaBackend::wait_for`]); and a buffer is dropped only after the work of every
//! stream that used it (dropping frees it asynchronously on its allocating stream).
//!
//! # CUDA graphs and staging
//!
//! A learner's forward and backward pass is run through [`crate::Backend::replayable`]:
//! recorded as data ([`replay::Op`]: kernel, grid, every argument; GEMMs; copies; cuDNN
//! calls), compared with the recording the cached graph was captured from, and launched as
//! that graph when identical, else captured anew ([`replay`] has the rules and the fallbacks).
//! [`CudaOptions::graphs`] (env `CROSSBOW_CUDA_GRAPHS=0` turns it off). Uploads rotate through
//! [`CudaOptions::staging_buffers`] pinned buffers, so staging an upload waits only for the
//! copy that used its buffer several uploads before, not for the stream's queue.
//!
//! # Kernel cache
//!
//! Compiled modules are cached in memory for the whole process, keyed by (device, source
//! hash, target), and on disk ([`kernel_cache_dir`]: `$CROSSBOW_KERNEL_CACHE`, else
//! `$XDG_CACHE_HOME/crossbow/kernels`, else `~/.cache/crossbow/kernels`), one file per
//! (source, NVRTC options and version, target). The target is a CUBIN for the device's
//! `sm_XY` when the NVRTC knows it (no driver JIT), else PTX for the newest virtual
//! architecture it knows. A corrupt, truncated or unloadable cache file is ignored and
//! rewritten; an unwritable cache directory only costs recompiling.
//! [`kernel_cache_stats`] counts compiles and hits.
//!
//! # cuDNN or not
//!
//! cuDNN is used when `libcudnn.so.9` loads and exports every function used (checked
//! before any call), unless [`CudaOptions::cudnn`] is false (env
//! `CROSSBOW_DISABLE_CUDNN=1`). Without it, convolution and batch norm run on the crate's
//! kernels. Either way the same tests check every op (the `cuda` and `cuda_no_cudnn`
//! variants of each op's tests).
//!
//! # Environment
//!
//! See [`env`](mod@env): `CROSSBOW_DISABLE_CUDNN`, `CROSSBOW_REQUIRE_CUDNN` (fail when cuDNN is
//! not actually used), `CROSSBOW_KERNEL_CACHE`, `CROSSBOW_FORCE_NO_CUDA`,
//! `CROSSBOW_CUDA_SYNC` (synchronise after each launch, for debugging; no graphs then),
//! `CROSSBOW_CUDA_GRAPHS=0` (plain launches), and for tests
//! `CROSSBOW_REQUIRE_GPU` and `CROSSBOW_REQUIRE_NVRTC`. Libraries are found through
//! `LD_LIBRARY_PATH` by versioned names matching the driver's CUDA version (`libcuda.so.1`,
//! `libnvrtc.so.13`/`.12`, `libcublas.so.13`/`.12`, `libcudnn.so.9`, and `libnccl.so.2` only
//! when [`nccl`] is asked for, with `CROSSBOW_REQUIRE_NCCL=1` making its tests fail instead
//! of skipping); a stub, a library
//! newer than the driver, or another file cudarc would load first is refused with a message
//! naming the files ([`libs`]).
//!
//! # Testing without a GPU
//!
//! * `nvrtc` tests compile every source for `sm_80` and `sm_90` (PTX and CUBIN) with the
//!   NVRTC of the `nvidia-cuda-nvrtc` pip wheel — no driver needed ([`compile_all_for_arch`]).
//! * `cuda::emu` (with the `testing` feature, no `cuda` needed) compiles the same sources
//!   with the host C++ compiler behind a small CUDA emulation header and runs the whole GPU
//!   backend — the op code of every `cuda.rs`, its launches and its GEMM calls (cuBLAS
//!   replaced by a reference column-major GEMM) — through every op's tests (their `emu`
//!   variants, see `test_backends!`). Only cudarc/cuBLAS/cuDNN themselves and real-GPU
//!   concurrency are left to the `cuda` variants and `tests/gpu.rs` on a GPU machine.

mod common;
pub use common::*;

pub mod libs;
pub mod nccl;

mod gpu;
pub mod launch;
pub mod replay;
pub use gpu::GpuBackend;

#[cfg(feature = "testing")]
pub mod emu;

#[cfg(feature = "cuda")]
mod cache;
#[cfg(feature = "cuda")]
pub(crate) mod cudnn;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod driver;
#[cfg(feature = "cuda")]
mod nvrtc;

/// The cuDNN convolution algorithms chosen in this process, one line per geometry (whether
/// only deterministic ones were allowed: [`CudaOptions::deterministic`]); for the doctor.
#[cfg(feature = "cuda")]
pub use crate::conv2d::cudnn::chosen_algorithms as cudnn_conv_algorithms;
#[cfg(feature = "cuda")]
pub use cache::{kernel_cache_stats, kernel_compile_counts};
#[cfg(feature = "cuda")]
pub use cudarc;
#[cfg(feature = "cuda")]
pub use cudarc::driver::CudaEvent;
#[cfg(feature = "cuda")]
pub use cudnn::{Cudnn, CudnnOp};
#[cfg(feature = "cuda")]
pub use device::{CudaBackend, CudaBuffer, CudaDevice, CudaLauncher, ReadSlot};
#[cfg(feature = "cuda")]
pub use driver::{device_count, device_info, devices, driver_status};
#[cfg(feature = "cuda")]
pub use nvrtc::{compile_all_for_arch, nvrtc_available, nvrtc_version};

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::*;

#[cfg(test)]
mod tests;
