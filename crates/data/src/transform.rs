//! Augmentation (random crop with padding, horizontal flip) and per-channel normalisation, fused
//! into one pass that turns `u8` CHW pixels into normalised `f32` CHW values.

use std::fmt;
use std::str::FromStr;

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
    /// Random-resized crop (torchvision's `RandomResizedCrop` defaults: a window of 8–100 % of
    /// the image's area with aspect ratio 3/4–4/3, at a random place, resized back to the
    /// image's size with bilinear interpolation), before the flip. Used instead of `pad`.
    #[serde(default)]
    pub resized_crop: bool,
}

impl Default for Augment {
    fn default() -> Self {
        Self::none()
    }
}

impl Augment {
    /// No augmentation.
    pub const fn none() -> Self {
        Augment { pad: 0, flip: false, fill: PadFill::Zero, resized_crop: false }
    }

    /// The standard CIFAR augmentation: random crop with 4-pixel zero padding and horizontal
    /// flip.
    pub const fn cifar() -> Self {
        Augment { pad: 4, flip: true, fill: PadFill::Zero, resized_crop: false }
    }

    /// The standard ImageNet training augmentation: random-resized crop and horizontal flip
    /// (the default of folder datasets).
    pub const fn imagenet() -> Self {
        Augment { pad: 0, flip: true, fill: PadFill::Zero, resized_crop: true }
    }

    /// The default for images of shape `[c, h, w]`: [`Augment::cifar`] for 32x32 colour
    /// images, none otherwise (flipping digits would change their meaning).
    pub fn default_for(shape: [usize; 3]) -> Self {
        if shape == [3, 32, 32] { Self::cifar() } else { Self::none() }
    }

    /// True when this augmentation never changes an image.
    pub fn is_none(&self) -> bool {
        self.pad == 0 && !self.flip && !self.resized_crop
    }
}

/// The names of [`Augment`]'s presets, as `--augment` takes them.
const AUGMENT_NAMES: [(&str, Augment); 5] = [
    ("none", Augment::none()),
    ("flip", Augment { pad: 0, flip: true, fill: PadFill::Zero, resized_crop: false }),
    ("crop-flip", Augment::cifar()),
    ("resized-crop", Augment { pad: 0, flip: false, fill: PadFill::Zero, resized_crop: true }),
    ("resized-crop-flip", Augment::imagenet()),
];

/// `none`, `flip`, `crop-flip` ([`Augment::cifar`]), `resized-crop`, `resized-crop-flip`
/// ([`Augment::imagenet`]); others are written `pad:<p>[+flip][+black]`.
impl fmt::Display for Augment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((name, _)) = AUGMENT_NAMES.iter().find(|(_, a)| a == self) {
            return f.write_str(name);
        }
        let mut s = if self.resized_crop { "resized-crop".to_string() } else { format!("pad:{}", self.pad) };
        if self.flip {
            s.push_str("+flip");
        }
        if self.fill == PadFill::Black {
            s.push_str("+black");
        }
        f.write_str(&s)
    }
}

