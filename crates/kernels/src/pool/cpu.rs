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

/// One plane of a 2×2 stride-2 max pool: output rows of `ow` from pairs of input rows of
/// `iw`, each output from `r0[2x], r0[2x+1], r1[2x], r1[2x+1]` in the general loop's order.
/// Whole rows in AVX2 blocks of 8 where the CPU has it, the row's last block masked (LeNet-5's
/// rows of 14 and 5 outputs left a scalar tail that cost as much as the blocks), else the
/// portable loop. The same bits either way.
fn max_plane_2x2(yp: &mut [f32], xp: &[f32], ow: usize, iw: usize) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() {
        // SAFETY: the CPU has AVX2 (checked just now); the function bounds itself by the
        // slices' lengths.
        unsafe { x86::max_plane_2x2(yp, xp, ow, iw) };
        return;
    }
    max_plane_2x2_portable(yp, xp, ow, iw);
}

/// The portable path of [`max_plane_2x2`].
fn max_plane_2x2_portable(yp: &mut [f32], xp: &[f32], ow: usize, iw: usize) {
    for (oy, out) in yp.chunks_exact_mut(ow).enumerate() {
        let (r0, r1) = xp[2 * oy * iw..(2 * oy + 2) * iw].split_at(iw);
        for (ox, o) in out.iter_mut().enumerate() {
            let m = max_step(f32::NEG_INFINITY, r0[2 * ox]);
            let m = max_step(m, r0[2 * ox + 1]);
            let m = max_step(m, r1[2 * ox]);
            *o = max_step(m, r1[2 * ox + 1]);
        }
    }
}

/// One plane of the 2×2 stride-2 max-pool gradient: into each pair of input-gradient rows
/// (inputs `r0`, `r1`), the first maximum of each window in the general loop's order gets
/// `0.0 + dy`, the others `0.0`; columns past `2·ow` are left alone. AVX2 blocks of 8
/// outputs where the CPU has it, the row's last block masked, else the portable loop. The
/// same bits either way.
fn max_back_plane_2x2(dxp: &mut [f32], xp: &[f32], yp: &[f32], dyp: &[f32], ow: usize, iw: usize) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() {
        // SAFETY: the CPU has AVX2 (checked just now); the function bounds itself by the
        // slices' lengths.
        unsafe { x86::max_back_plane_2x2(dxp, xp, yp, dyp, ow, iw) };
        return;
    }
    max_back_plane_2x2_portable(dxp, xp, yp, dyp, ow, iw);
}

