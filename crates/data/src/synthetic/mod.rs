//! The built-in synthetic datasets, rendered deterministically from a seed.
//!
//! Image `i` of a split is rendered from its own random stream
//! `Rng::derive(seed, stream::synthetic(split, i))` and has label `i % 10`, so the dataset is
//! bit-identical for a seed whatever the number of rayon threads, and the training and test sets
//! come from disjoint streams.

mod digits;
pub(crate) mod raster;
mod shapes;

use crossbow_tensor::Rng;
use rayon::prelude::*;

use crate::{DataError, Dataset, DatasetKind, Split, stream};

/// Generates `n` images of a synthetic dataset.
pub(crate) fn generate(kind: DatasetKind, split: Split, n: usize, seed: u64) -> Result<Dataset, DataError> {
    let shape = kind.image_shape();
    let image_len = shape[0] * shape[1] * shape[2];
    let classes = kind.num_classes();
    let bytes = n
        .checked_mul(image_len)
        .ok_or_else(|| DataError::config(format!("{kind}: {n} images overflow the address space")))?;
    let mut pixels = Vec::new();
    pixels
        .try_reserve_exact(bytes)
        .map_err(|_| DataError::config(format!("{kind}: cannot allocate {bytes} bytes for {n} images")))?;
    pixels.resize(bytes, 0);
    let labels: Vec<u32> = (0..n).map(|i| (i % classes) as u32).collect();
    match kind {
        DatasetKind::SyntheticDigits => {
            pixels.par_chunks_mut(image_len).enumerate().for_each_init(digits::Scratch::default, |scratch, (i, out)| {
                let mut rng = Rng::derive(seed, stream::synthetic(split, i as u64));
                digits::render(i % classes, &mut rng, out, scratch);
            })
        }
        DatasetKind::SyntheticShapes => {
            pixels.par_chunks_mut(image_len).enumerate().for_each_init(shapes::Scratch::default, |scratch, (i, out)| {
                let mut rng = Rng::derive(seed, stream::synthetic(split, i as u64));
                shapes::render(i % classes, &mut rng, out, scratch);
            })
        }
        _ => {
            return Err(DataError::config(format!("{kind} is not a synthetic dataset")));
        }
    }
    Dataset::new(kind.name(), split, shape, classes, pixels, labels)
}

#[cfg(test)]
mod tests;
