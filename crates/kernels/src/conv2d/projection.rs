//! The forward and backward-data passes of a strided 1×1 convolution without padding (the
//! projection shortcut of a ResNet's downsampling block) by the direct kernels.
//!
//! A 1×1 kernel with stride `s` reads one input pixel in `s²`: the forward pass is a pointwise
//! (1×1, stride-1) convolution of the subsampled image, `x[c, s·oy, s·ox]`, gathered into
//! the layout of [`Direct`]'s padded copy; the backward-data pass is the pointwise
//! convolution of `dy` with the transposed weights, scattered back into those pixels of `dx`
//! (the others get no gradient: zero). Both run the padded [`Direct`] kernels of this CPU;
//! im2col + GEMM ran these layers at 19–27% of the AVX2 peak, its GEMMs having 16 or 32 as
//! their inner dimension. The weight gradient, `dW[co, c] = Σ_p dy[co, p] · xs[c, p]` over
//! the subsampled image `xs`, is a product along the pixels, which are contiguous in both
//! operands: [`Projection::accumulate_dw`] holds 3 × 3 `(co, c)` sums of 8 pixel lanes each,
//! reduced once per image (the general weight-gradient kernel copied and transposed the
//! whole image to read a quarter of it: 14–16% of the peak).
//!
//! The forward and backward-data sums run over the channels in order, as in the GEMM; a
//! weight-gradient sum per image over 8 interleaved pixel lanes, then the lanes, then the
//! pixels past the last whole vector, then added to the image's predecessors in order.

use super::Conv2dGeom;
use super::direct::Direct;
use crate::cpu::{CpuCtx, chunks_mut_n, split_mut_by, split_ranges};

/// A strided 1×1 convolution's forward (`fwd`: input channels into output channels over the
/// subsampled image) and backward-data (`bwd`: the reverse over `dy`) direct convolutions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Projection {
    fwd: Direct,
    bwd: Direct,
    s: usize,
}

/// A pointwise direct convolution of `c` channels into `co` over `h × w` pixels, where a
/// padded kernel runs on this CPU.
fn pointwise(c: usize, co: usize, h: usize, w: usize) -> Option<Direct> {
    let d = Direct { c, h, w, co, kh: 1, kw: 1, ph: 0, pw: 0, s: 1, eh: 0, ew: 0, pad_to: (0, 0) };
    (d.ow() >= 8 && d.padded_rows().is_some()).then_some(d)
}

impl Projection {
    /// The direct passes of `g`: a 1×1 kernel, no padding, the same stride of at least 2
    /// along both axes, output rows at least 8 pixels wide with a padded direct kernel on
    /// this CPU; else `None` (im2col + GEMM).
    pub(crate) fn of(g: &Conv2dGeom) -> Option<Projection> {
        let s = g.stride_h;
        if (g.kernel_h, g.kernel_w, g.pad_h, g.pad_w) != (1, 1, 0, 0) || s < 2 || g.stride_w != s {
            return None;
        }
        if !super::direct::has_kernel() {
            return None;
        }
        let (oh, ow) = (g.out_h(), g.out_w());
        let fwd = pointwise(g.in_channels, g.out_channels, oh, ow)?;
        let bwd = pointwise(g.out_channels, g.in_channels, oh, ow)?;
        Some(Projection { fwd, bwd, s })
    }

    /// Floats of one padded copy of `d`'s source.
    fn copy_len(d: &Direct) -> usize {
        let (hp, pitch) = d.padded_dims();
        d.c * hp * pitch
    }

    /// Workspace floats of [`Projection::forward`] with `groups` thread groups: the packed
    /// weights and a subsampled copy per group.
    pub(crate) fn forward_len(&self, groups: usize) -> usize {
        self.fwd.packed_len() + groups * Self::copy_len(&self.fwd)
    }

    /// Workspace floats of [`Projection::backward_data`]: the packed weights, and per group
    /// a padded copy of `dy` and the gradient of the subsampled pixels.
    pub(crate) fn backward_data_len(&self, groups: usize) -> usize {
        let out = self.bwd.co * self.bwd.oh() * self.bwd.ow();
        self.bwd.packed_len() + groups * (Self::copy_len(&self.bwd) + out)
    }

    /// Floats of one image's subsampled copy for [`Projection::accumulate_dw`].
    pub(crate) fn subsampled_len(&self) -> usize {
        self.fwd.c * self.fwd.oh() * self.fwd.ow()
    }

    /// Gathers the pixels one image `xi[c, h, w]` of `g` shows the kernel into
    /// `xs[c, oh·ow]` (contiguous rows, no padding).
    pub(crate) fn subsample(&self, g: &Conv2dGeom, xi: &[f32], xs: &mut [f32]) {
        let (oh, ow) = (self.fwd.oh(), self.fwd.ow());
        for (c, plane) in xs[..self.subsampled_len()].chunks_exact_mut(oh * ow).enumerate() {
            for (oy, row) in plane.chunks_exact_mut(ow).enumerate() {
                let src = &xi[(c * g.in_h + self.s * oy) * g.in_w..][..g.in_w];
                for (v, s) in row.iter_mut().zip(src.iter().step_by(self.s)) {
                    *v = *s;
                }
            }
        }
    }

