//! # crossbow-kernels
//!
//! Every operator crossbow's models need, forward and backward, behind one [`Backend`]
//! trait: a CPU backend ([`CpuBackend`], always built — a real trainer and the reference)
//! and a GPU backend ([`cuda::GpuBackend`]: on CUDA with the feature `cuda`, on a host
//! emulator of the kernels with `testing`). One folder per op holds everything about it:
//!
//! * `mod.rs`: the op's trait (its public methods check the arguments, once for every
//!   backend, then call the backend's `*_unchecked` kernels) and its geometry type;
//! * `cpu.rs`: the CPU kernels and `impl <Op> for CpuBackend`;
//! * `cuda.rs` and `<op>.cu`: the GPU kernels and `impl<E: Launcher> <Op> for GpuBackend<E>`
//!   (plus `cudnn.rs` for conv2d and batch norm);
//! * `tests.rs`: tests generic over the backend, each run on every backend by
//!   `test_backends!` (feature `testing`).
//!
//! The `ops!` list in this file is the only other place an op is named: it
//! declares the folder, adds the op's trait to [`Ops`] (and so to [`Backend`] and the
//! [`prelude`]) and registers its `.cu` source.
//!
//! | module | op trait | op |
//! |---|---|---|
//! | [`gemm`] | [`gemm::Gemm`] | row-major GEMM (CPU: `matrixmultiply`, or `gemm`, chosen by measurement) |
//! | [`conv2d`] | [`conv2d::Conv2d`] | convolution with stride, padding, optional bias (CPU: Winograd F(4×4, 3×3) for wide 3×3 layers, direct AVX-512/AVX2 kernels, else im2col + GEMM) |
//! | [`linear`] | [`linear::Linear`] | fully connected layer |
//! | [`batch_norm`] | [`batch_norm::BatchNorm`] | batch normalisation, training (batch statistics, running averages) and inference |
//! | [`pool`] | [`pool::Pool2d`] | max and average pooling, global average pooling |
//! | [`activation`] | [`activation::Activation`] | ReLU |
//! | [`leaky_relu`] | [`leaky_relu::LeakyRelu`] | leaky ReLU with a slope parameter |
//! | [`dropout`] | [`dropout::Dropout`] | inverted dropout with a counter-based (backend-independent) mask |
//! | [`softmax_xent`] | [`softmax_xent::SoftmaxXent`] | fused softmax + cross-entropy + accuracy |
//! | [`optim`] | [`optim::Optim`] | SGD with momentum (heavy ball or Nesterov) and weight decay |
//! | [`sma_step`] | [`sma_step::SmaStep`] | SMA's learner and central updates, each fused into one pass |
//! | [`vector`] | [`vector::Vector`] | add, sub, mul, axpy, weighted sums, scaling, sum of squares |
//! | [`augment`] | [`augment::Augment`] | random crop with zero padding + horizontal flip of image batches, on the device |
//!
//! Ops take [`View`]s of backend buffers and write into caller-provided [`ViewMut`]s; they
//! never allocate on the hot path, so a model keeps its parameters, gradients and momentum in
//! one flat buffer each and its activations in buffers a memory plan reuses. Every geometry
//! is validated and every view's length checked: bad shapes are errors, not panics.
//!
//! Generic code bounded by `B: Backend` calls every op as a method. Code that holds a
//! concrete backend (`CpuBackend`, `CudaBackend`) brings the op traits into scope with
//! `use crossbow_kernels::prelude::*`.
//!
//! # CUDA backend
//!
//! [`cuda`] holds the GPU backend. With the `cuda` feature it runs on CUDA; without it,
//! [`cuda::CudaBackend`] is the same `GpuBackend` over an uninhabited executor and every
//! entry point returns [`KernelError::NotCompiledWithCuda`], so callers need no `cfg`.
//! cudarc is loaded dynamically: the crate builds and its tests pass with no CUDA toolkit
//! and no driver, and a missing driver is [`KernelError::NoCudaDriver`] ("no CUDA driver
//! found ..."), never a panic.
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
//!   and a host emulator of the kernels runs the whole GPU backend through every op's tests
//!   (the `emu` variant of each test). The `cuda` variants and `tests/gpu.rs` run on a real
//!   GPU (`scripts/gpu-check.sh`).
//!
//! Testing (feature `testing`): `testing` holds the tolerance type, finite differences,
//! buffer helpers and the `test_backends!` macro that turns one test function generic over
//! the backend into one `#[test]` per backend (CPU, emulated GPU, real GPU). Every forward
//! is checked against a naive reference and every backward against central finite
//! differences in `f64`, on the CPU and on the GPU backend alike.

