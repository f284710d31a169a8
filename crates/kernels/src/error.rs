use crossbow_tensor::ShapeError;

/// Result of a kernel call.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;

/// Why a kernel call failed.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A shape or geometry is invalid.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A buffer view has the wrong length for the op's geometry.
    #[error("{op}: argument '{arg}' has {actual} elements, expected {expected}")]
    Length {
        /// The op that was called (`"conv2d_forward"`, ...).
        op: &'static str,
        /// The argument whose view is wrong (`"input"`, `"params"`, `"workspace"`, ...).
        arg: &'static str,
        /// Elements the geometry implies.
        expected: usize,
        /// Elements the view has.
        actual: usize,
    },
    /// A view's range does not lie inside its buffer.
    #[error("view {start}..{end} is out of range for a buffer of {len} elements")]
    Range {
        /// First element of the requested range.
        start: usize,
        /// One past the last element of the requested range.
        end: usize,
        /// Elements in the buffer (or parent view).
        len: usize,
    },
    /// An argument value is invalid (probability outside [0, 1), non-finite learning rate, ...).
    #[error("{op}: {msg}")]
    Invalid {
        /// The op or config that rejected the value (`"sgd"`, `"batch_norm"`, ...).
        op: &'static str,
        /// What is wrong, with the offending value.
        msg: String,
    },
    /// No CUDA driver library could be loaded on this machine.
    #[error("no CUDA driver found ({0}); use --devices cpu or install the NVIDIA driver")]
    NoCudaDriver(String),
    /// The crate was built without the `cuda` feature.
    #[error("crossbow was built without CUDA support (enable the 'cuda' feature of crossbow-kernels)")]
    NotCompiledWithCuda,
    /// A CUDA driver, NVRTC, cuBLAS or cuDNN call failed.
    #[error("CUDA error in {context}: {msg}")]
    Cuda {
        /// Where it failed: the library and call, or the kernel (`"cuDNN ..."`, `"CUDA driver"`).
        context: String,
        /// What went wrong: the library's error code or message.
        msg: String,
    },
}

impl KernelError {
    /// A [`KernelError::Invalid`].
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        KernelError::Invalid { op, msg: msg.into() }
    }
}

/// Checks that a view has the expected length.
pub(crate) fn check_len(op: &'static str, arg: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual { Ok(()) } else { Err(KernelError::Length { op, arg, expected, actual }) }
}

/// Checks that every `others[i].1` equals `n` (views an element-wise op reads and writes).
pub(crate) fn same_len(op: &'static str, n: usize, others: &[(&'static str, usize)]) -> Result<()> {
    for &(arg, len) in others {
        check_len(op, arg, n, len)?;
    }
    Ok(())
}
