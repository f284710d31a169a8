//! CPU pooling: (n, c) planes split over the backend's threads.

use super::{Pool2d, Pool2dGeom};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, CpuCtx, host_slice, host_slice_mut};
use crate::error::Result;

impl Pool2d for CpuBackend {
    unsafe fn max_pool_forward_unchecked(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        max_forward(self.ctx(), g, host_slice(x), host_slice_mut(y));
        Ok(())
    }

    unsafe fn max_pool_backward_unchecked(
        &self,
        g: &Pool2dGeom,
        x: View<'_, Self>,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        max_backward(self.ctx(), g, host_slice(x), host_slice(y), host_slice(dy), host_slice_mut(dx));
        Ok(())
    }

    unsafe fn avg_pool_forward_unchecked(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        avg_forward(self.ctx(), g, host_slice(x), host_slice_mut(y));
        Ok(())
    }

    unsafe fn avg_pool_backward_unchecked(
        &self,
        g: &Pool2dGeom,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        avg_backward(self.ctx(), g, host_slice(dy), host_slice_mut(dx));
        Ok(())
    }
}

fn planes(ctx: CpuCtx<'_>, g: &Pool2dGeom) -> usize {
    ctx.groups(g.batch * g.channels)
}

/// Runs `f(plane_index, out_plane_chunk)` over groups of (n, c) planes of `out`.
fn over_planes(
    ctx: CpuCtx<'_>,
    g: &Pool2dGeom,
    out: &mut [f32],
    plane: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    let total = g.batch * g.channels;
    let ranges = crate::cpu::split_ranges(total, planes(ctx, g));
    let outs = crate::cpu::split_mut_by(out, &ranges, plane);
    let items: Vec<_> = ranges.into_iter().zip(outs).collect();
    ctx.for_each(items, |(r, o)| {
        for (i, p) in r.enumerate() {
            f(p, &mut o[i * plane..(i + 1) * plane]);
        }
    });
}

/// True for 2×2 windows with stride 2, no padding and every window inside the input
/// (LeNet-5's pooling): the fast paths below, which give the general loops' bits.
fn is_2x2(g: &Pool2dGeom) -> bool {
    (g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w) == (2, 2, 2, 2, 0, 0)
        && 2 * g.out_h() <= g.in_h
        && 2 * g.out_w() <= g.in_w
}

/// The general loop's running maximum: a NaN wins and stays, else the larger value.
#[inline(always)]
fn max_step(m: f32, v: f32) -> f32 {
    if v > m || v.is_nan() { v } else { m }
}

/// One output row of a 2×2 stride-2 max pool from input rows `r0` and `r1`, in the general
/// loop's order (`r0[2x], r0[2x+1], r1[2x], r1[2x+1]`): blocks of 8 and 4 outputs with AVX2
/// where the CPU has it (the multiversioned loop stayed scalar on the strided pairs: 5% of a
/// LeNet-5 step), the rest by the portable loop. The same bits either way.
fn max_row_2x2(out: &mut [f32], r0: &[f32], r1: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() {
        // SAFETY: the CPU has AVX2 (checked just now); the function bounds itself by the
        // slices' lengths.
        let done = unsafe { x86::max_row_2x2(out, r0, r1) };
        max_row_2x2_portable(&mut out[done..], &r0[2 * done..], &r1[2 * done..]);
        return;
    }
    max_row_2x2_portable(out, r0, r1);
}

/// The portable path of [`max_row_2x2`].
fn max_row_2x2_portable(out: &mut [f32], r0: &[f32], r1: &[f32]) {
    for (ox, o) in out.iter_mut().enumerate() {
        let m = max_step(f32::NEG_INFINITY, r0[2 * ox]);
        let m = max_step(m, r0[2 * ox + 1]);
        let m = max_step(m, r1[2 * ox]);
        *o = max_step(m, r1[2 * ox + 1]);
    }
}

