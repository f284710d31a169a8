//! # crossbow-tensor
//!
//! The vocabulary every other crossbow crate shares, and nothing about machine learning:
//!
//! * [`Shape`] — the dimensions of a dense row-major tensor (NCHW for images) with checked
//!   arithmetic: a shape whose element count overflows, or two shapes that do not fit together,
//!   give a [`ShapeError`] naming both shapes, never a panic.
//! * [`Tensor`] — an `f32` tensor in host memory (a shape plus a `Vec<f32>`). Device memory is
//!   not modelled here: each backend of `crossbow-kernels` owns its buffers, so this crate stays
//!   free of CUDA and can be used anywhere.
//! * [`Device`] and [`DeviceSpec`] — names of compute devices (`cpu:0`, `cuda:1`) and the
//!   user-facing device selection (`auto`, `cpu`, `cpu:4`, `cuda`, `cuda:0,1`), with serde.
//! * [`Rng`] — a seeded, reproducible random generator (ChaCha8) that can be split into
//!   independent streams, and [`Init`], the standard parameter initialisers (Kaiming, Xavier,
//!   normal, truncated normal, uniform, constant).

mod device;
mod error;
mod init;
mod rng;
mod shape;
mod tensor;

pub use device::{Device, DeviceKind, DeviceSpec};
pub use error::ShapeError;
pub use init::{FanMode, Init};
pub use rng::{Rng, RngState};
pub use shape::Shape;
pub use tensor::Tensor;
