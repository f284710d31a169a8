//! CPU fully connected layer.

use super::{Linear, LinearGeom};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, CpuCtx, host_slice, host_slice_mut, split_mut_by, split_ranges};
use crate::error::Result;
use crate::gemm::cpu::{Mat, gemm_strided};

impl Linear for CpuBackend {
    unsafe fn linear_forward_unchecked(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        forward(self.ctx(), g, host_slice(x), host_slice(params), host_slice_mut(y));
        Ok(())
    }

    unsafe fn linear_backward_data_unchecked(
        &self,
        g: &LinearGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        backward_data(self.ctx(), g, host_slice(dy), host_slice(params), host_slice_mut(dx));
        Ok(())
    }

    unsafe fn linear_backward_params_unchecked(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        backward_params(self.ctx(), g, host_slice(x), host_slice(dy), host_slice_mut(dparams));
        Ok(())
    }
}

fn forward(ctx: CpuCtx<'_>, g: &LinearGeom, x: &[f32], params: &[f32], y: &mut [f32]) {
    let (w, b) = params.split_at(g.weight_len());
    let (inf, outf) = (g.in_features, g.out_features);
    let ranges = split_ranges(g.batch, ctx.groups(g.batch));
    let ys = split_mut_by(y, &ranges, outf);
    let items: Vec<_> = ranges.into_iter().zip(ys).collect();
    ctx.for_each(items, |(r, yg)| {
        let beta = if g.bias {
            for row in yg.chunks_mut(outf) {
                row.copy_from_slice(b);
            }
            1.0
        } else {
            0.0
        };
        let xg = &x[r.start * inf..r.end * inf];
        // y[n, out] = x[n, in] * W^T[in, out]
        gemm_strided(
            ctx.gemm,
            r.len(),
            outf,
            inf,
            1.0,
            Mat { data: xg, rs: inf as isize, cs: 1 },
            Mat { data: w, rs: 1, cs: inf as isize },
            beta,
            yg,
            outf as isize,
            1,
        );
    });
}

fn backward_data(ctx: CpuCtx<'_>, g: &LinearGeom, dy: &[f32], params: &[f32], dx: &mut [f32]) {
    let w = &params[..g.weight_len()];
    let (inf, outf) = (g.in_features, g.out_features);
    let ranges = split_ranges(g.batch, ctx.groups(g.batch));
    let dxs = split_mut_by(dx, &ranges, inf);
    let items: Vec<_> = ranges.into_iter().zip(dxs).collect();
    ctx.for_each(items, |(r, dxg)| {
        // dx[n, in] = dy[n, out] * W[out, in]
        gemm_strided(
            ctx.gemm,
            r.len(),
            inf,
            outf,
            1.0,
            Mat { data: &dy[r.start * outf..r.end * outf], rs: outf as isize, cs: 1 },
            Mat { data: w, rs: inf as isize, cs: 1 },
            0.0,
            dxg,
            inf as isize,
            1,
        );
    });
}

fn backward_params(ctx: CpuCtx<'_>, g: &LinearGeom, x: &[f32], dy: &[f32], dparams: &mut [f32]) {
    let (inf, outf, n) = (g.in_features, g.out_features, g.batch);
    let (dw, db) = dparams.split_at_mut(g.weight_len());
    let ranges = split_ranges(outf, ctx.groups(outf));
    let dws = split_mut_by(dw, &ranges, inf);
    let items: Vec<_> = ranges.into_iter().zip(dws).collect();
    ctx.for_each(items, |(r, dwg)| {
        // dW[o, in] = dy^T[o, n] * x[n, in] for the rows o in r
        gemm_strided(
            ctx.gemm,
            r.len(),
            inf,
            n,
            1.0,
            Mat { data: &dy[r.start..], rs: 1, cs: outf as isize },
            Mat { data: x, rs: inf as isize, cs: 1 },
            0.0,
            dwg,
            inf as isize,
            1,
        );
    });
    if g.bias {
        db.fill(0.0);
        for row in dy.chunks(outf) {
            for (d, s) in db.iter_mut().zip(row) {
                *d += *s;
            }
        }
    }
}
