//! Augmentation of CIFAR-shaped image batches on the device: random crop with zero padding
//! and horizontal flip (as for CIFAR), so a GPU learner's batch never makes a host round
//! trip for augmentation.
//!
//! For each image `n` of `x [batch, channels, height, width]` the data pipeline draws, from
//! its own deterministic RNG on the host, a crop offset `(dy, dx)` in `0..=2*pad` and a flip
//! flag, and packs them as 3 `f32`s per image ([`CropFlip::pack`]). The op computes
//!
//! ```text
//! padded = zero-pad x by `pad` on every side            ([h + 2 pad, w + 2 pad])
//! crop   = padded[dy .. dy + h, dx .. dx + w]
//! y      = flip ? crop mirrored horizontally : crop
//! ```
//!
//! i.e. `y[n, c, i, j] = x[n, c, i + dy - pad, j' + dx - pad]` (0 outside the image) with
//! `j' = flip ? w - 1 - j : j`. `dy = dx = pad` and no flip is the identity. Output values
//! are copies of input values or zeros, so every backend is bit-identical to the CPU.
//! Invalid parameters (not integers in `0..=2*pad`, flip not 0 or 1) are an error on the
//! CPU; on a GPU they turn that image into NaNs.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Backend, Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};

/// Augmentation. The provided method checks the arguments, then runs the backend's
/// [`Augment::crop_flip_unchecked`] (what a backend implements; a backend without a device
/// kernel can call [`crop_flip_via_host`]).
pub trait Augment: Storage {
    checked_op! {
        /// Random crop with zero padding and horizontal flip of a batch of images (see the
        /// [module docs](self)): `params` holds 3 `f32`s per image (`dy`, `dx`, `flip`), drawn
        /// on the host.
        fn crop_flip(&self, g: &CropFlipGeom, x: View<'_, Self>, params: View<'_, Self>, y: ViewMut<'_, Self>) {
            g.check("crop_flip", x.len(), params.len(), y.len())?;
        }

        /// The kernel of [`Augment::crop_flip`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn crop_flip_unchecked;
    }
}

/// [`Augment::crop_flip`] through host memory, for any backend: downloads `x` and `params`,
/// runs the CPU kernel and uploads `y`.
pub fn crop_flip_via_host<B: Backend + ?Sized>(
    be: &B,
    g: &CropFlipGeom,
    x: View<'_, B>,
    params: View<'_, B>,
    y: ViewMut<'_, B>,
) -> Result<()> {
    g.check("crop_flip", x.len(), params.len(), y.len())?;
    let mut hx = vec![0.0; x.len()];
    be.download(x, &mut hx)?;
    let mut hp = vec![0.0; params.len()];
    be.download(params, &mut hp)?;
    let mut hy = vec![0.0; hx.len()];
    cpu::crop_flip(g, &hx, &hp, &mut hy)?;
    be.upload(&hy, y)
}

/// The geometry of a crop-and-flip call: input and output are both `[batch, channels,
/// height, width]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CropFlipGeom {
    /// Images in the batch (`n`); `params` holds 3 values per image.
    pub batch: usize,
    /// Channels per image (3 for CIFAR).
    pub channels: usize,
    /// Image height in pixels, before padding (and of the output).
    pub height: usize,
    /// Image width in pixels, before padding (and of the output).
    pub width: usize,
    /// Zero padding on every side before cropping (4 for CIFAR).
    pub pad: usize,
}

impl CropFlipGeom {
    /// CIFAR's augmentation: 3×32×32 images, 4 pixels of padding.
    pub fn cifar(batch: usize) -> Self {
        CropFlipGeom { batch, channels: 3, height: 32, width: 32, pad: 4 }
    }

    /// Checks for zero sizes and overflow.
    pub fn validate(&self) -> Result<()> {
        let op = "crop_flip";
        if self.batch == 0 || self.channels == 0 || self.height == 0 || self.width == 0 {
            return Err(KernelError::invalid(op, format!("zero-sized dimension in {self:?}")));
        }
        let n = self
            .batch
            .checked_mul(self.channels)
            .and_then(|v| v.checked_mul(self.height))
            .and_then(|v| v.checked_mul(self.width));
        if n.is_none() || self.pad.checked_mul(2).is_none() || self.batch.checked_mul(3).is_none() {
            return Err(KernelError::invalid(op, format!("element count overflows in {self:?}")));
        }
        Ok(())
    }

    /// Elements of the input (and of the output).
    pub fn len(&self) -> usize {
        self.batch * self.channels * self.height * self.width
    }

    /// True when the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements of `params`: 3 per image (`dy`, `dx`, `flip`).
    pub fn params_len(&self) -> usize {
        3 * self.batch
    }

    /// Checks the geometry and the lengths of the views.
    pub(crate) fn check(&self, op: &'static str, x: usize, params: usize, y: usize) -> Result<()> {
        self.validate()?;
        check_len(op, "input", self.len(), x)?;
        check_len(op, "params", self.params_len(), params)?;
        check_len(op, "output", self.len(), y)
    }
}

/// The augmentation parameters of one image, drawn on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CropFlip {
    /// Row offset of the crop in the padded image, `0..=2*pad` (`pad` = no shift).
    pub dy: usize,
    /// Column offset of the crop in the padded image, `0..=2*pad`.
    pub dx: usize,
    /// Mirror the crop horizontally.
    pub flip: bool,
}

impl CropFlip {
    /// The identity for padding `pad`: centred crop, no flip.
    pub fn identity(pad: usize) -> Self {
        CropFlip { dy: pad, dx: pad, flip: false }
    }

    /// Packs per-image parameters as the op's `params` (3 `f32`s per image; offsets are
    /// exact as `f32` up to 2^24).
    pub fn pack(items: &[CropFlip]) -> Vec<f32> {
        items.iter().flat_map(|p| [p.dy as f32, p.dx as f32, if p.flip { 1.0 } else { 0.0 }]).collect()
    }
}
