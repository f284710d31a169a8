//! Augmentation (random crop with padding, horizontal flip) and per-channel normalisation, fused
//! into one pass that turns `u8` CHW pixels into normalised `f32` CHW values.

use crossbow_tensor::Rng;
use serde::{Deserialize, Serialize};

use crate::{DataError, Dataset};

/// What the border uncovered by a padded crop is filled with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PadFill {
    /// `0.0` in the normalised output, i.e. the channel mean (as the original Crossbow, which
    /// zero-padded the already normalised image). The default.
    #[default]
    Zero,
    /// A black raw pixel (value 0) normalised like any other, i.e. `-mean / std` (as
    /// torchvision's `RandomCrop(padding=4)` before `Normalize`).
    Black,
}

/// Random augmentation of training images.
///
/// With `pad = p > 0`, each image is conceptually padded by `p` pixels on every side and a
/// random window of the original size is cut from it: the image is *translated* by
/// `(dx, dy)`, each uniform in `-p..=p`, and the uncovered border is filled as `fill` says. With
/// `flip`, the (cropped) image is then mirrored left-right with probability 1/2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Augment {
    /// Padding of the random crop, in pixels (0 = no crop).
    pub pad: usize,
    /// Random horizontal flip.
    pub flip: bool,
    /// Value of the padding.
    pub fill: PadFill,
}

impl Default for Augment {
    fn default() -> Self {
        Self::none()
    }
}

impl Augment {
    /// No augmentation.
    pub const fn none() -> Self {
        Augment { pad: 0, flip: false, fill: PadFill::Zero }
    }

    /// The standard CIFAR augmentation: random crop with 4-pixel zero padding and horizontal
    /// flip.
    pub const fn cifar() -> Self {
        Augment { pad: 4, flip: true, fill: PadFill::Zero }
    }

    /// The default for images of shape `[c, h, w]`: [`Augment::cifar`] for 32x32 colour
    /// images, none otherwise (flipping digits would change their meaning).
    pub fn default_for(shape: [usize; 3]) -> Self {
        if shape == [3, 32, 32] { Self::cifar() } else { Self::none() }
    }

    /// True when this augmentation never changes an image.
    pub fn is_none(&self) -> bool {
        self.pad == 0 && !self.flip
    }
}

/// Per-channel normalisation: `out = (pixel / 255 - mean[c]) / std[c]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Normalize {
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Normalize {
    /// A normalisation from per-channel means and standard deviations (in units of
    /// `pixel / 255`). Errors: lengths differ or are zero, a value that is not finite, or a
    /// standard deviation that is not positive.
    pub fn new(mean: Vec<f32>, std: Vec<f32>) -> Result<Self, DataError> {
        if mean.is_empty() || mean.len() != std.len() {
            return Err(DataError::config(format!(
                "normalisation needs one mean and one std per channel (got {} and {})",
                mean.len(),
                std.len()
            )));
        }
        if mean.iter().any(|m| !m.is_finite()) || std.iter().any(|s| !s.is_finite() || *s <= 0.0) {
            return Err(DataError::config(format!(
                "normalisation needs finite means and positive stds (got {mean:?} and {std:?})"
            )));
        }
        Ok(Normalize { mean, std })
    }

    /// The statistics of a dataset (use the *training* set's for both training and test).
    pub fn from_dataset(dataset: &Dataset) -> Self {
        Normalize { mean: dataset.mean().to_vec(), std: dataset.std().to_vec() }
    }

    /// Only scales to `[0, 1]` (`mean 0`, `std 1`) for `channels` channels.
    pub fn unit(channels: usize) -> Self {
        Normalize { mean: vec![0.0; channels], std: vec![1.0; channels] }
    }

    /// Per-channel means.
    pub fn mean(&self) -> &[f32] {
        &self.mean
    }

    /// Per-channel standard deviations.
    pub fn std(&self) -> &[f32] {
        &self.std
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.mean.len()
    }

    /// The normalised value of `pixel` in `channel` (`None` for a channel out of range). The
    /// pipeline produces exactly these values.
    pub fn apply(&self, channel: usize, pixel: u8) -> Option<f32> {
        let (m, s) = (self.mean.get(channel)?, self.std.get(channel)?);
        Some((pixel as f32 / 255.0 - m) / s)
    }
}