/// The portable path of [`max_back_plane_2x2`].
fn max_back_plane_2x2_portable(dxp: &mut [f32], xp: &[f32], yp: &[f32], dyp: &[f32], ow: usize, iw: usize) {
    for (oy, (y, dy)) in yp.chunks_exact(ow).zip(dyp.chunks_exact(ow)).enumerate() {
        let (d0, d1) = dxp[2 * oy * iw..(2 * oy + 2) * iw].split_at_mut(iw);
        let (r0, r1) = xp[2 * oy * iw..(2 * oy + 2) * iw].split_at(iw);
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// The lanes below `k` (clamped to 0..=8) set: the mask of a block's first `k` floats.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn lanes_below(k: usize) -> __m256i {
        _mm256_cmpgt_epi32(_mm256_set1_epi32(k.min(8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
    }

    /// The 8 floats at `p`, or the first `k` of them (the others 0.0, nothing read past them)
    /// when `k < 8`.
    ///
    /// # Safety
    /// The CPU has AVX2; `min(k, 8)` floats from `p` are readable.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load(p: *const f32, k: usize) -> __m256 {
        // SAFETY: the caller's contract; a masked load reads only the set lanes.
        unsafe { if k >= 8 { _mm256_loadu_ps(p) } else { _mm256_maskload_ps(p, lanes_below(k)) } }
    }

    /// Stores the first `min(k, 8)` lanes of `v` at `p`.
    ///
    /// # Safety
    /// The CPU has AVX2; `min(k, 8)` floats from `p` are writable.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store(p: *mut f32, k: usize, v: __m256) {
        // SAFETY: the caller's contract; a masked store writes only the set lanes.
        unsafe {
            if k >= 8 {
                _mm256_storeu_ps(p, v)
            } else {
                _mm256_maskstore_ps(p, lanes_below(k), v)
            }
        }
    }

    /// [`super::max_plane_2x2_portable`] with AVX2: per block of 8 outputs the pairs' even
    /// and odd elements split by two shuffles (which leave the 64-bit quarters in the order
    /// 0, 2, 1, 3, put back at the end), then `max_step` lane-wise (`v > m` or `v` NaN: take
    /// `v`); a row's last block loads and stores only its own lanes. Same bits.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max_plane_2x2(yp: &mut [f32], xp: &[f32], ow: usize, iw: usize) {
        let step = |m: __m256, v: __m256| {
            let take = _mm256_or_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(v, m), _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            _mm256_blendv_ps(m, v, take)
        };
        for (oy, out) in yp.chunks_exact_mut(ow).enumerate() {
            let (r0, r1) = xp[2 * oy * iw..(2 * oy + 2) * iw].split_at(iw);
            let n = out.len().min(r0.len() / 2).min(r1.len() / 2);
            let mut ox = 0;
            while ox < n {
                let k = 2 * (n - ox);
                let (p0, p1) = (r0.as_ptr().wrapping_add(2 * ox), r1.as_ptr().wrapping_add(2 * ox));
                // SAFETY: `load` reads min(k, 8) and min(k - 8, 8) floats from 2·ox and
                // 2·ox + 8, all below 2·n, within r0 and r1; the store writes min(n - ox, 8)
                // floats from ox, within out.
                unsafe {
                    let (a0, a1) = (load(p0, k), load(p0.wrapping_add(8), k.saturating_sub(8)));
                    let (b0, b1) = (load(p1, k), load(p1.wrapping_add(8), k.saturating_sub(8)));
                    let m = step(_mm256_set1_ps(f32::NEG_INFINITY), _mm256_shuffle_ps::<0b10_00_10_00>(a0, a1));
                    let m = step(m, _mm256_shuffle_ps::<0b11_01_11_01>(a0, a1));
                    let m = step(m, _mm256_shuffle_ps::<0b10_00_10_00>(b0, b1));
                    let m = step(m, _mm256_shuffle_ps::<0b11_01_11_01>(b0, b1));
                    let m = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(m)));
                    store(out.as_mut_ptr().add(ox), n - ox, m);
                }
                ox += 8;
            }
        }
    }

    /// [`super::max_back_plane_2x2_portable`] with AVX2: each 8-lane block of an input row
    /// holds four windows' pairs, the kept maxima `y` and gradients `0.0 + dy` are duplicated
    /// into the pairs, and "first maximum" is "equal, and no earlier element of the window
    /// is"; a row's last block loads and stores only its own lanes. Same bits.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max_back_plane_2x2(dxp: &mut [f32], xp: &[f32], yp: &[f32], dyp: &[f32], ow: usize, iw: usize) {
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
        for (oy, (y, dy)) in yp.chunks_exact(ow).zip(dyp.chunks_exact(ow)).enumerate() {
            let (d0, d1) = dxp[2 * oy * iw..(2 * oy + 2) * iw].split_at_mut(iw);
            let (r0, r1) = xp[2 * oy * iw..(2 * oy + 2) * iw].split_at(iw);
            let n = y.len().min(r0.len() / 2).min(r1.len() / 2).min(d0.len() / 2).min(d1.len() / 2);
            let mut ox = 0;
            while ox < n {
                // SAFETY: min(n - ox, 8) floats from ox, within y and dy.
                let (t, g) = unsafe { (load(y.as_ptr().add(ox), n - ox), load(dy.as_ptr().add(ox), n - ox)) };
                let g = _mm256_add_ps(zero, g);
                let t_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(t, t);
                for (h, idx) in halves.iter().enumerate() {
                    // This half's floats: its four windows' pairs, or fewer at the row's end.
                    let k = (2 * (n - ox)).saturating_sub(8 * h);
                    if k == 0 {
                        break;
                    }
                    let (th, nh, gh) = (
                        _mm256_permutevar8x32_ps(t, *idx),
                        _mm256_permutevar8x32_ps(t_nan, *idx),
                        _mm256_permutevar8x32_ps(g, *idx),
                    );
                    let at = 2 * ox + 8 * h;
                    // SAFETY: min(k, 8) floats from `at`, all below 2·n: within r0 and r1.
                    let (a, b) = unsafe { (load(r0.as_ptr().add(at), k), load(r1.as_ptr().add(at), k)) };
                    let (ea, eb) = (is_max(a, th, nh), is_max(b, th, nh));
                    // Each pair's elements swapped: the even element's mask in the odd lane.
                    let (ea_sw, eb_sw) = (_mm256_permute_ps::<0b1011_0001>(ea), _mm256_permute_ps::<0b1011_0001>(eb));
                    let m0 = _mm256_andnot_ps(_mm256_and_ps(ea_sw, odd), ea);
                    let m1 = _mm256_andnot_ps(_mm256_or_ps(ea, ea_sw), _mm256_andnot_ps(_mm256_and_ps(eb_sw, odd), eb));
                    // SAFETY: as the loads, within d0 and d1.
                    unsafe {
                        store(d0.as_mut_ptr().add(at), k, _mm256_and_ps(m0, gh));
                        store(d1.as_mut_ptr().add(at), k, _mm256_and_ps(m1, gh));
                    }
                }
                ox += 8;
            }
        }
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
            max_plane_2x2(yp, &x[p * ih * iw..(p + 1) * ih * iw], ow, iw);
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
            max_back_plane_2x2(dxp, xp, yp, dyp, ow, iw);
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
    /// even and odd sizes (row widths that leave every remainder of the AVX2 blocks), with
    /// ties (repeated values) and NaNs in the input, and the AVX2 and portable planes agree.
    #[test]
    fn max_pool_2x2_fast_paths_equal_the_general_loops() {
        let shapes = [(24, 24), (8, 8), (7, 9), (2, 2), (5, 16), (6, 41), (4, 64), (4, 30), (3, 6), (28, 28), (10, 10)];
        let widths = (2..=36).map(|w| (4, w));
        for (seed, (ih, iw)) in shapes.into_iter().chain(widths).enumerate() {
            let seed = seed as u64 + 1;
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
            let mut dy = random_vec(seed ^ 3, g.output_len(), 1.0);
            // Negative zeros and NaNs among the gradients too.
            dy[0] = -0.0;
            let last = dy.len() - 1;
            dy[last] = f32::NAN;
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let be = CpuBackend::new(0);
            let ctx = be.ctx();
            let (mut ya, mut yb) = (vec![f32::NAN; g.output_len()], vec![f32::NAN; g.output_len()]);
            max_forward(ctx, &g, &x, &mut ya);
            max_forward_general(ctx, &g, &x, &mut yb);
            assert_eq!(bits(&ya), bits(&yb), "forward {g:?}");
            let (mut da, mut db) = (vec![f32::NAN; g.input_len()], vec![f32::NAN; g.input_len()]);
            max_backward(ctx, &g, &x, &yb, &dy, &mut da);
            max_backward_general(ctx, &g, &x, &yb, &dy, &mut db);
            assert_eq!(bits(&da), bits(&db), "backward {g:?}");
            // One plane by the dispatching function (AVX2 where the CPU has it) and by the
            // portable loop; the backward pass leaves the columns past 2·ow alone.
            let (ow, oh) = (g.out_w(), g.out_h());
            let (xp, yp, dyp) = (&x[..ih * iw], &yb[..oh * ow], &dy[..oh * ow]);
            let (mut a, mut b) = (vec![0.0; oh * ow], vec![0.0; oh * ow]);
            max_plane_2x2(&mut a, xp, ow, iw);
            max_plane_2x2_portable(&mut b, xp, ow, iw);
            assert_eq!(bits(&a), bits(&b), "forward plane {g:?}");
            let (mut a, mut b) = (vec![7.0; ih * iw], vec![7.0; ih * iw]);
            max_back_plane_2x2(&mut a, xp, yp, dyp, ow, iw);
            max_back_plane_2x2_portable(&mut b, xp, yp, dyp, ow, iw);
            assert_eq!(bits(&a), bits(&b), "backward plane {g:?}");
        }
    }
}
