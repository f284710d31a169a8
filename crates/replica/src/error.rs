//! The error type of the replica crate, wrapping kernel and shape errors.

use crossbow_kernels::KernelError;
use crossbow_tensor::ShapeError;

/// Result of a replica-crate call.
pub type Result<T, E = ReplicaError> = std::result::Result<T, E>;

/// Why building or running a model failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// A kernel call failed (shape mismatch, device error, ...).
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A shape does not work for a layer.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A model graph is malformed, or a model name/config is unknown.
    #[error("model: {0}")]
    Model(String),
    /// A configuration value is invalid (learning rate, schedule, learners, ...).
    #[error("config: {0}")]
    Config(String),
    /// The loss or the weights became NaN or infinite.
    #[error("training diverged: {0}")]
    Diverged(String),
    /// A device's host thread panicked (a bug, not a setting): the iteration is lost.
    #[error("device thread: {0}")]
    DeviceThread(String),
    /// A synchroniser failed.
    #[error("synchroniser {name}: {msg}")]
    Sync {
        /// The synchroniser's name (`sma`, `ssgd`, ...).
        name: String,
        /// What went wrong.
        msg: String,
    },
    /// The data pipeline failed.
    #[error("data: {0}")]
    Data(String),
    /// A collective between processes (ranks) failed.
    #[error("processes: {0}")]
    Processes(String),
}
