//! # crossbow-data
//!
//! Datasets and the training input pipeline of crossbow: readers for the standard file formats,
//! built-in synthetic datasets that need no download, augmentation and normalisation, and a
//! prefetching [`Pipeline`] that hands the engine a deterministic stream of ready batches (k
//! learners take k batches per iteration).
//!
//! ```
//! use std::sync::Arc;
//! use crossbow_data::{load, DatasetKind, EvalBatches, LoadOptions, Pipeline, PipelineConfig};
//!
//! let opts = LoadOptions { seed: 7, train_size: Some(512), test_size: Some(100), ..LoadOptions::default() };
//! let (train, test) = load(DatasetKind::SyntheticShapes, "unused-for-synthetic", &opts)?;
//! let mut pipeline = Pipeline::new(Arc::new(train), PipelineConfig::new(64, 7))?;
//! let batch = pipeline.next_batch()?; // 64 augmented, normalised 3x32x32 images
//! assert_eq!((batch.len(), batch.images().len(), batch.cursor().batch), (64, 64 * 3072, 0));
//! drop(batch); // its buffers go back to the pipeline
//! let norm = pipeline.normalize().clone();
//! let sizes: Vec<usize> = EvalBatches::new(&test, 32, &norm)?.map(|b| b.len()).collect();
//! assert_eq!(sizes, [32, 32, 32, 4]);
//! # Ok::<(), crossbow_data::DataError>(())
//! ```
//!
//! ## Datasets
//!
//! [`load`]`(kind, data_dir, &opts)` returns `(train, test)` [`Dataset`]s; [`DatasetKind`]
//! parses the names `mnist`, `cifar10`, `cifar100`, `synthetic-digits`, `synthetic-shapes`,
//! `folder`.
//!
//! | name | files in `data_dir` | images | classes |
//! |---|---|---|---|
//! | `mnist` | `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte` (each raw or `.gz`; also `train-images.idx3-ubyte` etc.; also under `mnist/` or `MNIST/raw/`) | 1x28x28 (any size from 12x12 the header gives) | 10 |
//! | `cifar10` | `data_batch_1.bin` .. `data_batch_5.bin`, `test_batch.bin` (also under `cifar-10-batches-bin/`) | 3x32x32 | 10 |
//! | `cifar100` | `train.bin`, `test.bin`, fine labels (also under `cifar-100-binary/`) | 3x32x32 | 100 |
//! | `folder` | `train/<class>/*` and `val/<class>/*` (or `test/`): JPEG (baseline, progressive) and PNG (grey, RGB, RGBA, palette, 16-bit), any size, sub-folders followed | 3xSxS, S = [`FolderOptions::image_size`] (default 224) | the sorted class folder names |
//! | `synthetic-digits` | none: 20,000 train / 4,000 test by default | 1x28x28 | 10 |
//! | `synthetic-shapes` | none: 20,000 train / 4,000 test by default | 3x32x32 | 10 |
//!
//! Bad input never panics, hangs or allocates more than the file's size justifies: a missing
//! directory or file, a directory or FIFO where a file should be, a wrong magic number, a
//! truncated file, trailing bytes, a file named `.gz` that is not gzip, invalid gzip, a header
//! declaring more data than the file can hold (a gzip file's decompressed size is bounded by its
//! header, by what DEFLATE can expand it to and by 2 GiB), images smaller than
//! [`MIN_IMAGE_SIDE`], a label out of range or image/label counts that disagree are a
//! [`DataError`] whose message starts with the file's path and says what is wrong. (A raw IDX
//! file that happens to be named `.gz` is read as raw.) [`export`]
//! writes any dataset of these shapes back in the standard formats (so another framework can
//! train on exactly the same synthetic images).
//!
//! A [`Dataset`] holds pixels as `u8`, image after image in CHW order, labels as `u32`, the image
//! shape `[c, h, w]`, the number of classes, its name, and the exact per-channel mean and
//! standard deviation of `pixel / 255` over its images (for the real datasets, computed from the
//! files: they equal the usual published constants).
//!
//! ### Synthetic datasets
//!
//! * `synthetic-digits` (MNIST-shaped): the digits 0–9 drawn as anti-aliased strokes (lines,
//!   arcs, curves; a few style variants per digit) with a random wobble, rotation (±18°), scale,
//!   aspect, shear, position, stroke width and brightness, distractor dots and scratches, and
//!   noise.
//! * `synthetic-shapes` (CIFAR-shaped): disc, ring, square, square frame, triangle, plus, star,
//!   horizontal bar, vertical bar, crescent — random size, position and rotation, a random fill
//!   colour clearly different from a random background colour with gradient and texture, an
//!   occasional occluder, and noise.
//!
//! Label of image `i` is `i % 10` (balanced classes). Both are designed so that a small CNN
//! learns them to well above 95 % while a linear classifier on raw pixels stays far below (a
//! test checks the latter). Rendering uses only basic IEEE arithmetic (no libm), so a seed gives
//! bit-identical images on every platform and with any number of threads.
//!
//! ## Augmentation and normalisation
//!
//! [`Normalize`] maps a pixel to `(p / 255 - mean[c]) / std[c]` (use the training set's
//! statistics for the test set too). [`Augment`] is a random crop with padding — a translation
//! by up to `pad` pixels in each direction, the uncovered border filled with `0.0` *after*
//! normalisation by default ([`PadFill::Zero`], the channel mean, as the original Crossbow) or
//! with a black raw pixel ([`PadFill::Black`], as torchvision) — followed by a random
//! horizontal flip. The default ([`Augment::default_for`]) is pad 4 + flip for 32x32 colour
//! images and nothing otherwise. Both run fused in one pass with a per-channel lookup table.
//!
//! ## The pipeline and its determinism contract
//!
//! [`Pipeline`] yields an endless stream of [`Batch`]es of `batch_size` images (`f32`, NCHW,
//! normalised) with labels as `f32` class indices. An epoch is one pass over the training set in
//! a fresh random order, cut into `len / batch_size` batches: the last partial batch is dropped
//! unless [`PipelineConfig::drop_last`] is off. Every batch knows its epoch and its index in the
//! epoch ([`Cursor`]).
//!
//! * The content of batch `(epoch e, index i)` depends only on the dataset, the seed, the batch
//!   size, `drop_last`, the augmentation and the normalisation: the order of epoch `e` comes from
//!   `Rng::derive(seed, 3·2^60 + e)`, and the augmentation draws of batch `i` of epoch `e` (per
//!   image in batch order: `dx`, `dy`, flip) from `Rng::derive(seed, 4·2^60 + (e mod 2^28)·2^32 +
//!   i)`. Synthetic image `i` uses stream `2^60 + i` (train) or `2^61 + i` (test). The number of
//!   worker threads, the prefetch depth and timing never change the stream, and batches arrive
//!   in order.
//! * [`Pipeline::cursor`] is the position of the next batch to be returned; a pipeline started
//!   at that cursor ([`PipelineConfig::start`]) continues with identical batches.
//! * Within an epoch every sample appears in at most one batch (exactly one with `drop_last`
//!   off), so k learners taking k consecutive batches always train on distinct samples.
//! * Batch buffers are recycled: a dropped [`Batch`] returns them to the workers, so the steady
//!   state allocates nothing (one permutation per epoch aside).
//! * Dropping the pipeline stops and joins its workers; batches still held stay valid.
//!
//! [`EvalBatches`] iterates a test set in order, unaugmented, normalised, with a short last
//! batch. Invalid settings (batch size 0 or larger than the dataset, no workers, a start cursor
//! past the end of an epoch, ...) are [`DataError::InvalidConfig`], never panics.

