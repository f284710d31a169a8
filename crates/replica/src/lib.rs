//! # crossbow-replica
//!
//! Models, replicas, learners and the engine that trains them.
//!
//! * [`graph`] / [`layers`] / [`models`] — a model is a layer graph with per-sample shape
//!   inference and a flat parameter layout; each layer (shape, parameters, lowering, kernels'
//!   execution, FLOPs, PyTorch names) is one module of [`layers`]; the zoo has LeNet-5, CIFAR
//!   ResNets (6n+2), VGG-16 with batch norm and ResNet-50, one file each.
//! * [`program`] / [`plan`] / [`exec`] — a graph lowered at a batch size becomes a
//!   straight-line program of kernel calls; a memory plan maps its activations and gradients
//!   onto a few reused buffers; an [`exec::Executor`] runs it on any
//!   [`crossbow_kernels::Backend`].
//! * [`replica`] — a [`replica::Replica`]: parameters, gradients, momentum and batch-norm
//!   statistics, each ONE flat buffer.
//! * [`schedule`] — learning-rate schedules.
//! * [`sync`] — the [`sync::Synchroniser`] trait the engine calls once per iteration (the
//!   `crossbow-sma` crate implements SMA, S-SGD and EA-SGD with it), and the all-reduce.
//! * [`engine`] — the [`engine::Engine`]: k learners over D devices, one batch each per
//!   iteration, learners added and removed between iterations.

pub mod catalog;
pub mod checkpoint;
pub mod comm;
pub mod engine;
pub mod error;
pub mod exec;
pub mod export;
pub mod graph;
pub mod layers;
pub mod models;
pub mod plan;
pub mod program;
pub mod replica;
pub mod schedule;
pub mod sync;
#[cfg(feature = "testing")]
pub mod testing;

pub use comm::world::{self, ProcessGroup, Solo};
pub use engine::{Engine, EngineConfig};
pub use error::{ReplicaError, Result};
pub use graph::{Graph, GraphBuilder, Layer, NodeId};
pub use models::ModelKind;
pub use replica::Replica;
pub use schedule::Schedule;
pub use sync::{SettingValue, Settings, SyncNote, Synchroniser};
