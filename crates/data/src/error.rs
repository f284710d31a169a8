use std::path::{Path, PathBuf};

/// Everything that can go wrong while loading, generating or serving data.
///
/// Errors about a file name the file first and then the problem, e.g.
/// `data/mnist/train-images-idx3-ubyte: wrong magic number 0x00000000 (expected 0x00000803 for
/// IDX3 images)`. No input, however corrupt, makes this crate panic.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The data directory itself does not exist (or is not a directory).
    #[error("data directory {} does not exist or is not a directory (looked for {})", .path.display(), list(.looked_for))]
    MissingDirectory {
        /// The directory given.
        path: PathBuf,
        /// The files that would have been read from it.
        looked_for: Vec<PathBuf>,
    },
    /// None of the accepted names of a required file exists.
    #[error("{}: missing {what} (looked for {})", .dir.display(), list(.looked_for))]
    MissingFile {
        /// The directory searched.
        dir: PathBuf,
        /// What the file holds, e.g. `MNIST training images`.
        what: String,
        /// Every path tried, in order.
        looked_for: Vec<PathBuf>,
    },
    /// A data file's path is a directory, a FIFO, a socket or a device (checked before opening
    /// it, so a FIFO cannot block the reader).
    #[error("{}: {kind}, not a data file", .path.display())]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead, e.g. `is a directory`.
        kind: &'static str,
    },
    /// Reading (or writing) a file failed at the operating-system level.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file does not start with the magic number of its format.
    #[error("{}: wrong magic number {found:#010x} (expected {expected:#010x} for {what})", .path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic number read.
        found: u32,
        /// The magic number required.
        expected: u32,
        /// The kind of file expected, e.g. `IDX3 images`.
        what: &'static str,
    },
    /// A file ends before the data its header (or record size) promises.
    #[error("{}: truncated: {detail}", .path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was expected and what was found.
        detail: String,
    },
    /// A file is readable but its content is invalid (bad dimensions, trailing bytes, not gzip...).
    #[error("{}: {detail}", .path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The problem.
        detail: String,
    },
    /// A label is not a valid class index.
    #[error("{}: label {label} of record {index} is out of range (expected 0..{classes})", .path.display())]
    LabelOutOfRange {
        /// The file.
        path: PathBuf,
        /// The record (0-based).
        index: usize,
        /// The label read.
        label: u32,
        /// The number of classes.
        classes: usize,
    },
    /// An image file and its label file disagree on the number of records.
    #[error(
        "{} holds {images} images but {} holds {labels} labels",
        .images_path.display(),
        .labels_path.display()
    )]
    CountMismatch {
        /// The image file.
        images_path: PathBuf,
        /// Its number of images.
        images: usize,
        /// The label file.
        labels_path: PathBuf,
        /// Its number of labels.
        labels: usize,
    },
    /// A dataset name that is not one of [`crate::DatasetKind::ALL`].
    #[error("unknown dataset `{name}` (valid names: {})", crate::DatasetKind::valid_names())]
    UnknownDataset {
        /// The name given.
        name: String,
    },
    /// Invalid parameters: batch size 0, no workers, a cursor past the end of an epoch, ...
    #[error("invalid data configuration: {0}")]
    InvalidConfig(String),
    /// A pipeline worker thread failed; the pipeline cannot continue.
    #[error("data pipeline failed: {0}")]
    Pipeline(String),
}

impl DataError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io { path: path.to_path_buf(), source }
    }

    pub(crate) fn malformed(path: &Path, detail: impl Into<String>) -> Self {
        DataError::Malformed { path: path.to_path_buf(), detail: detail.into() }
    }

    pub(crate) fn truncated(path: &Path, detail: impl Into<String>) -> Self {
        DataError::Truncated { path: path.to_path_buf(), detail: detail.into() }
    }

    pub(crate) fn config(detail: impl Into<String>) -> Self {
        DataError::InvalidConfig(detail.into())
    }
}

fn list(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}
