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

crate::cpu::simd::multiversion! {
    /// One output row of a 2×2 stride-2 max pool from input rows `r0` and `r1`, in the general
    /// loop's order (`r0[2x], r0[2x+1], r1[2x], r1[2x+1]`).
    fn max_row_2x2 / max_row_2x2_portable(out: &mut [f32], r0: &[f32], r1: &[f32]) {
        for (ox, o) in out.iter_mut().enumerate() {
            let m = max_step(f32::NEG_INFINITY, r0[2 * ox]);
            let m = max_step(m, r0[2 * ox + 1]);
            let m = max_step(m, r1[2 * ox]);
            *o = max_step(m, r1[2 * ox + 1]);
        }
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
                max_back_row_2x2(d0, d1, r0, r1, rows.0, rows.1);
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
        for (ih, iw, seed) in [(24, 24, 1u64), (8, 8, 2), (7, 9, 3), (2, 2, 4), (5, 16, 5)] {
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
        }
    }
}
