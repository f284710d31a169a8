//! Small rasterisation helpers shared by the synthetic datasets.
//!
//! Everything here is plain IEEE arithmetic (`+ - * /`, `sqrt`, which Rust never fuses or
//! reorders), so a given seed renders bit-identical images on every platform: in particular
//! sine and cosine are computed by [`sin_cos`] below rather than by the platform's libm.

use crossbow_tensor::Rng;

/// `(sin x, cos x)` from range reduction and Taylor series in `f64` (error < 1e-9 for any `x`
/// that is a few thousand radians or less), platform-independent.
pub(crate) fn sin_cos(x: f32) -> (f32, f32) {
    use std::f64::consts::{FRAC_PI_2, PI};
    let x = x as f64;
    let two_pi = 2.0 * PI;
    let k = (x / two_pi).round();
    let mut r = x - k * two_pi; // [-pi, pi]
    // Fold into [-pi/2, pi/2]: sin(pi - r) = sin r, cos(pi - r) = -cos r.
    let mut cos_sign = 1.0;
    if r > FRAC_PI_2 {
        r = PI - r;
        cos_sign = -1.0;
    } else if r < -FRAC_PI_2 {
        r = -PI - r;
        cos_sign = -1.0;
    }
    let r2 = r * r;
    // Horner forms of the Taylor series up to r^17 / r^18.
    let mut s = 1.0;
    let mut c = 1.0;
    let mut k_s = 17.0f64;
    while k_s > 1.0 {
        s = 1.0 - r2 / (k_s * (k_s - 1.0)) * s;
        k_s -= 2.0;
    }
    let mut k_c = 18.0f64;
    while k_c > 0.0 {
        c = 1.0 - r2 / (k_c * (k_c - 1.0)) * c;
        k_c -= 2.0;
    }
    ((r * s) as f32, (cos_sign * c) as f32)
}

/// Fast per-pixel noise: SplitMix64 seeded from the image's own stream (a ChaCha draw per pixel
/// would dominate the rendering time). Each `u64` gives two triangular samples.
pub(crate) struct Noise {
    state: u64,
    spare: Option<f32>,
}

impl Noise {
    pub(crate) fn new(rng: &mut Rng) -> Self {
        Noise { state: rng.next_u64(), spare: None }
    }

    /// A triangular-distributed value in `(-1, 1)` with standard deviation [`TRI_NOISE_STD`].
    #[inline]
    pub(crate) fn next(&mut self) -> f32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        self.spare = Some(tri_noise((z >> 32) as u32));
        tri_noise(z as u32)
    }
}

/// A triangular-distributed noise value in `(-1, 1)` (variance 1/6) from one `u32`.
#[inline]
pub(crate) fn tri_noise(bits: u32) -> f32 {
    let a = (bits & 0xffff) as f32;
    let b = (bits >> 16) as f32;
    (a + b) * (1.0 / 65536.0) - 1.0
}

/// Standard deviation of [`tri_noise`].
pub(crate) const TRI_NOISE_STD: f32 = 0.408_248_3;

/// Uniform in `[lo, hi)`.
#[inline]
pub(crate) fn uniform(rng: &mut Rng, lo: f32, hi: f32) -> f32 {
    rng.uniform_range(lo, hi)
}

/// Squared distance from `(px, py)` to the segment `a`–`b`.
#[inline]
pub(crate) fn dist2_to_segment(px: f32, py: f32, a: [f32; 2], b: [f32; 2]) -> f32 {
    let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
    let (wx, wy) = (px - a[0], py - a[1]);
    let len2 = dx * dx + dy * dy;
    let t = if len2 > 0.0 { ((wx * dx + wy * dy) / len2).clamp(0.0, 1.0) } else { 0.0 };
    let (ex, ey) = (wx - t * dx, wy - t * dy);
    ex * ex + ey * ey
}

/// Lowers `dmin2[y * w + x]` to the squared distance from each pixel centre within `reach`
/// pixels of segment `a`–`b`.
pub(crate) fn splat_segment(dmin2: &mut [f32], w: usize, h: usize, a: [f32; 2], b: [f32; 2], reach: f32) {
    let x0 = (a[0].min(b[0]) - reach).floor().max(0.0) as usize;
    let x1 = ((a[0].max(b[0]) + reach).ceil().max(0.0) as usize).min(w);
    let y0 = (a[1].min(b[1]) - reach).floor().max(0.0) as usize;
    let y1 = ((a[1].max(b[1]) + reach).ceil().max(0.0) as usize).min(h);
    for y in y0..y1 {
        let py = y as f32 + 0.5;
        let row = &mut dmin2[y * w..(y + 1) * w];
        for (x, d) in row.iter_mut().enumerate().take(x1).skip(x0) {
            let d2 = dist2_to_segment(x as f32 + 0.5, py, a, b);
            if d2 < *d {
                *d = d2;
            }
        }
    }
}

/// Converts a value in `[0, 1]` (clamped) to a byte, rounding to nearest.
#[inline]
pub(crate) fn to_u8(v: f32) -> u8 {
    (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sin_cos_matches_std() {
        let mut x = -20.0f32;
        while x < 20.0 {
            let (s, c) = sin_cos(x);
            assert!((s - x.sin()).abs() < 1e-6, "sin {x}: {s} vs {}", x.sin());
            assert!((c - x.cos()).abs() < 1e-6, "cos {x}: {c} vs {}", x.cos());
            x += 0.0137;
        }
    }

    #[test]
    fn tri_noise_range_and_moments() {
        let mut noise = Noise::new(&mut Rng::new(5));
        let n = 100_000;
        let (mut s, mut s2) = (0.0f64, 0.0f64);
        for _ in 0..n {
            let v = noise.next();
            assert!((-1.0..1.0).contains(&v));
            s += v as f64;
            s2 += (v as f64).powi(2);
        }
        let mean = s / n as f64;
        let sd = (s2 / n as f64 - mean * mean).sqrt();
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((sd - TRI_NOISE_STD as f64).abs() < 0.01, "{sd}");
    }
}