    /// `dw[o, c] += Σ_p dy[o, p] · xs[c, p]` for one image: `dy` `[co, p]`, `xs` `[c, p]`
    /// from [`Projection::subsample`], `dw` `[co, c]`.
    pub(crate) fn accumulate_dw(&self, dy: &[f32], xs: &[f32], dw: &mut [f32]) {
        let (co, c, p) = (self.fwd.co, self.fwd.c, self.fwd.oh() * self.fwd.ow());
        assert!(dy.len() >= co * p && xs.len() >= c * p && dw.len() >= co * c, "projection dW: short operands");
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::simd::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA; the lengths are asserted above.
            unsafe { x86::accumulate_dw_avx2(co, c, p, dy, xs, dw) };
            return;
        }
        unreachable!("a Projection is only made where a direct kernel runs (AVX2 at least)")
    }

    /// `y = ` the convolution of `x` with `params` (`[c_out, c_in]` weights, then the bias
    /// where `g` has one).
    pub(crate) fn forward(&self, ctx: CpuCtx<'_>, g: &Conv2dGeom, x: &[f32], params: &[f32], y: &mut [f32], ws: &mut [f32]) {
        let d = &self.fwd;
        let (in_img, out_img) = (g.in_channels * g.in_h * g.in_w, g.output_len() / g.batch);
        let (w, bias) = params.split_at(g.weight_len());
        let bias = g.bias.then_some(bias);
        let ci = g.in_channels;
        let (wp, rest) = ws.split_at_mut(d.packed_len());
        d.pack(|o, c, _| w[o * ci + c], wp);
        let wp = &*wp;
        let groups = ctx.groups(g.batch);
        let ranges = split_ranges(g.batch, groups);
        let ys = split_mut_by(y, &ranges, out_img);
        let copies = chunks_mut_n(rest, groups, Self::copy_len(d));
        let items: Vec<_> = ranges.into_iter().zip(ys).zip(copies).collect();
        let (hp, pitch) = d.padded_dims();
        ctx.for_each(items, |((r, yg), xs)| {
            // Columns past `ow` (ragged rows) stay zero: each image rewrites only the pixels.
            xs.fill(0.0);
            for (i, n) in r.enumerate() {
                let xi = &x[n * in_img..(n + 1) * in_img];
                for c in 0..ci {
                    for oy in 0..d.oh() {
                        let src = &xi[(c * g.in_h + self.s * oy) * g.in_w..][..g.in_w];
                        let dst = &mut xs[(c * hp + oy) * pitch..][..d.ow()];
                        for (v, s) in dst.iter_mut().zip(src.iter().step_by(self.s)) {
                            *v = *s;
                        }
                    }
                }
                d.run_on_copy(xs, wp, bias, &mut yg[i * out_img..(i + 1) * out_img]);
            }
        });
    }

    /// `dx = ` the input gradient of `g` for `dy`, with the weights `w` (`[c_out, c_in]`).
    pub(crate) fn backward_data(&self, ctx: CpuCtx<'_>, g: &Conv2dGeom, dy: &[f32], w: &[f32], dx: &mut [f32], ws: &mut [f32]) {
        let d = &self.bwd;
        let (in_img, out_img) = (g.in_channels * g.in_h * g.in_w, g.output_len() / g.batch);
        let ci = g.in_channels;
        let (wp, rest) = ws.split_at_mut(d.packed_len());
        // Direct's output channel `o` is dx's channel, its input channel `c` is dy's.
        d.pack(|o, c, _| w[c * ci + o], wp);
        let wp = &*wp;
        let groups = ctx.groups(g.batch);
        let ranges = split_ranges(g.batch, groups);
        let dxs = split_mut_by(dx, &ranges, in_img);
        let copy = Self::copy_len(d);
        let bufs = chunks_mut_n(rest, groups, copy + ci * d.oh() * d.ow());
        let items: Vec<_> = ranges.into_iter().zip(dxs).zip(bufs).collect();
        let (oh, ow) = (d.oh(), d.ow());
        ctx.for_each(items, |((r, dxg), buf)| {
            buf.fill(0.0);
            let (dyp, out) = buf.split_at_mut(copy);
            for (i, n) in r.enumerate() {
                d.pad_into(&dy[n * out_img..(n + 1) * out_img], dyp);
                d.run_on_copy(dyp, wp, None, out);
                let dxi = &mut dxg[i * in_img..(i + 1) * in_img];
                dxi.fill(0.0);
                for (c, plane) in out.chunks_exact(oh * ow).enumerate() {
                    for (oy, row) in plane.chunks_exact(ow).enumerate() {
                        let line = &mut dxi[(c * g.in_h + self.s * oy) * g.in_w..][..g.in_w];
                        for (v, s) in line.iter_mut().step_by(self.s).zip(row) {
                            *v = *s;
                        }
                    }
                }
            }
        });
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

    /// The ResNet projections (16 → 32 channels at 32 → 16 pixels, 32 → 64 at 16 → 8) take the
    /// direct passes where the CPU has a kernel; a padded, a 3×3 or a stride-1 1×1 does not.
    #[test]
    fn only_unpadded_strided_pointwise_convolutions_are_projections() {
        let proj = |c, hw, co, k, s, p| Projection::of(&Conv2dGeom::square(2, c, (hw, hw), co, k, s, p, false));
        if !super::super::direct::has_kernel() {
            return eprintln!("skipped: no direct kernel on this CPU");
        }
        assert!(proj(16, 32, 32, 1, 2, 0).is_some());
        assert!(proj(32, 16, 64, 1, 2, 0).is_some());
        assert!(proj(16, 32, 32, 1, 2, 1).is_none());
        assert!(proj(16, 32, 32, 3, 2, 1).is_none());
        assert!(proj(16, 32, 32, 1, 1, 0).is_none());
    }
}