impl FromStr for Augment {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        AUGMENT_NAMES.iter().find(|(n, _)| *n == lower).map(|(_, a)| *a).ok_or_else(|| {
            let names: Vec<&str> = AUGMENT_NAMES.iter().map(|(n, _)| *n).collect();
            format!("`{s}` is not an augmentation (valid: {})", names.join(", "))
        })
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

/// ImageNet's per-channel mean (RGB, units of `pixel / 255`), as torchvision's examples use.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet's per-channel standard deviation (RGB, units of `pixel / 255`).
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// Which normalisation to use, as a user chooses it (`--normalize`); [`NormalizeChoice::resolve`]
/// turns it into the [`Normalize`] of a training set. Written as `auto`, `imagenet`, `none` or
/// `MEAN/STD` (one value for every channel, or one per channel, comma-separated:
/// `0.5/0.25`, `0.485,0.456,0.406/0.229,0.224,0.225`); [`fmt::Display`] writes what
/// [`FromStr`] reads back to the same value.
#[derive(Clone, Debug, PartialEq)]
pub enum NormalizeChoice {
    /// The training set's own statistics ([`Normalize::from_dataset`]).
    Auto,
    /// ImageNet's ([`IMAGENET_MEAN`], [`IMAGENET_STD`]); colour images only.
    Imagenet,
    /// Only scaled to `[0, 1]` ([`Normalize::unit`]).
    None,
    /// Given constants: one per channel, or one for every channel.
    Given {
        /// Means, in units of `pixel / 255`.
        mean: Vec<f32>,
        /// Standard deviations, positive.
        std: Vec<f32>,
    },
}

impl NormalizeChoice {
    /// The normalisation of `train`'s images (a test set is normalised with its training
    /// set's). Errors: ImageNet's constants for images that are not 3-channel, or given
    /// constants whose count is neither 1 nor the channels'.
    pub fn resolve(&self, train: &Dataset) -> Result<Normalize, DataError> {
        let c = train.image_shape()[0];
        match self {
            NormalizeChoice::Auto => Ok(Normalize::from_dataset(train)),
            NormalizeChoice::None => Ok(Normalize::unit(c)),
            NormalizeChoice::Imagenet if c == 3 => Normalize::new(IMAGENET_MEAN.to_vec(), IMAGENET_STD.to_vec()),
            NormalizeChoice::Imagenet => Err(DataError::config(format!(
                "imagenet normalisation is for colour (3-channel) images, and {} images have {c} \
                 channel{} (use auto, none or MEAN/STD)",
                train.name(),
                if c == 1 { "" } else { "s" }
            ))),
            NormalizeChoice::Given { mean, std } => {
                let widen = |v: &[f32], what: &str| -> Result<Vec<f32>, DataError> {
                    match v.len() {
                        1 => Ok(vec![v[0]; c]),
                        n if n == c => Ok(v.to_vec()),
                        n => Err(DataError::config(format!(
                            "{self}: {n} {what} values for {} images of {c} channel{} (give 1 or {c})",
                            train.name(),
                            if c == 1 { "" } else { "s" }
                        ))),
                    }
                };
                Normalize::new(widen(mean, "mean")?, widen(std, "std")?)
            }
        }
    }
}

impl fmt::Display for NormalizeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[f32]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        match self {
            NormalizeChoice::Auto => f.write_str("auto"),
            NormalizeChoice::Imagenet => f.write_str("imagenet"),
            NormalizeChoice::None => f.write_str("none"),
            NormalizeChoice::Given { mean, std } => write!(f, "{}/{}", list(mean), list(std)),
        }
    }
}

impl FromStr for NormalizeChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let valid = "valid: auto, imagenet, none, or MEAN/STD such as 0.5/0.25 or 0.485,0.456,0.406/0.229,0.224,0.225";
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => return Ok(NormalizeChoice::Auto),
            "imagenet" => return Ok(NormalizeChoice::Imagenet),
            "none" => return Ok(NormalizeChoice::None),
            _ => {}
        }
        let Some((m, d)) = s.split_once('/') else {
            return Err(format!("`{s}` is not a normalisation ({valid})"));
        };
        let list = |part: &str, what: &str| -> Result<Vec<f32>, String> {
            part.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<f32>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| format!("`{s}`: {what} `{}` is not a finite number ({valid})", x.trim()))
                })
                .collect()
        };
        let (mean, std) = (list(m, "mean")?, list(d, "std")?);
        if let Some(bad) = std.iter().find(|v| **v <= 0.0) {
            return Err(format!("`{s}`: std {bad} must be positive"));
        }
        // Pixels are in [0, 1]: a std this small scales the inputs past anything a network
        // trains on (1e-40 overflows to infinity).
        if let Some(bad) = std.iter().find(|v| **v < MIN_STD) {
            return Err(format!(
                "`{s}`: std {bad:e} is below {MIN_STD} (pixels are in [0, 1]; dividing by it blows the inputs up)"
            ));
        }
        Ok(NormalizeChoice::Given { mean, std })
    }
}

/// The smallest standard deviation `--normalize` accepts (pixels in units of `pixel / 255`).
pub const MIN_STD: f32 = 1e-3;