crate::cpu::simd::multiversion! {
    /// One output row of the 2×2 stride-2 max-pool gradient: into input rows `d0`, `d1`
    /// (inputs `r0`, `r1`), the first maximum of each window in the general loop's order
    /// gets `0.0 + dy`, the others `0.0`.
    fn max_back_row_2x2 / max_back_row_2x2_portable(d0: &mut [f32], d1: &mut [f32], r0: &[f32], r1: &[f32], y: &[f32], dy: &[f32]) {
        for (ox, (&t, &g)) in y.iter().zip(dy).enumerate() {
            // Non-short-circuit `&` and selects: which element wins is data, and branches on
            // it mispredict half the time.
            let (e0, e1) = (is_max(r0[2 * ox], t), is_max(r0[2 * ox + 1], t));
            let (e2, e3) = (is_max(r1[2 * ox], t), is_max(r1[2 * ox + 1], t));
            let h1 = !e0 & e1;
            let h2 = !e0 & !e1 & e2;
            let h3 = !e0 & !e1 & !e2 & e3;
            let v = 0.0 + g;
            d0[2 * ox] = if e0 { v } else { 0.0 };
            d0[2 * ox + 1] = if h1 { v } else { 0.0 };
            d1[2 * ox] = if h2 { v } else { 0.0 };
            d1[2 * ox + 1] = if h3 { v } else { 0.0 };
        }
    }
}

