//! The weight gradient of a strided 1×1 convolution without padding (the projection
//! shortcut of a ResNet's downsampling block).
//!
//! A 1×1 kernel with stride `s` reads one input pixel in `s²`, so its weight gradient is
//! `dW[co, c] = Σ_p dy[co, p] · xs[c, p]` over the subsampled image `xs[c, oy·ow + ox] =
//! x[c, s·oy, s·ox]`: a product along the pixels, which are contiguous in both operands.
//! [`Projection::accumulate_dw`] holds 3 × 3 `(co, c)` sums of 8 pixel lanes each, reduced
//! once per image. The general weight-gradient kernel ([`super::direct::ParamsDirect`]) copied
//! and transposed the whole image to read a quarter of it (14–16% of the AVX2 peak).
//!
//! The forward and backward-data passes stay with im2col + GEMM: run as pointwise direct
//! convolutions of the subsampled image they measured no faster (0.67–1.02× on the Zen 3;
//! the gather, not the product, is most of their time).
//!
//! Each sum runs per image over 8 interleaved pixel lanes, then the lanes, then the pixels
//! past the last whole vector, and is then added to the sums of the images before it.

use super::Conv2dGeom;

/// A strided 1×1 convolution's geometry as its weight gradient sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Projection {
    c: usize,
    co: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    s: usize,
}

impl Projection {
    /// `g` as a projection: a 1×1 kernel, no padding, the same stride of at least 2 along both
    /// axes, on a CPU with AVX2; else `None`.
    pub(crate) fn of(g: &Conv2dGeom) -> Option<Projection> {
        let s = g.stride_h;
        if (g.kernel_h, g.kernel_w, g.pad_h, g.pad_w) != (1, 1, 0, 0) || s < 2 || g.stride_w != s {
            return None;
        }
        crate::cpu::simd::has_avx2().then_some(Projection {
            c: g.in_channels,
            co: g.out_channels,
            h: g.in_h,
            w: g.in_w,
            oh: g.out_h(),
            ow: g.out_w(),
            s,
        })
    }

    /// Floats of one image's subsampled copy.
    pub(crate) fn subsampled_len(&self) -> usize {
        self.c * self.oh * self.ow
    }

    /// Gathers the pixels the kernel reads of one image `xi[c, h, w]` into `xs[c, oh·ow]`.
    pub(crate) fn subsample(&self, xi: &[f32], xs: &mut [f32]) {
        let (oh, ow) = (self.oh, self.ow);
        for (c, plane) in xs[..self.subsampled_len()].chunks_exact_mut(oh * ow).enumerate() {
            for (oy, row) in plane.chunks_exact_mut(ow).enumerate() {
                let src = &xi[(c * self.h + self.s * oy) * self.w..][..self.w];
                for (v, s) in row.iter_mut().zip(src.iter().step_by(self.s)) {
                    *v = *s;
                }
            }
        }
    }

    /// `dw[o, c] += Σ_p dy[o, p] · xs[c, p]` for one image: `dy` `[co, p]`, `xs` `[c, p]`
    /// from [`Projection::subsample`], `dw` `[co, c]`.
    pub(crate) fn accumulate_dw(&self, dy: &[f32], xs: &[f32], dw: &mut [f32]) {
        let (co, c, p) = (self.co, self.c, self.oh * self.ow);
        assert!(dy.len() >= co * p && xs.len() >= c * p && dw.len() >= co * c, "projection dW: short operands");
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::simd::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA; the lengths are asserted above.
            unsafe { x86::accumulate_dw_avx2(co, c, p, dy, xs, dw) };
            return;
        }
        unreachable!("a Projection is only made where the CPU has AVX2")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Output channels × input channels per tile of [`accumulate_dw_avx2`]: 9 accumulators,
    /// the 3 vectors of `xs` and one of `dy` (13 of the 16 registers); per 8 pixels 6 loads
    /// feed 9 FMAs.
    const T: usize = 3;

