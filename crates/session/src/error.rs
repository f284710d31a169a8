//! The errors of a training run (and of every `crossbow` command built on it): one clear
//! line, and the exit code a command line gives it.

/// An error of a training session: what went wrong, typed, with one clear line as its
/// message. A program matches on the variant (bad settings, bad data, a divergence, a signal);
/// the `crossbow` command prints the line and exits with [`SessionError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Bad input from the user (a flag, a config file, a checkpoint to resume): exit code 2.
    #[error("{0}")]
    Usage(String),
    /// The dataset's files are missing or bad (the user's input): exit code 2.
    #[error(transparent)]
    Data(crossbow_data::DataError),
    /// The model, replicas or engine refused or failed (a model that does not fit its input
    /// is the user's input, exit code 2; the rest exit 1).
    #[error(transparent)]
    Replica(crossbow_replica::ReplicaError),
    /// A kernel or device failed (no CUDA driver, or not compiled with CUDA, is the user's
    /// choice of devices, exit code 2; the rest exit 1).
    #[error(transparent)]
    Kernel(crossbow_kernels::KernelError),
    /// Training diverged (a NaN or exploding loss) and no rollback was left: exit code 1. The
    /// message names the last good checkpoint and the likely cause.
    #[error("{0}")]
    Diverged(String),
    /// Any other failure while running (I/O, a rank, a checkpoint write): exit code 1.
    #[error("{0}")]
    Run(String),
    /// The run stopped on a signal after saving what it could: exit code 128 + the signal.
    #[error("{msg}")]
    Interrupted {
        /// The exit code (130 for SIGINT, 143 for SIGTERM).
        code: i32,
        /// Where the checkpoint is and how to resume.
        msg: String,
    },
}

impl SessionError {
    /// A usage error.
    pub fn usage(msg: impl Into<String>) -> Self {
        SessionError::Usage(msg.into())
    }

    /// A run-time error.
    pub fn run(msg: impl std::fmt::Display) -> Self {
        SessionError::Run(msg.to_string())
    }

    /// Whether the user's input is at fault (a setting, a file, a device choice), not the run.
    pub fn is_usage(&self) -> bool {
        match self {
            SessionError::Usage(_) | SessionError::Data(_) => true,
            SessionError::Replica(e) => {
                matches!(e, crossbow_replica::ReplicaError::Config(_) | crossbow_replica::ReplicaError::Model(_))
            }
            SessionError::Kernel(e) => matches!(
                e,
                crossbow_kernels::KernelError::NoCudaDriver(_) | crossbow_kernels::KernelError::NotCompiledWithCuda
            ),
            SessionError::Diverged(_) | SessionError::Run(_) | SessionError::Interrupted { .. } => false,
        }
    }

    /// The process exit code: 2 for the user's input, 1 for a failure while running, 128 +
    /// the signal for an interrupted run.
    pub fn exit_code(&self) -> i32 {
        match self {
            SessionError::Interrupted { code, .. } => *code,
            e if e.is_usage() => 2,
            _ => 1,
        }
    }
}

impl From<crossbow_data::DataError> for SessionError {
    fn from(e: crossbow_data::DataError) -> Self {
        SessionError::Data(e)
    }
}

impl From<crossbow_replica::ReplicaError> for SessionError {
    fn from(e: crossbow_replica::ReplicaError) -> Self {
        SessionError::Replica(e)
    }
}

impl From<crossbow_kernels::KernelError> for SessionError {
    fn from(e: crossbow_kernels::KernelError) -> Self {
        SessionError::Kernel(e)
    }
}
