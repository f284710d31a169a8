//! The errors of a training run (and of every `crossbow` command built on it): one clear
//! line, and the exit code a command line gives it.

/// An error the `crossbow` command reports on one line before exiting.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input from the user (flag, config file, data directory): exit code 2.
    #[error("{0}")]
    Usage(String),
    /// A failure while running (I/O, divergence, device errors): exit code 1.
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

impl CliError {
    /// A usage error.
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError::Usage(msg.into())
    }

    /// A run-time error.
    pub fn run(msg: impl std::fmt::Display) -> Self {
        CliError::Run(msg.to_string())
    }

    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Run(_) => 1,
            CliError::Interrupted { code, .. } => *code,
        }
    }
}

impl From<crossbow_data::DataError> for CliError {
    fn from(e: crossbow_data::DataError) -> Self {
        // Bad or missing dataset files are the user's input.
        CliError::Usage(e.to_string())
    }
}

impl From<crossbow_replica::ReplicaError> for CliError {
    fn from(e: crossbow_replica::ReplicaError) -> Self {
        match e {
            crossbow_replica::ReplicaError::Config(_) | crossbow_replica::ReplicaError::Model(_) => {
                CliError::Usage(e.to_string())
            }
            _ => CliError::Run(e.to_string()),
        }
    }
}

impl From<crossbow_kernels::KernelError> for CliError {
    fn from(e: crossbow_kernels::KernelError) -> Self {
        match e {
            crossbow_kernels::KernelError::NoCudaDriver(_) | crossbow_kernels::KernelError::NotCompiledWithCuda => {
                CliError::Usage(e.to_string())
            }
            _ => CliError::Run(e.to_string()),
        }
    }
}