/// Where a sample lands: translation `(dx, dy)` (source = output + shift) and mirror.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    pub dx: isize,
    pub dy: isize,
    pub flip: bool,
}

/// A ready-to-run augmentation + normalisation for one image shape: a 256-entry lookup table
/// per channel and the padding value per channel.
#[derive(Clone, Debug)]
pub(crate) struct Transform {
    shape: [usize; 3],
    lut: Vec<[f32; 256]>,
    fill: Vec<f32>,
    pad: usize,
    flip: bool,
}

impl Transform {
    pub(crate) fn new(shape: [usize; 3], augment: Augment, normalize: &Normalize) -> Result<Self, DataError> {
        let [c, h, w] = shape;
        if normalize.channels() != c {
            return Err(DataError::config(format!(
                "normalisation has {} channels but the images have {c}",
                normalize.channels()
            )));
        }
        if augment.pad > h.max(w) {
            return Err(DataError::config(format!("crop padding {} is larger than the {h}x{w} image", augment.pad)));
        }
        let mut lut = vec![[0.0f32; 256]; c];
        for (ch, table) in lut.iter_mut().enumerate() {
            for (p, v) in table.iter_mut().enumerate() {
                *v = normalize.apply(ch, p as u8).unwrap_or(0.0);
            }
        }
        let fill = match augment.fill {
            PadFill::Zero => vec![0.0; c],
            PadFill::Black => lut.iter().map(|t| t[0]).collect(),
        };
        Ok(Transform { shape, lut, fill, pad: augment.pad, flip: augment.flip })
    }

    /// Draws one sample's placement: `dx`, `dy` (if padding), then the flip (if enabled).
    #[inline]
    pub(crate) fn draw(&self, rng: &mut Rng) -> Placement {
        let mut p = Placement::default();
        if self.pad > 0 {
            let span = 2 * self.pad + 1;
            p.dx = rng.below(span) as isize - self.pad as isize;
            p.dy = rng.below(span) as isize - self.pad as isize;
        }
        if self.flip {
            p.flip = rng.bernoulli(0.5);
        }
        p
    }

