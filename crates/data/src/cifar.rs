//! CIFAR-10 and CIFAR-100 binary files: reading, validation and writing.
//!
//! CIFAR-10 record: 1 label byte + 3072 pixel bytes (1024 R, 1024 G, 1024 B, rows top to
//! bottom). CIFAR-100 record: 2 label bytes (coarse 0..20, fine 0..100) + 3072 pixel bytes.

use std::io::Write;
use std::path::Path;

use crate::DataError;
use crate::file::{Input, open};
use crate::idx::create;

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

    fn classes(self) -> usize {
        match self {
            CifarVariant::Cifar10 => 10,
            CifarVariant::Cifar100 => 100,
        }
    }
}

/// Reads one CIFAR binary file, appending its images and labels.
#[cfg(test)]
pub(crate) fn read_cifar(
    path: &Path,
    variant: CifarVariant,
    pixels: &mut Vec<u8>,
    labels: &mut Vec<u32>,
) -> Result<(), DataError> {
    parse_cifar(open(path)?, variant, pixels, labels)
}

/// Reads the first `keep` records of one CIFAR binary file (all when `None`), appending them;
/// returns the records the file holds (for a raw file, from its size, unread records
/// included; for gzip, those read). Before anything is allocated, the bytes to hold are checked
/// against the memory available.
pub(crate) fn read_cifar_first(
    path: &Path,
    variant: CifarVariant,
    pixels: &mut Vec<u8>,
    labels: &mut Vec<u32>,
    keep: Option<usize>,
) -> Result<usize, DataError> {
    let input = open(path)?;
    let rec = variant.record_bytes() as u64;
    if !input.is_gzip() && !input.misnamed_gz() {
        let len = input.bound();
        if len > 0 && len.is_multiple_of(rec) {
            let records = (len / rec) as usize;
            let take = keep.map_or(records, |k| k.min(records));
            crate::file::check_memory(path, take as u64 * rec, &format!("{take} CIFAR records"))?;
            if take < records {
                let before = labels.len();
                parse_cifar_limited(input, variant, pixels, labels, Some(take))?;
                debug_assert_eq!(labels.len() - before, take);
                return Ok(records);
            }
        }
    }
    let before = labels.len();
    parse_cifar_limited(input, variant, pixels, labels, keep)?;
    Ok(labels.len() - before)
}

/// Parses the content of a CIFAR binary file, appending its images and labels. A raw file's size
/// is checked to be a whole number of records before anything is read or allocated; a gzip
/// stream is read record by record and refused once it exceeds what its compressed size (and
/// [`crate::file::MAX_DECOMPRESSED`]) allows.
#[cfg(test)]
pub(crate) fn parse_cifar(
    input: Input<'_>,
    variant: CifarVariant,
    pixels: &mut Vec<u8>,
    labels: &mut Vec<u32>,
) -> Result<(), DataError> {
    parse_cifar_limited(input, variant, pixels, labels, None)
}

/// [`parse_cifar`] stopping after `keep` records (the rest is not read).
fn parse_cifar_limited(
    mut input: Input<'_>,
    variant: CifarVariant,
    pixels: &mut Vec<u8>,
    labels: &mut Vec<u32>,
    keep: Option<usize>,
) -> Result<(), DataError> {
    let path = input.path();
    let rec = variant.record_bytes();
    let leftover = |len: u64| {
        DataError::truncated(
            path,
            format!(
                "{len} bytes is not a whole number of {rec}-byte {} records ({} whole records and {} bytes left \
                 over)",
                variant.name(),
                len / rec as u64,
                len % rec as u64
            ),
        )
    };
    if input.misnamed_gz() {
        let mut head = [0u8; 2];
        let got = input.read_full(&mut head)?;
        return Err(input.not_gzip(&head[..got]));
    }
    // Records the content can hold: exactly that many for a raw file, at most that many for gzip.
    let max_records = input.bound() / rec as u64;
    if !input.is_gzip() {
        let len = input.bound();
        if len == 0 {
            return Err(DataError::malformed(path, "empty file: holds no records"));
        }
        if !len.is_multiple_of(rec as u64) {
            return Err(leftover(len));
        }
        let n = usize::try_from(max_records)
            .ok()
            .filter(|n| n.checked_mul(CIFAR_IMAGE_BYTES).is_some())
            .ok_or_else(|| DataError::malformed(path, format!("{len} bytes is too large to load")))?;
        let n = keep.map_or(n, |k| k.min(n));
        pixels.reserve(n * CIFAR_IMAGE_BYTES);
        labels.reserve(n);
    }
    let mut record = vec![0u8; rec];
    let mut index: u64 = 0;
    loop {
        if keep.is_some_and(|k| index >= k as u64) {
            // The records asked for are read; the rest of the file is not.
            return Ok(());
        }
        let got = input.read_full(&mut record)?;
        if got == 0 {
            break;
        }
        if got < rec {
            return Err(leftover(index * rec as u64 + got as u64));
        }
        if index >= max_records {
            return Err(if input.is_gzip() {
                DataError::malformed(
                    path,
                    format!(
                        "decompresses to more than {} bytes, but {}",
                        max_records * rec as u64,
                        input.bound_reason()
                    ),
                )
            } else {
                DataError::malformed(path, format!("the file grew while it was read (from {} bytes)", input.bound()))
            });
        }
        let index_usize = usize::try_from(index).unwrap_or(usize::MAX);
        let label = match variant {
            CifarVariant::Cifar10 => record[0] as u32,
            CifarVariant::Cifar100 => {
                let coarse = record[0] as u32;
                if coarse >= 20 {
                    return Err(DataError::LabelOutOfRange {
                        path: path.to_path_buf(),
                        index: index_usize,
                        label: coarse,
                        classes: 20,
                    });
                }
                record[1] as u32
            }
        };
        let classes = variant.classes();
        if label as usize >= classes {
            return Err(DataError::LabelOutOfRange { path: path.to_path_buf(), index: index_usize, label, classes });
        }
        labels.push(label);
        pixels.extend_from_slice(&record[variant.label_bytes()..]);
        index += 1;
    }
    if index == 0 {
        return Err(DataError::malformed(path, "empty file: holds no records"));
    }
    if !input.is_gzip() && index < max_records {
        return Err(DataError::truncated(
            path,
            format!("the file shrank while it was read: {index} of {max_records} records"),
        ));
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
