//! # crossbow-kernels
//!
//! Every operator crossbow's models need, forward and backward, behind one [`Backend`]
//! trait: a CPU backend ([`CpuBackend`], always built — a real trainer and the reference)
//! and a CUDA backend (feature `cuda`). One folder per op holds its geometry type, its CPU
//! kernel, its CUDA kernel and `.cu` source, and its tests:
//!
//! | module | op |
//! |---|---|
//! | [`gemm`] | row-major GEMM (CPU: `matrixmultiply`, or `gemm`, chosen by measurement) |
//! | [`conv2d`] | convolution with stride, padding, optional bias (im2col + GEMM) |
//! | [`linear`] | fully connected layer |
//! | [`batch_norm`] | batch normalisation, training (batch statistics, running averages) and inference |
//! | [`pool`] | max and average pooling, global average pooling |
//! | [`activation`] | ReLU |
//! | [`dropout`] | inverted dropout with a counter-based (backend-independent) mask |
//! | [`softmax_xent`] | fused softmax + cross-entropy + accuracy |
//! | [`optim`] | SGD with momentum (heavy ball or Nesterov) and weight decay |
//! | [`vector`] | add, sub, mul, axpy, weighted sums, scaling, sum of squares |
//! | [`augment`] | random crop with zero padding + horizontal flip of image batches, on the device |
//!
//! Ops take [`View`]s of backend buffers and write into caller-provided [`ViewMut`]s; they
//! never allocate on the hot path, so a model keeps its parameters, gradients and momentum in
//! one flat buffer each and its activations in buffers a memory plan reuses. Every geometry
//! is validated and every view's length checked: bad shapes are errors, not panics.
//!
//! # CUDA backend
//!
//! With the `cuda` feature, [`cuda`] holds the GPU backend; without it, a stub with the same
//! names whose entry points return [`KernelError::NotCompiledWithCuda`], so callers need no
//! `cfg`. cudarc is loaded dynamically: the crate builds and its tests pass with no CUDA
//! toolkit and no driver, and a missing driver is [`KernelError::NoCudaDriver`]
//! ("no CUDA driver found ..."), never a panic.
//!
//! * Discovery: [`cuda::driver_status`], [`cuda::device_count`], [`cuda::devices`] (never
//!   panic). `--devices auto` = all GPUs when `device_count()` is `Ok(n > 0)`, else the CPU.
//! * One [`cuda::CudaDevice`] per GPU ([`cuda::CudaDevice::open`]: context, kernels compiled
//!   by NVRTC and cached, cuDNN probe; [`cuda::CudaDevice::mem_info`] for the tuner), one
//!   [`cuda::CudaBackend`] per learner ([`cuda::CudaDevice::new_backend`]: its own stream,
//!   cuBLAS and cuDNN handles). Buffers are `cudarc::driver::CudaSlice<f32>`; host↔device
//!   copies go through pinned staging buffers.
//! * What runs where (cuBLAS, cuDNN or the `.cu` kernels next to each op), the stream and
//!   event-tracking contract, the kernel cache and the environment variables are documented
//!   in [`cuda`].
//! * Tests without a GPU: NVRTC compiles every kernel for sm_80 and sm_90 (`nvrtc_*` tests),
//!   and a host emulator of the kernels runs the whole GPU backend through the conformance
//!   suite (`emu_*` tests). `tests/gpu.rs` runs the suite on a real GPU
//!   (`scripts/gpu-check.sh`).
//!
//! Testing (feature `testing`): [`testing`] holds the tolerance type, finite differences and
//! a conformance suite generic over the backend. Every CPU forward is checked against a naive
//! reference and every backward against central finite differences in `f64`.

pub mod activation;
mod args;
pub mod augment;
mod backend;
pub mod batch_norm;
pub mod conv2d;
mod cpu;
pub mod cuda;
pub mod dropout;
mod error;
pub mod gemm;
pub mod linear;
pub mod optim;
pub mod pool;
pub mod softmax_xent;
#[cfg(feature = "testing")]
pub mod testing;
pub mod vector;

pub use backend::{Backend, View, ViewMut};
pub use cpu::CpuBackend;
pub use error::{KernelError, Result};
pub use gemm::{CpuGemm, GemmConfig};
