//! CIFAR-10 and CIFAR-100 binary files: reading, validation and writing.
//!
//! CIFAR-10 record: 1 label byte + 3072 pixel bytes (1024 R, 1024 G, 1024 B, rows top to
//! bottom). CIFAR-100 record: 2 label bytes (coarse 0..20, fine 0..100) + 3072 pixel bytes.

use std::io::{Read, Write};
use std::path::Path;

use crate::DataError;
use crate::idx::{create, open};

/// Pixel bytes per CIFAR image (3x32x32).
pub(crate) const CIFAR_IMAGE_BYTES: usize = 3 * 32 * 32;

/// The two CIFAR binary layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CifarVariant {
    /// 1 label byte, 10 classes.
    Cifar10,
    /// 2 label bytes (coarse, fine); the fine label (100 classes) is used.
    Cifar100,
}

impl CifarVariant {
    fn label_bytes(self) -> usize {
        match self {
            CifarVariant::Cifar10 => 1,
            CifarVariant::Cifar100 => 2,
        }
    }

    pub(crate) fn record_bytes(self) -> usize {
        self.label_bytes() + CIFAR_IMAGE_BYTES
    }

    fn name(self) -> &'static str {
        match self {
            CifarVariant::Cifar10 => "CIFAR-10",
            CifarVariant::Cifar100 => "CIFAR-100",
        }
    }
}

/// Reads one CIFAR binary file, appending its images and labels.
pub(crate) fn read_cifar(
    path: &Path,
    variant: CifarVariant,
    pixels: &mut Vec<u8>,
    labels: &mut Vec<u32>,
) -> Result<(), DataError> {
    let mut bytes = Vec::new();
    open(path)?.read_to_end(&mut bytes).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
            DataError::malformed(path, format!("invalid gzip data: {e}"))
        }
        _ => DataError::io(path, e),
    })?;
    let rec = variant.record_bytes();
    if bytes.is_empty() {
        return Err(DataError::malformed(path, "empty file: holds no records"));
    }
    if bytes.len() % rec != 0 {
        return Err(DataError::truncated(
            path,
            format!(
                "{} bytes is not a whole number of {rec}-byte {} records ({} whole records and \
                 {} bytes left over)",
                bytes.len(),
                variant.name(),
                bytes.len() / rec,
                bytes.len() % rec
            ),
        ));
    }
    let n = bytes.len() / rec;
    pixels.reserve(n * CIFAR_IMAGE_BYTES);
    labels.reserve(n);
    for (index, record) in bytes.chunks_exact(rec).enumerate() {
        let label = match variant {
            CifarVariant::Cifar10 => record[0] as u32,
            CifarVariant::Cifar100 => {
                let coarse = record[0] as u32;
                if coarse >= 20 {
                    return Err(DataError::LabelOutOfRange {
                        path: path.to_path_buf(),
                        index,
                        label: coarse,
                        classes: 20,
                    });
                }
                record[1] as u32
            }
        };
        let classes = match variant {
            CifarVariant::Cifar10 => 10,
            CifarVariant::Cifar100 => 100,
        };
        if label as usize >= classes {
            return Err(DataError::LabelOutOfRange { path: path.to_path_buf(), index, label, classes });
        }
        labels.push(label);
        pixels.extend_from_slice(&record[variant.label_bytes()..]);
    }
    Ok(())
}

/// Writes images (3x32x32 each) and labels as one CIFAR binary file. For CIFAR-100 the coarse
/// label written is `fine / 5` (a placeholder: the real coarse classes are not a function of
/// the fine index, and this crate ignores coarse labels apart from range-checking them).
pub(crate) fn write_cifar(path: &Path, variant: CifarVariant, pixels: &[u8], labels: &[u32]) -> Result<(), DataError> {
    let mut w = create(path)?;
    let mut write = || -> std::io::Result<()> {
        for (image, &label) in pixels.chunks_exact(CIFAR_IMAGE_BYTES).zip(labels) {
            let fine = u8::try_from(label).unwrap_or(u8::MAX);
            match variant {
                CifarVariant::Cifar10 => w.write_all(&[fine])?,
                CifarVariant::Cifar100 => w.write_all(&[fine / 5, fine])?,
            }
            w.write_all(image)?;
        }
        w.flush()
    };
    write().map_err(|e| DataError::io(path, e))
}