/// [`max_back_row_2x2`], eight outputs at a time with AVX2 where the CPU has it (LLVM left the
/// portable loop's strided selects scalar: a tenth of a LeNet-5 iteration), the rest by the
/// portable loop. The same bits either way.
fn max_back_row(d0: &mut [f32], d1: &mut [f32], r0: &[f32], r1: &[f32], y: &[f32], dy: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() {
        // SAFETY: the CPU has AVX2 (checked just now); the function bounds itself by the
        // slices' lengths.
        let done = unsafe { x86::max_back_row_2x2(d0, d1, r0, r1, y, dy) };
        let (d0, d1, r0, r1) = (&mut d0[2 * done..], &mut d1[2 * done..], &r0[2 * done..], &r1[2 * done..]);
        max_back_row_2x2_portable(d0, d1, r0, r1, &y[done..], &dy[done..]);
        return;
    }
    max_back_row_2x2(d0, d1, r0, r1, y, dy);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::max_row_2x2_portable`] for the first multiple of four outputs (the number
    /// returned), with AVX2: the pairs' even and odd elements of 8 outputs split by two
    /// shuffles (which leave the 64-bit quarters in the order 0, 2, 1, 3, put back at the
    /// end), then `max_step` lane-wise (`v > m` or `v` NaN: take `v`). Same bits.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max_row_2x2(out: &mut [f32], r0: &[f32], r1: &[f32]) -> usize {
        let n = out.len().min(r0.len() / 2).min(r1.len() / 2);
        let step = |m: __m256, v: __m256| {
            let take = _mm256_or_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(v, m), _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            _mm256_blendv_ps(m, v, take)
        };
        let step4 = |m: __m128, v: __m128| {
            let take = _mm_or_ps(_mm_cmpgt_ps(v, m), _mm_cmpunord_ps(v, v));
            _mm_blendv_ps(m, v, take)
        };
        let mut ox = 0;
        while ox + 8 <= n {
            // SAFETY: 2·ox + 16 <= 2·n, within r0 and r1; ox + 8 <= n within out.
            unsafe {
                let (a0, a1) = (_mm256_loadu_ps(r0.as_ptr().add(2 * ox)), _mm256_loadu_ps(r0.as_ptr().add(2 * ox + 8)));
                let (b0, b1) = (_mm256_loadu_ps(r1.as_ptr().add(2 * ox)), _mm256_loadu_ps(r1.as_ptr().add(2 * ox + 8)));
                let m = step(_mm256_set1_ps(f32::NEG_INFINITY), _mm256_shuffle_ps::<0b10_00_10_00>(a0, a1));
                let m = step(m, _mm256_shuffle_ps::<0b11_01_11_01>(a0, a1));
                let m = step(m, _mm256_shuffle_ps::<0b10_00_10_00>(b0, b1));
                let m = step(m, _mm256_shuffle_ps::<0b11_01_11_01>(b0, b1));
                let m = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(m)));
                _mm256_storeu_ps(out.as_mut_ptr().add(ox), m);
            }
            ox += 8;
        }
        while ox + 4 <= n {
            // SAFETY: 2·ox + 8 <= 2·n, within r0 and r1; ox + 4 <= n within out.
            unsafe {
                let (a0, a1) = (_mm_loadu_ps(r0.as_ptr().add(2 * ox)), _mm_loadu_ps(r0.as_ptr().add(2 * ox + 4)));
                let (b0, b1) = (_mm_loadu_ps(r1.as_ptr().add(2 * ox)), _mm_loadu_ps(r1.as_ptr().add(2 * ox + 4)));
                let m = step4(_mm_set1_ps(f32::NEG_INFINITY), _mm_shuffle_ps::<0b10_00_10_00>(a0, a1));
                let m = step4(m, _mm_shuffle_ps::<0b11_01_11_01>(a0, a1));
                let m = step4(m, _mm_shuffle_ps::<0b10_00_10_00>(b0, b1));
                let m = step4(m, _mm_shuffle_ps::<0b11_01_11_01>(b0, b1));
                _mm_storeu_ps(out.as_mut_ptr().add(ox), m);
            }
            ox += 4;
        }
        ox
    }

    /// [`super::max_back_row_2x2_portable`] for the first multiple of four outputs (the
    /// number returned), with AVX2: each 8-lane block of an input row holds four windows'
    /// pairs, the kept maxima `y` and gradients `0.0 + dy` are duplicated into the pairs, and
    /// "first maximum" is "equal, and no earlier element of the window is". Same bits.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max_back_row_2x2(
        d0: &mut [f32],
        d1: &mut [f32],
        r0: &[f32],
        r1: &[f32],
        y: &[f32],
        dy: &[f32],
    ) -> usize {
        let n = y.len().min(dy.len()).min(r0.len() / 2).min(r1.len() / 2).min(d0.len() / 2).min(d1.len() / 2);
        let halves = [_mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)];
        let odd = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
        let zero = _mm256_setzero_ps();
        // Whether each element is the window's kept value, as `super::is_max` decides.
        let is_max = |v: __m256, t: __m256, t_nan: __m256| {
            _mm256_or_ps(
                _mm256_cmp_ps::<_CMP_EQ_OQ>(v, t),
                _mm256_and_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v), t_nan),
            )
        };
        let mut ox = 0;
        while ox + 4 <= n {
            // Eight outputs (two halves of four), or four at the end of the row.
            let (t, g, parts) = if ox + 8 <= n {
                // SAFETY: ox + 8 <= n <= y.len(), dy.len().
                unsafe { (_mm256_loadu_ps(y.as_ptr().add(ox)), _mm256_loadu_ps(dy.as_ptr().add(ox)), 2) }
            } else {
                // SAFETY: ox + 4 <= n; the upper lanes are never selected (first half only).
                unsafe {
                    let (t, g) = (_mm_loadu_ps(y.as_ptr().add(ox)), _mm_loadu_ps(dy.as_ptr().add(ox)));
                    (_mm256_castps128_ps256(t), _mm256_castps128_ps256(g), 1)
                }
            };
            let g = _mm256_add_ps(zero, g);
            let t_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(t, t);
            for (h, idx) in halves.iter().enumerate().take(parts) {
                let (th, nh, gh) = (
                    _mm256_permutevar8x32_ps(t, *idx),
                    _mm256_permutevar8x32_ps(t_nan, *idx),
                    _mm256_permutevar8x32_ps(g, *idx),
                );
                let at = 2 * ox + 8 * h;
                // SAFETY: at + 8 <= 2 * (ox + 4 * parts) <= 2 * n, within r0 and r1.
                let (a, b) = unsafe { (_mm256_loadu_ps(r0.as_ptr().add(at)), _mm256_loadu_ps(r1.as_ptr().add(at))) };
                let (ea, eb) = (is_max(a, th, nh), is_max(b, th, nh));
                // Each pair's elements swapped: the even element's mask in the odd lane.
                let (ea_sw, eb_sw) = (_mm256_permute_ps::<0b1011_0001>(ea), _mm256_permute_ps::<0b1011_0001>(eb));
                let m0 = _mm256_andnot_ps(_mm256_and_ps(ea_sw, odd), ea);
                let m1 = _mm256_andnot_ps(_mm256_or_ps(ea, ea_sw), _mm256_andnot_ps(_mm256_and_ps(eb_sw, odd), eb));
                // SAFETY: as the loads, within d0 and d1.
                unsafe {
                    _mm256_storeu_ps(d0.as_mut_ptr().add(at), _mm256_and_ps(m0, gh));
                    _mm256_storeu_ps(d1.as_mut_ptr().add(at), _mm256_and_ps(m1, gh));
                }
            }
            ox += 4 * parts;
        }
        ox
    }
}

/// Whether `v` is the value the forward pass kept (`target`), as the general loop compares.
#[inline(always)]
fn is_max(v: f32, target: f32) -> bool {
    (v == target) | (v.is_nan() & target.is_nan())
}

fn max_forward(ctx: CpuCtx<'_>, g: &Pool2dGeom, x: &[f32], y: &mut [f32]) {
    let (oh, ow, ih, iw) = (g.out_h(), g.out_w(), g.in_h, g.in_w);
    if is_2x2(g) {
        over_planes(ctx, g, y, oh * ow, |p, yp| {
            let xp = &x[p * ih * iw..(p + 1) * ih * iw];
            for (oy, out) in yp.chunks_exact_mut(ow).enumerate() {
                let r0 = &xp[2 * oy * iw..(2 * oy + 1) * iw];
                let r1 = &xp[(2 * oy + 1) * iw..(2 * oy + 2) * iw];
                max_row_2x2(out, r0, r1);
            }
        });
        return;
    }
    max_forward_general(ctx, g, x, y);
}

/// Max pooling forward for any geometry.
pub(crate) fn max_forward_general(ctx: CpuCtx<'_>, g: &Pool2dGeom, x: &[f32], y: &mut [f32]) {
    let (oh, ow, ih, iw) = (g.out_h(), g.out_w(), g.in_h, g.in_w);
    over_planes(ctx, g, y, oh * ow, |p, yp| {
        let xp = &x[p * ih * iw..(p + 1) * ih * iw];
        for oy in 0..oh {
            let (y0, y1) = Pool2dGeom::window(oy, g.kernel_h, g.stride_h, g.pad_h, ih);
            for ox in 0..ow {
                let (x0, x1) = Pool2dGeom::window(ox, g.kernel_w, g.stride_w, g.pad_w, iw);
                let mut m = f32::NEG_INFINITY;
                for iy in y0..y1 {
                    for &v in &xp[iy * iw + x0..iy * iw + x1] {
                        if v > m || v.is_nan() {
                            m = v;
                        }
                    }
                }
                yp[oy * ow + ox] = m;
            }
        }
    });
}

fn max_backward(ctx: CpuCtx<'_>, g: &Pool2dGeom, x: &[f32], y: &[f32], dy: &[f32], dx: &mut [f32]) {
    let (oh, ow, ih, iw) = (g.out_h(), g.out_w(), g.in_h, g.in_w);
    if is_2x2(g) {
        // Windows do not overlap: every input pixel of a window is written once (`0.0 + dy`
        // for the first maximum, as the general loop's `+=` into zeroes gives).
        over_planes(ctx, g, dx, ih * iw, |p, dxp| {
            if 2 * oh < ih || 2 * ow < iw {
                dxp.fill(0.0);
            }
            let xp = &x[p * ih * iw..(p + 1) * ih * iw];
            let (yp, dyp) = (&y[p * oh * ow..(p + 1) * oh * ow], &dy[p * oh * ow..(p + 1) * oh * ow]);
            for oy in 0..oh {
                let (d0, d1) = dxp[2 * oy * iw..(2 * oy + 2) * iw].split_at_mut(iw);
                let (r0, r1) = xp[2 * oy * iw..(2 * oy + 2) * iw].split_at(iw);
                let rows = (&yp[oy * ow..(oy + 1) * ow], &dyp[oy * ow..(oy + 1) * ow]);
                max_back_row(d0, d1, r0, r1, rows.0, rows.1);
            }
        });
        return;
    }
    max_backward_general(ctx, g, x, y, dy, dx);
}

/// Max pooling backward for any geometry.
pub(crate) fn max_backward_general(ctx: CpuCtx<'_>, g: &Pool2dGeom, x: &[f32], y: &[f32], dy: &[f32], dx: &mut [f32]) {
    let (oh, ow, ih, iw) = (g.out_h(), g.out_w(), g.in_h, g.in_w);
    over_planes(ctx, g, dx, ih * iw, |p, dxp| {
        dxp.fill(0.0);
        let xp = &x[p * ih * iw..(p + 1) * ih * iw];
        for oy in 0..oh {
            let (y0, y1) = Pool2dGeom::window(oy, g.kernel_h, g.stride_h, g.pad_h, ih);
            for ox in 0..ow {
                let (x0, x1) = Pool2dGeom::window(ox, g.kernel_w, g.stride_w, g.pad_w, iw);
                let o = p * oh * ow + oy * ow + ox;
                let target = y[o];
                // The first element equal to the forward maximum receives the gradient.
                'find: for iy in y0..y1 {
                    for ix in x0..x1 {
                        let v = xp[iy * iw + ix];
                        if is_max(v, target) {
                            dxp[iy * iw + ix] += dy[o];
                            break 'find;
                        }
                    }
                }
            }
        }
    });
}

fn avg_forward(ctx: CpuCtx<'_>, g: &Pool2dGeom, x: &[f32], y: &mut [f32]) {
    let (oh, ow, ih, iw) = (g.out_h(), g.out_w(), g.in_h, g.in_w);
    over_planes(ctx, g, y, oh * ow, |p, yp| {
        let xp = &x[p * ih * iw..(p + 1) * ih * iw];
        for oy in 0..oh {
            let (y0, y1) = Pool2dGeom::window(oy, g.kernel_h, g.stride_h, g.pad_h, ih);
            for ox in 0..ow {
                let (x0, x1) = Pool2dGeom::window(ox, g.kernel_w, g.stride_w, g.pad_w, iw);
                let mut s = 0.0f32;
                for iy in y0..y1 {
                    s += xp[iy * iw + x0..iy * iw + x1].iter().sum::<f32>();
                }
                yp[oy * ow + ox] = s / ((y1 - y0) * (x1 - x0)) as f32;
            }
        }
    });
}

fn avg_backward(ctx: CpuCtx<'_>, g: &Pool2dGeom, dy: &[f32], dx: &mut [f32]) {
    let (oh, ow, ih, iw) = (g.out_h(), g.out_w(), g.in_h, g.in_w);
    over_planes(ctx, g, dx, ih * iw, |p, dxp| {
        dxp.fill(0.0);
        for oy in 0..oh {
            let (y0, y1) = Pool2dGeom::window(oy, g.kernel_h, g.stride_h, g.pad_h, ih);
            for ox in 0..ow {
                let (x0, x1) = Pool2dGeom::window(ox, g.kernel_w, g.stride_w, g.pad_w, iw);
                let v = dy[p * oh * ow + oy * ow + ox] / ((y1 - y0) * (x1 - x0)) as f32;
                for iy in y0..y1 {
                    for d in &mut dxp[iy * iw + x0..iy * iw + x1] {
                        *d += v;
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::random_vec;

    /// The 2×2 stride-2 fast paths give the general loops' bits, forward and backward, on
    /// even and odd sizes, with ties (repeated values) and NaNs in the input, and the forward
    /// row's AVX2 and portable paths agree.
    #[test]
    fn max_pool_2x2_fast_paths_equal_the_general_loops() {
        for (ih, iw, seed) in [(24, 24, 1u64), (8, 8, 2), (7, 9, 3), (2, 2, 4), (5, 16, 5), (6, 41, 6), (4, 64, 7), (4, 30, 8), (3, 6, 9)] {
            let g = Pool2dGeom::square(2, 3, (ih, iw), 2, 2, 0);
            assert!(is_2x2(&g), "{g:?}");
            let mut x = random_vec(seed, g.input_len(), 1.0);
            // Ties and NaNs: quantise, and poison a few entries.
            for v in x.iter_mut() {
                *v = (*v * 2.0).round();
            }
            for i in (0..x.len()).step_by(13) {
                x[i] = f32::NAN;
            }
            let dy = random_vec(seed ^ 3, g.output_len(), 1.0);
            let be = CpuBackend::new(0);
            let ctx = be.ctx();
            let (mut ya, mut yb) = (vec![f32::NAN; g.output_len()], vec![f32::NAN; g.output_len()]);
            max_forward(ctx, &g, &x, &mut ya);
            max_forward_general(ctx, &g, &x, &mut yb);
            assert_eq!(ya.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), yb.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "forward {g:?}");
            let (mut da, mut db) = (vec![f32::NAN; g.input_len()], vec![f32::NAN; g.input_len()]);
            max_backward(ctx, &g, &x, &yb, &dy, &mut da);
            max_backward_general(ctx, &g, &x, &yb, &dy, &mut db);
            assert_eq!(da.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), db.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "backward {g:?}");
            let (ow, r0, r1) = (g.out_w(), &x[..iw], &x[iw..2 * iw]);
            let (mut a, mut b) = (vec![0.0; ow], vec![0.0; ow]);
            max_row_2x2(&mut a, r0, r1);
            max_row_2x2_portable(&mut b, r0, r1);
            assert_eq!(a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), b.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            // The backward row: the AVX2 blocks and the portable loop, bit for bit (negative
            // zeros and NaNs among the gradients too).
            let (yr, mut dyr) = (&yb[..ow], dy[..ow].to_vec());
            dyr[0] = -0.0;
            dyr[ow - 1] = f32::NAN;
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let (mut a0, mut a1, mut b0, mut b1) = (vec![7.0; iw], vec![7.0; iw], vec![7.0; iw], vec![7.0; iw]);
            max_back_row(&mut a0, &mut a1, r0, r1, yr, &dyr);
            max_back_row_2x2_portable(&mut b0, &mut b1, r0, r1, yr, &dyr);
            assert_eq!((bits(&a0), bits(&a1)), (bits(&b0), bits(&b1)), "backward row {g:?}");
        }
    }
}
