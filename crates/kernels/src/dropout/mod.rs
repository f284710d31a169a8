//! Inverted dropout with a counter-based random mask.
//!
//! Whether element `i` is kept depends only on `(seed, i)` through [`keep`] (a SplitMix64
//! finaliser, the same arithmetic in `dropout.cu`), so the CPU and GPU draw identical masks
//! and a learner's mask is reproducible from its seed without storing generator state.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, same_len};

/// Dropout. The provided method checks the arguments, then runs the backend's
/// [`Dropout::dropout_forward_unchecked`] (what a backend implements).
pub trait Dropout: Storage {
    checked_op! {
        /// Inverted dropout: `mask[i] = keep(i) ? 1/(1-p) : 0`, `y = x * mask`, where `keep(i)`
        /// comes from a counter-based hash of `(seed, i)` ([`keep`]), so every backend draws the
        /// same mask. The backward pass is `dx = dy * mask` ([`crate::vector::Vector::mul`]).
        fn dropout_forward(&self, cfg: &DropoutConfig, x: View<'_, Self>, y: ViewMut<'_, Self>, mask: ViewMut<'_, Self>) {
            cfg.validate()?;
            same_len("dropout_forward", x.len(), &[("y", y.len()), ("mask", mask.len())])?;
        }

        /// The kernel of [`Dropout::dropout_forward`].
        ///
        /// # Safety
        /// `cfg` is valid; `x`, `y` and `mask` have the same length.
        unsafe fn dropout_forward_unchecked;
    }
}

/// Dropout probability and the seed of this call's mask.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DropoutConfig {
    /// Probability of dropping an element, in `[0, 1)`.
    pub p: f32,
    /// Seed of the mask; use a different one for every call (e.g. mix in the iteration).
    pub seed: u64,
}

impl DropoutConfig {
    /// Checks `0 <= p < 1`.
    pub fn validate(&self) -> Result<()> {
        if (0.0..1.0).contains(&self.p) {
            Ok(())
        } else {
            Err(KernelError::invalid("dropout", format!("probability must be in [0, 1), got {}", self.p)))
        }
    }

    /// The value of a kept element of the mask, `1 / (1 - p)`.
    pub fn scale(&self) -> f32 {
        1.0 / (1.0 - self.p)
    }
}

/// A uniform number in `[0, 1)` with 24 random bits, from `(seed, i)`.
#[inline]
pub fn uniform(seed: u64, i: u64) -> f32 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 * (1.0 / 16_777_216.0)
}

/// Whether element `i` survives dropout with probability `p` under `seed`.
#[inline]
pub fn keep(seed: u64, i: u64, p: f32) -> bool {
    uniform(seed, i) >= p
}
