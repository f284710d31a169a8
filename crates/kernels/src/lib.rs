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
//!
//! Ops take [`View`]s of backend buffers and write into caller-provided [`ViewMut`]s; they
//! never allocate on the hot path, so a model keeps its parameters, gradients and momentum in
//! one flat buffer each and its activations in buffers a memory plan reuses. Every geometry
//! is validated and every view's length checked: bad shapes are errors, not panics.
//!
//! Testing (feature `testing`): [`testing`] holds the tolerance type, finite differences and
//! a conformance suite generic over the backend. Every CPU forward is checked against a naive
//! reference and every backward against central finite differences in `f64`.

pub mod activation;
mod backend;
pub mod batch_norm;
pub mod conv2d;
mod cpu;
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