    /// [`super::Projection::accumulate_dw`] with AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `dy` holds `co·p`, `xs` `c·p` and `dw` `co·c` floats.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn accumulate_dw_avx2(co: usize, c: usize, p: usize, dy: &[f32], xs: &[f32], dw: &mut [f32]) {
        // SAFETY: as this function's contract; each tile stays below `co` and `c`.
        unsafe {
            for o0 in (0..co).step_by(T) {
                for c0 in (0..c).step_by(T) {
                    match ((co - o0).min(T), (c - c0).min(T)) {
                        (3, 3) => tile::<3, 3>(c, p, dy, xs, dw, o0, c0),
                        (3, 2) => tile::<3, 2>(c, p, dy, xs, dw, o0, c0),
                        (3, _) => tile::<3, 1>(c, p, dy, xs, dw, o0, c0),
                        (2, 3) => tile::<2, 3>(c, p, dy, xs, dw, o0, c0),
                        (2, 2) => tile::<2, 2>(c, p, dy, xs, dw, o0, c0),
                        (2, _) => tile::<2, 1>(c, p, dy, xs, dw, o0, c0),
                        (_, 3) => tile::<1, 3>(c, p, dy, xs, dw, o0, c0),
                        (_, 2) => tile::<1, 2>(c, p, dy, xs, dw, o0, c0),
                        (_, _) => tile::<1, 1>(c, p, dy, xs, dw, o0, c0),
                    }
                }
            }
        }
    }

    /// The `RO × RC` sums from output channel `o0` and input channel `c0`.
    ///
    /// # Safety
    /// As [`accumulate_dw_avx2`]; `o0 + RO <= co`, `c0 + RC <= c`.
    #[inline(always)]
    unsafe fn tile<const RO: usize, const RC: usize>(
        c: usize,
        p: usize,
        dy: &[f32],
        xs: &[f32],
        dw: &mut [f32],
        o0: usize,
        c0: usize,
    ) {
        // SAFETY: rows o0 + i < co of dy and c0 + j < c of xs hold p floats each; the
        // vectors read pixels below p / 8 · 8.
        unsafe {
            let pv = p / 8 * 8;
            let (d, x) = (dy.as_ptr().add(o0 * p), xs.as_ptr().add(c0 * p));
            let mut acc = [[_mm256_setzero_ps(); RC]; RO];
            for q in (0..pv).step_by(8) {
                let xv: [__m256; RC] = std::array::from_fn(|j| _mm256_loadu_ps(x.add(j * p + q)));
                for (i, ai) in acc.iter_mut().enumerate() {
                    let dv = _mm256_loadu_ps(d.add(i * p + q));
                    for (a, xj) in ai.iter_mut().zip(&xv) {
                        *a = _mm256_fmadd_ps(dv, *xj, *a);
                    }
                }
            }
            for (i, ai) in acc.iter().enumerate() {
                for (j, a) in ai.iter().enumerate() {
                    let mut sum = hsum(*a);
                    for q in pv..p {
                        sum += *d.add(i * p + q) * *x.add(j * p + q);
                    }
                    *dw.get_unchecked_mut((o0 + i) * c + c0 + j) += sum;
                }
            }
        }
    }

    /// The sum of a vector's 8 lanes.
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        // SAFETY: the caller runs with AVX enabled.
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<0x55>(s, s)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ResNet projections (16 → 32 channels at 32 → 16 pixels, 32 → 64 at 16 → 8) take
    /// this weight gradient where the CPU has AVX2; a padded, a 3×3 or a stride-1 1×1 does not.
    #[test]
    fn only_unpadded_strided_pointwise_convolutions_are_projections() {
        let proj = |c, hw, co, k, s, p| Projection::of(&Conv2dGeom::square(2, c, (hw, hw), co, k, s, p, false));
        if !crate::cpu::simd::has_avx2() {
            return eprintln!("skipped: no AVX2 on this CPU");
        }
        assert!(proj(16, 32, 32, 1, 2, 0).is_some());
        assert!(proj(32, 16, 64, 1, 2, 0).is_some());
        assert!(proj(16, 32, 32, 1, 2, 1).is_none());
        assert!(proj(16, 32, 32, 3, 2, 1).is_none());
        assert!(proj(16, 32, 32, 1, 1, 0).is_none());
    }
}