mod cifar;
mod dataset;
mod error;
mod eval;
mod file;
mod folder;
mod idx;
mod kind;
mod load;
mod pipeline;
mod stream;
mod synthetic;
mod transform;

pub use dataset::{Dataset, Fingerprint, Split};
pub use error::DataError;
pub use eval::EvalBatches;
pub use folder::{
    BadImagePolicy, DEFAULT_IMAGE_SIZE, DEFAULT_MAX_IMAGE_PIXELS, DecodeMode, FolderOptions, FolderReport, FolderSplit,
    MAX_BAD_SHARE, MAX_REPLACEMENT_TRIES, MIN_BAD_TO_STOP, NAMED_BAD_IMAGES, STATS_SAMPLE, decode_image, export_folder,
    folder_classes, load_folder,
};
pub use idx::{IDX1_MAGIC, IDX3_MAGIC, MIN_IMAGE_SIDE};
pub use kind::DatasetKind;
pub use load::{DEFAULT_SYNTHETIC_TEST, DEFAULT_SYNTHETIC_TRAIN, LoadOptions, export, load};
pub use pipeline::{Batch, Cursor, Pipeline, PipelineConfig, Share};
pub use transform::{Augment, IMAGENET_MEAN, IMAGENET_STD, Normalize, NormalizeChoice, PadFill};

#[cfg(test)]
mod tests;