    /// Writes the augmented, normalised image: `dst[c][y][x] = lut[c][src[c][y + dy][x' + dx]]`
    /// with `x' = w - 1 - x` when flipped, `fill[c]` where the source is outside the image.
    /// `src` and `dst` must hold `c * h * w` values.
    pub(crate) fn apply(&self, src: &[u8], dst: &mut [f32], p: Placement) {
        let [_, h, w] = self.shape;
        let plane = h * w;
        let wi = w as isize;
        // Output columns whose source column is inside the image.
        let (lo, hi) = if p.flip { (p.dx.max(0), (wi + p.dx).min(wi)) } else { ((-p.dx).max(0), (wi - p.dx).min(wi)) };
        let lo = lo.clamp(0, wi) as usize;
        let hi = (hi.max(lo as isize)).clamp(0, wi) as usize;
        for (((src_plane, dst_plane), table), &fill) in
            src.chunks_exact(plane).zip(dst.chunks_exact_mut(plane)).zip(&self.lut).zip(&self.fill)
        {
            for (y, out) in dst_plane.chunks_exact_mut(w).enumerate() {
                let sy = y as isize + p.dy;
                if sy < 0 || sy >= h as isize || lo == hi {
                    out.fill(fill);
                    continue;
                }
                let row = &src_plane[sy as usize * w..(sy as usize + 1) * w];
                out[..lo].fill(fill);
                out[hi..].fill(fill);
                let out = &mut out[lo..hi];
                if p.flip {
                    // Output x in lo..hi reads source w - 1 - x + dx, descending.
                    let s_lo = (wi - hi as isize + p.dx) as usize;
                    let s_hi = (wi - lo as isize + p.dx) as usize;
                    for (o, &px) in out.iter_mut().zip(row[s_lo..s_hi].iter().rev()) {
                        *o = table[px as usize];
                    }
                } else {
                    let s_lo = (lo as isize + p.dx) as usize;
                    for (o, &px) in out.iter_mut().zip(&row[s_lo..s_lo + (hi - lo)]) {
                        *o = table[px as usize];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward reference: pad, crop, flip, normalise, pixel by pixel.
    fn reference(src: &[u8], shape: [usize; 3], norm: &Normalize, fill: PadFill, p: Placement) -> Vec<f32> {
        let [c, h, w] = shape;
        let mut out = vec![0.0; c * h * w];
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    let xf = if p.flip { w - 1 - x } else { x };
                    let sx = xf as isize + p.dx;
                    let sy = y as isize + p.dy;
                    let inside = (0..w as isize).contains(&sx) && (0..h as isize).contains(&sy);
                    out[(ch * h + y) * w + x] = if inside {
                        norm.apply(ch, src[(ch * h + sy as usize) * w + sx as usize]).unwrap()
                    } else {
                        match fill {
                            PadFill::Zero => 0.0,
                            PadFill::Black => norm.apply(ch, 0).unwrap(),
                        }
                    };
                }
            }
        }
        out
    }

    #[test]
    fn apply_matches_reference_for_every_placement() {
        let shape = [3, 5, 7];
        let src: Vec<u8> = (0..105).map(|i| (i * 37 % 251) as u8).collect();
        let norm = Normalize::new(vec![0.5, 0.4, 0.3], vec![0.25, 0.2, 0.1]).unwrap();
        for fill in [PadFill::Zero, PadFill::Black] {
            let aug = Augment { pad: 7, flip: true, fill };
            let t = Transform::new(shape, aug, &norm).unwrap();
            for dx in -7..=7 {
                for dy in -7..=7 {
                    for flip in [false, true] {
                        let p = Placement { dx, dy, flip };
                        let mut dst = vec![f32::NAN; 105];
                        t.apply(&src, &mut dst, p);
                        assert_eq!(dst, reference(&src, shape, &norm, fill, p), "{p:?} {fill:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn crop_is_a_translation_and_flip_mirrors() {
        let shape = [1, 4, 4];
        let src: Vec<u8> = (0..16).map(|i| i as u8 * 10 + 5).collect();
        let t = Transform::new(shape, Augment::cifar(), &Normalize::unit(1)).unwrap();
        let v = |p: u8| p as f32 / 255.0;
        let mut dst = vec![0.0; 16];
        // Shift right by one column and down by one row: source = output + (-1, -1).
        t.apply(&src, &mut dst, Placement { dx: -1, dy: -1, flip: false });
        assert_eq!(&dst[0..4], &[0.0; 4]);
        assert_eq!(dst[4], 0.0);
        assert_eq!(dst[5], v(src[0]));
        assert_eq!(dst[15], v(src[10]));
        // Flip only: each row reversed.
        t.apply(&src, &mut dst, Placement { dx: 0, dy: 0, flip: true });
        for y in 0..4 {
            for x in 0..4 {
                assert_eq!(dst[y * 4 + x], v(src[y * 4 + 3 - x]));
            }
        }
    }

    #[test]
    fn draws_cover_the_range() {
        let t = Transform::new([3, 32, 32], Augment::cifar(), &Normalize::unit(3)).unwrap();
        let mut rng = Rng::new(1);
        let mut seen_dx = [false; 9];
        let mut flips = 0;
        for _ in 0..2000 {
            let p = t.draw(&mut rng);
            assert!((-4..=4).contains(&p.dx) && (-4..=4).contains(&p.dy));
            seen_dx[(p.dx + 4) as usize] = true;
            flips += p.flip as usize;
        }
        assert!(seen_dx.iter().all(|&s| s));
        assert!((850..1150).contains(&flips), "{flips}");
    }

    #[test]
    fn invalid_normalisation_is_an_error() {
        assert!(Normalize::new(vec![], vec![]).is_err());
        assert!(Normalize::new(vec![0.5], vec![0.0]).is_err());
        assert!(Normalize::new(vec![0.5, 0.1], vec![0.2]).is_err());
        assert!(Normalize::new(vec![f32::NAN], vec![0.2]).is_err());
        let n = Normalize::unit(3);
        assert!(Transform::new([1, 28, 28], Augment::none(), &n).is_err());
        let big = Augment { pad: 40, ..Augment::cifar() };
        assert!(Transform::new([3, 32, 32], big, &n).is_err());
        assert_eq!(n.apply(3, 0), None);
    }
}
