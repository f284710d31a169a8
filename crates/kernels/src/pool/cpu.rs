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

fn max_forward(ctx: CpuCtx<'_>, g: &Pool2dGeom, x: &[f32], y: &mut [f32]) {
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
                        if v == target || (v.is_nan() && target.is_nan()) {
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