/// Where a sample lands: translation `(dx, dy)` (source = output + shift) or the source window
/// of a resized crop, and mirror.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    pub dx: isize,
    pub dy: isize,
    pub flip: bool,
    /// Resized crop: the source window `(left, top, width, height)`.
    pub window: Option<(usize, usize, usize, usize)>,
}

/// torchvision's `RandomResizedCrop.get_params` with scale (0.08, 1) and ratio (3/4, 4/3): up
/// to ten tries, then the whole image (whose ratio, for the images this is used on, is in range).
fn draw_window(rng: &mut Rng, h: usize, w: usize) -> (usize, usize, usize, usize) {
    let area = (h * w) as f64;
    let (lo, hi) = ((3.0f64 / 4.0).ln(), (4.0f64 / 3.0).ln());
    for _ in 0..10 {
        let target = area * (0.08 + 0.92 * rng.uniform() as f64);
        let aspect = (lo + (hi - lo) * rng.uniform() as f64).exp();
        let cw = (target * aspect).sqrt().round() as usize;
        let ch = (target / aspect).sqrt().round() as usize;
        if cw > 0 && cw <= w && ch > 0 && ch <= h {
            let top = rng.below(h - ch + 1);
            let left = rng.below(w - cw + 1);
            return (left, top, cw, ch);
        }
    }
    (0, 0, w, h)
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
    resized_crop: bool,
    /// `pixel * scale[c] + shift[c]` is the normalised value (for interpolated pixels).
    scale: Vec<f32>,
    shift: Vec<f32>,
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
        let scale: Vec<f32> = normalize.std.iter().map(|s| 1.0 / (255.0 * s)).collect();
        let shift: Vec<f32> = normalize.mean.iter().zip(&normalize.std).map(|(m, s)| -m / s).collect();
        let (pad, flip, resized_crop) = (augment.pad, augment.flip, augment.resized_crop);
        let pad = if resized_crop { 0 } else { pad };
        Ok(Transform { shape, lut, fill, pad, flip, resized_crop, scale, shift })
    }

    /// Draws one sample's placement: `dx`, `dy` (if padding), then the flip (if enabled).
    #[inline]
    pub(crate) fn draw(&self, rng: &mut Rng) -> Placement {
        let mut p = Placement::default();
        if self.resized_crop {
            p.window = Some(draw_window(rng, self.shape[1], self.shape[2]));
        } else if self.pad > 0 {
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
        if let Some(window) = p.window {
            return self.apply_resized(src, dst, window, p.flip);
        }
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

    /// Bilinear resize (half-pixel centres, as torchvision's and PIL's bilinear when upscaling)
    /// of the source window `(left, top, cw, ch)` to the full image, then the flip and the
    /// normalisation. The window is never larger than the image, so no antialiasing is needed.
    fn apply_resized(&self, src: &[u8], dst: &mut [f32], window: (usize, usize, usize, usize), flip: bool) {
        let [_, h, w] = self.shape;
        let (left, top, cw, ch) = window;
        // Source coordinate of output position `o` along an axis of `n` outputs from `len`
        // source pixels starting at `start`: the two neighbours and the weight of the second.
        let taps = |n: usize, len: usize, start: usize| -> Vec<(usize, usize, f32)> {
            (0..n)
                .map(|o| {
                    let x = ((o as f32 + 0.5) * len as f32 / n as f32 - 0.5).clamp(0.0, (len - 1) as f32);
                    let x0 = x.floor() as usize;
                    let x1 = (x0 + 1).min(len - 1);
                    (start + x0, start + x1, x - x0 as f32)
                })
                .collect()
        };
        let mut xs = taps(w, cw, left);
        if flip {
            xs.reverse();
        }
        let ys = taps(h, ch, top);
        let plane = h * w;
        // Separable: each source row is interpolated along x once into `a` or `b` (the rows
        // above and below the output row), then output rows blend the two. The arithmetic is
        // that of the direct formula, so the result is the same to the bit.
        let (mut a, mut b) = (vec![0.0f32; w], vec![0.0f32; w]);
        let lerp_row = |row: &[u8], out: &mut [f32]| {
            for (o, &(x0, x1, fx)) in out.iter_mut().zip(&xs) {
                *o = row[x0] as f32 + (row[x1] as f32 - row[x0] as f32) * fx;
            }
        };
        for (c, (src_plane, dst_plane)) in src.chunks_exact(plane).zip(dst.chunks_exact_mut(plane)).enumerate() {
            let (scale, shift) = (self.scale[c], self.shift[c]);
            let (mut in_a, mut in_b) = (usize::MAX, usize::MAX);
            for (out, &(y0, y1, fy)) in dst_plane.chunks_exact_mut(w).zip(&ys) {
                if in_a != y0 {
                    if in_b == y0 {
                        std::mem::swap(&mut a, &mut b);
                        in_b = usize::MAX;
                    } else {
                        lerp_row(&src_plane[y0 * w..(y0 + 1) * w], &mut a);
                    }
                    in_a = y0;
                }
                if in_b != y1 {
                    lerp_row(&src_plane[y1 * w..(y1 + 1) * w], &mut b);
                    in_b = y1;
                }
                for ((o, &top), &bottom) in out.iter_mut().zip(&a).zip(&b) {
                    *o = (top + (bottom - top) * fy) * scale + shift;
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
            let aug = Augment { pad: 7, flip: true, fill, resized_crop: false };
            let t = Transform::new(shape, aug, &norm).unwrap();
            for dx in -7..=7 {
                for dy in -7..=7 {
                    for flip in [false, true] {
                        let p = Placement { dx, dy, flip, window: None };
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
        t.apply(&src, &mut dst, Placement { dx: -1, dy: -1, flip: false, window: None });
        assert_eq!(&dst[0..4], &[0.0; 4]);
        assert_eq!(dst[4], 0.0);
        assert_eq!(dst[5], v(src[0]));
        assert_eq!(dst[15], v(src[10]));
        // Flip only: each row reversed.
        t.apply(&src, &mut dst, Placement { dx: 0, dy: 0, flip: true, window: None });
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

    #[test]
    fn normalize_choices_read_back_resolve_per_channel_and_name_what_is_wrong() {
        use crate::Split;
        let grey =
            Dataset::new("grey", Split::Train, [1, 2, 2], 2, vec![0, 255, 0, 255, 51, 51, 51, 51], vec![0, 1]).unwrap();
        let colour =
            Dataset::new("colour", Split::Train, [3, 1, 1], 2, vec![0, 0, 0, 255, 255, 255], vec![0, 1]).unwrap();
        for text in ["auto", "imagenet", "none", "0.5/0.25", "0.485,0.456,0.406/0.229,0.224,0.225", "0.1/1e-3"] {
            let c: NormalizeChoice = text.parse().unwrap();
            assert_eq!(c.to_string().parse::<NormalizeChoice>().unwrap(), c, "{text}");
        }
        assert_eq!("ImageNet".parse::<NormalizeChoice>().unwrap(), NormalizeChoice::Imagenet);
        // auto: the set's own statistics; none: [0, 1]; imagenet: the constants.
        let auto = NormalizeChoice::Auto.resolve(&grey).unwrap();
        assert_eq!((auto.mean(), auto.std()), (grey.mean(), grey.std()));
        assert_eq!(NormalizeChoice::None.resolve(&colour).unwrap(), Normalize::unit(3));
        let inet = NormalizeChoice::Imagenet.resolve(&colour).unwrap();
        assert_eq!((inet.mean(), inet.std()), (&IMAGENET_MEAN[..], &IMAGENET_STD[..]));
        assert_eq!(inet.apply(0, 255), Some((1.0 - 0.485) / 0.229));
        // One value serves every channel; one per channel is kept as given.
        let one: NormalizeChoice = "0.5/0.25".parse().unwrap();
        let n = one.resolve(&colour).unwrap();
        assert_eq!((n.mean(), n.std()), (&[0.5f32; 3][..], &[0.25f32; 3][..]));
        let three: NormalizeChoice = "0.1,0.2,0.3/0.4,0.5,0.6".parse().unwrap();
        assert_eq!(three.resolve(&colour).unwrap().std(), &[0.4, 0.5, 0.6]);
        // What is wrong, named.
        let e = NormalizeChoice::Imagenet.resolve(&grey).unwrap_err().to_string();
        assert!(e.contains("3-channel") && e.contains("grey images have 1 channel"), "{e}");
        let e = three.resolve(&grey).unwrap_err().to_string();
        assert!(e.contains("3 mean values for grey images of 1 channel"), "{e}");
        for (text, needle) in [
            ("fancy", "`fancy` is not a normalisation"),
            ("0.5/0", "std 0 must be positive"),
            ("0.5/-1", "std -1 must be positive"),
            ("0.5,x/0.2", "mean `x` is not a finite number"),
            ("0.5/inf", "std `inf` is not a finite number"),
            ("0.5/0.2/0.1", "std `0.2/0.1`"),
            ("/0.2", "mean `` is not"),
        ] {
            let e = text.parse::<NormalizeChoice>().unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
    /// Reference bilinear crop-resize in f64 (half-pixel centres, edge clamped), then flip.
    fn resized_reference(
        src: &[u8],
        shape: [usize; 3],
        norm: &Normalize,
        win: (usize, usize, usize, usize),
        flip: bool,
    ) -> Vec<f64> {
        let [c, h, w] = shape;
        let (left, top, cw, ch) = win;
        let coord = |o: usize, n: usize, len: usize| -> (usize, usize, f64) {
            let x = ((o as f64 + 0.5) * len as f64 / n as f64 - 0.5).clamp(0.0, (len - 1) as f64);
            let x0 = x.floor() as usize;
            (x0, (x0 + 1).min(len - 1), x - x0 as f64)
        };
        let mut out = vec![0.0; c * h * w];
        for k in 0..c {
            for y in 0..h {
                for x in 0..w {
                    let xs = if flip { w - 1 - x } else { x };
                    let (x0, x1, fx) = coord(xs, w, cw);
                    let (y0, y1, fy) = coord(y, h, ch);
                    let px = |yy: usize, xx: usize| src[(k * h + top + yy) * w + left + xx] as f64;
                    let t = px(y0, x0) * (1.0 - fx) + px(y0, x1) * fx;
                    let b = px(y1, x0) * (1.0 - fx) + px(y1, x1) * fx;
                    let v = t * (1.0 - fy) + b * fy;
                    out[(k * h + y) * w + x] = (v / 255.0 - norm.mean[k] as f64) / norm.std[k] as f64;
                }
            }
        }
        out
    }

    #[test]
    fn resized_crop_matches_the_f64_reference() {
        let shape = [3, 9, 11];
        let src: Vec<u8> = (0..297).map(|i| (i * 53 % 256) as u8).collect();
        let norm = Normalize::new(vec![0.5, 0.4, 0.3], vec![0.25, 0.2, 0.1]).unwrap();
        let t = Transform::new(shape, Augment::imagenet(), &norm).unwrap();
        let mut rng = Rng::new(9);
        for k in 0..300 {
            let mut p = t.draw(&mut rng);
            if k == 0 {
                p.window = Some((0, 0, 11, 9)); // the whole image: the pixels themselves
            }
            let win = p.window.expect("imagenet augmentation draws a window");
            let (left, top, cw, ch) = win;
            assert!(cw >= 1 && ch >= 1 && left + cw <= 11 && top + ch <= 9, "{win:?}");
            let mut dst = vec![f32::NAN; 297];
            t.apply(&src, &mut dst, p);
            let want = resized_reference(&src, shape, &norm, win, p.flip);
            for (i, (&a, &b)) in dst.iter().zip(&want).enumerate() {
                assert!((a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()), "{win:?} flip={} at {i}: {a} vs {b}", p.flip);
            }
            if k == 0 && !p.flip {
                for (i, &a) in dst.iter().enumerate() {
                    assert!((a - norm.apply(i / 99, src[i]).unwrap()).abs() < 1e-5);
                }
            }
        }
    }

    /// The resized crop pixel by pixel in f32, with the arithmetic of `apply_resized`'s
    /// separable form: four reads per output pixel.
    fn resized_direct_f32(t: &Transform, src: &[u8], win: (usize, usize, usize, usize), flip: bool) -> Vec<f32> {
        let [c, h, w] = t.shape;
        let (left, top, cw, ch) = win;
        let coord = |o: usize, n: usize, len: usize| -> (usize, usize, f32) {
            let x = ((o as f32 + 0.5) * len as f32 / n as f32 - 0.5).clamp(0.0, (len - 1) as f32);
            let x0 = x.floor() as usize;
            (x0, (x0 + 1).min(len - 1), x - x0 as f32)
        };
        let mut out = vec![0.0; c * h * w];
        for k in 0..c {
            for y in 0..h {
                let (y0, y1, fy) = coord(y, h, ch);
                for x in 0..w {
                    let (x0, x1, fx) = coord(if flip { w - 1 - x } else { x }, w, cw);
                    let px = |yy: usize, xx: usize| src[(k * h + top + yy) * w + left + xx] as f32;
                    let t0 = px(y0, x0) + (px(y0, x1) - px(y0, x0)) * fx;
                    let b0 = px(y1, x0) + (px(y1, x1) - px(y1, x0)) * fx;
                    out[(k * h + y) * w + x] = (t0 + (b0 - t0) * fy) * t.scale[k] + t.shift[k];
                }
            }
        }
        out
    }

    #[test]
    fn separable_resized_crop_is_the_direct_formula_to_the_bit() {
        let shape = [3, 37, 29];
        let n = 3 * 37 * 29;
        let src: Vec<u8> = (0..n).map(|i| (i * 97 % 251) as u8).collect();
        let norm = Normalize::new(vec![0.485, 0.456, 0.406], vec![0.229, 0.224, 0.225]).unwrap();
        let t = Transform::new(shape, Augment::imagenet(), &norm).unwrap();
        let mut rng = Rng::new(21);
        for _ in 0..200 {
            let p = t.draw(&mut rng);
            let win = p.window.expect("imagenet augmentation draws a window");
            let mut dst = vec![f32::NAN; n];
            t.apply(&src, &mut dst, p);
            let want = resized_direct_f32(&t, &src, win, p.flip);
            for (i, (a, b)) in dst.iter().zip(&want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{win:?} flip={} at {i}: {a} vs {b}", p.flip);
            }
        }
    }

    #[test]
    fn augment_names_round_trip() {
        for (name, a) in AUGMENT_NAMES {
            assert_eq!(name.parse::<Augment>().unwrap(), a);
            assert_eq!(a.to_string(), name);
        }
        assert_eq!("Crop-Flip".parse::<Augment>().unwrap(), Augment::cifar());
        let e = "rotate".parse::<Augment>().unwrap_err();
        assert!(e.contains("rotate") && e.contains("resized-crop-flip"), "{e}");
        assert_eq!(Augment { pad: 2, fill: PadFill::Black, ..Augment::cifar() }.to_string(), "pad:2+flip+black");
    }

    #[test]
    fn resized_crop_draws_follow_torchvision_ranges() {
        let t = Transform::new([3, 64, 64], Augment::imagenet(), &Normalize::unit(3)).unwrap();
        let mut rng = Rng::new(4);
        let (mut small, mut flips) = (0, 0);
        for _ in 0..2000 {
            let p = t.draw(&mut rng);
            let (l, tp, cw, ch) = p.window.unwrap();
            assert!(l + cw <= 64 && tp + ch <= 64);
            let area = (cw * ch) as f64 / 4096.0;
            // Rounding the sides lets the area and ratio stray a little past the ranges.
            assert!((0.06..=1.0).contains(&area), "area {area}");
            let ratio = cw as f64 / ch as f64;
            assert!((0.7..=1.43).contains(&ratio), "ratio {ratio}");
            small += (area < 0.3) as usize;
            flips += p.flip as usize;
            assert_eq!((p.dx, p.dy), (0, 0));
        }
        assert!(small > 300, "{small} small crops of 2000");
        assert!((850..1150).contains(&flips), "{flips}");
    }
}
