//! The random streams of this crate: every random draw comes from
//! `Rng::derive(seed, id)` with an `id` from here, and the ids of different purposes never
//! collide (the top 4 bits are a tag).

use crate::Split;

const TAG_SHIFT: u32 = 60;
const LOW_60: u64 = (1 << TAG_SHIFT) - 1;

/// Synthetic image `index` of `split` (tags 1 and 2: train and test never share a stream).
pub(crate) fn synthetic(split: Split, index: u64) -> u64 {
    let tag = match split {
        Split::Train => 1,
        Split::Test => 2,
    };
    (tag << TAG_SHIFT) | (index & LOW_60)
}

/// The shuffle of epoch `epoch` (tag 3).
pub(crate) fn permutation(epoch: u64) -> u64 {
    (3 << TAG_SHIFT) | (epoch & LOW_60)
}

/// Number of distinct epochs [`augmentation`] tells apart (2^28; it wraps after that, and a
/// pipeline cannot start beyond it).
pub(crate) const AUGMENT_EPOCHS: u64 = 1 << 28;

/// The augmentation draws of batch `batch` of epoch `epoch` (tag 4; epoch modulo 2^28, batch
/// index below 2^32, which [`crate::Pipeline::new`] checks).
pub(crate) fn augmentation(epoch: u64, batch: u64) -> u64 {
    (4 << TAG_SHIFT) | ((epoch % AUGMENT_EPOCHS) << 32) | (batch & 0xffff_ffff)
}