mod backend;
mod cpu;
pub mod cuda;
mod error;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::gemm::{CpuGemm, GemmConfig};
pub use backend::{Backend, Storage, View, ViewMut};
pub use conv2d::winograd::{WINOGRAD_ENV, winograd_setting, winograd_setting_with};
pub use cpu::{CPU_ISA_ENV, CpuBackend, CpuIsa, cpu_isa, cpu_isa_with};
pub use error::{KernelError, Result};

/// An op of a backend trait, declared once: `fn NAME(&self, ARGS) { CHECKS }` becomes the
/// provided method (its checks, then the kernel) and the unsafe kernel `NAME_unchecked` with
/// the same arguments, which each backend implements and which may assume the checks hold.
/// An op's signature is so written once here and once per backend. (Attributes before `fn`
/// apply to the checked method; the kernel takes as many arguments, so it may take many.)
macro_rules! checked_op {
    (
        $(#[$meta:meta])*
        fn $name:ident(&$self:ident, $($arg:ident: $ty:ty),* $(,)?) $check:block
        $(#[doc = $kdoc:expr])*
        unsafe fn $unchecked:ident;
    ) => {
        $(#[$meta])*
        fn $name(&$self, $($arg: $ty),*) -> $crate::error::Result<()> {
            $check
            // SAFETY: the checks above are the kernel's preconditions.
            unsafe { $self.$unchecked($($arg),*) }
        }

        $(#[doc = $kdoc])*
        #[allow(clippy::too_many_arguments)]
        unsafe fn $unchecked(&$self, $($arg: $ty),*) -> $crate::error::Result<()>;
    };
}

/// The op list: `folder => OpTrait` for every op. For each entry it declares the module,
/// makes the trait a supertrait of [`Ops`] (so of [`Backend`]), re-exports it from the
/// [`prelude`], and registers the `.cu` sources of the folder's `cuda.rs` (`SOURCES`) with
/// NVRTC, the kernel cache and the emulator.
macro_rules! ops {
    ($($module:ident => $Trait:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every op of a backend: one supertrait per op folder. Implemented for every type
        /// that implements all of them; [`Backend`] adds memory and ordering.
        pub trait Ops: $($module::$Trait +)* Storage {}

        impl<B: ?Sized $(+ $module::$Trait)* + Storage> Ops for B {}

        /// What code holding a concrete backend imports to call ops on it:
        /// `use crossbow_kernels::prelude::*`.
        pub mod prelude {
            pub use crate::{Backend, CpuBackend, Ops, Storage, View, ViewMut};
            $(pub use crate::$module::$Trait;)*
        }

        /// The `.cu` sources of every op folder, in list order.
        pub(crate) const KERNEL_SOURCES: &[&[cuda::launch::KernelSource]] = &[$($module::cuda::SOURCES),*];
    };
}

ops! {
    gemm => Gemm,
    vector => Vector,
    optim => Optim,
    sma_step => SmaStep,
    activation => Activation,
    leaky_relu => LeakyRelu,
    conv2d => Conv2d,
    linear => Linear,
    batch_norm => BatchNorm,
    pool => Pool2d,
    dropout => Dropout,
    softmax_xent => SoftmaxXent,
    augment => Augment,
}
