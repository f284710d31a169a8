//! CPU conv2d: the direct kernels of `direct.rs` where they apply, else im2col + GEMM per
//! image; the batch split over the backend's threads.

use super::direct::{Direct, ParamsDirect};
use super::phases::Phases;
use super::projection::Projection;
use super::winograd::Winograd;
use super::winograd_params::WinogradParams;
use super::{Conv2d, Conv2dGeom};
use crate::backend::{View, ViewMut};
use crate::cpu::simd::{transpose, transpose_ld};
use crate::cpu::{CpuBackend, CpuCtx, chunks_mut_n, host_slice, host_slice_mut, split_mut_by, split_ranges};
use crate::error::Result;
use crate::gemm::cpu::{Mat, gemm_strided};

impl Conv2d for CpuBackend {
    fn conv2d_workspace_len(&self, g: &Conv2dGeom) -> usize {
        workspace_len(g, self.threads())
    }

    unsafe fn conv2d_forward_unchecked(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        forward(self.ctx(), g, host_slice(x), host_slice(params), host_slice_mut(y), host_slice_mut(workspace));
        Ok(())
    }

    unsafe fn conv2d_backward_data_unchecked(
        &self,
        g: &Conv2dGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        backward_data(self.ctx(), g, host_slice(dy), host_slice(params), host_slice_mut(dx), host_slice_mut(workspace));
        Ok(())
    }

    unsafe fn conv2d_backward_params_unchecked(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        backward_params(self.ctx(), g, host_slice(x), host_slice(dy), host_slice_mut(dparams), host_slice_mut(workspace));
        Ok(())
    }
}

/// Workspace elements: per thread group one im2col matrix, the buffers of the backward-params
/// pass (the transposed im2col matrix and `dy` of one image, or a [`Window`]'s buffers), and
/// a partial weight and bias gradient (used by the backward-params pass when there is more
/// than one group).
fn workspace_len(g: &Conv2dGeom, threads: usize) -> usize {
    let groups = threads.min(g.batch).max(1);
    let col = col_len(g);
    let partial = if groups > 1 { g.params_len() } else { 0 };
    let bwd = match (Projection::of(g), ParamsDirect::of(g), Window::of(g)) {
        (Some(pr), _, _) => pr.subsampled_len(),
        (None, Some(pd), _) => params_direct_len(&pd),
        (None, None, Some(win)) => win.len(g),
        (None, None, None) => transposes_len(g),
    };
    (groups * (col + bwd + partial)).max(direct_len(g, threads))
}

/// Workspace of the direct passes ([`Direct`], [`Phases`]): the packed weights and padded
/// copies of the forward or the backward-data pass, whichever is longer (`0` where neither
/// runs direct).
fn direct_len(g: &Conv2dGeom, threads: usize) -> usize {
    let groups = threads.min(g.batch).max(1);
    let len = |d: Direct| d.packed_len() + groups * d.scratch_len();
    let f = Direct::forward(g).map_or(0, len);
    let b = Direct::backward_data(g).map_or(0, len);
    let phases = Phases::of(g).map_or(0, |p| p.workspace_len(groups));
    let wf = Winograd::forward(g).map_or(0, |w| w.workspace_len(groups));
    let wb = Winograd::backward_data(g).map_or(0, |w| w.workspace_len(groups));
    let wp = WinogradParams::of(g).map_or(0, |w| w.workspace_len(groups));
    f.max(b).max(phases).max(wf).max(wb).max(wp)
}

/// The backward-params pass of a stride-1 convolution without im2col ("shifted windows").
///
/// The input image is copied once, zero-padded and pixel-major (`xp[(y * wp + x) * c_in + c]`,
/// `wp = w + 2 * pad_w`), and `dy` pixel-major over the same padded row pitch
/// (`dyp[(oy * wp + ox) * c_out + co]`, zero for the `wp - ow` columns `ox >= ow`). Then for
/// kernel row `ki` the im2col matrix restricted to that row is, transposed, a plain window of
/// `xp`: `X_ki[p, kj * c_in + c] = xp[(p + ki * wp) * c_in + kj * c_in + c]`, rows `c_in`
/// apart, for the padded pixel index `p = oy * wp + ox`. So
/// `dW_ki[c_out, kw * c_in] += dyp^T[c_out, P'] * X_ki[P', kw * c_in]` is one GEMM per kernel
/// row straight from `xp` (both packings read contiguously), and the im2col matrix (`kh * kw`
/// times the input) is never written, read back or transposed: the copies are of the input
/// and `dy` alone. The price is the GEMM work on the `wp - ow` padding columns (zeros in
/// `dyp`), so the path is taken only where that is at most 1/4 of the pixels
/// (`crossbow bench`: ResNet-20 at batch 16 on one thread ran faster with the 8×8-pixel
/// layers, 20% padding columns, included than excluded: docs/results/kernel-history/NOTES.md, §10.1).
#[derive(Clone, Copy, Debug)]
struct Window {
    /// Padded row pitch `w + 2 * pad_w`, in pixels.
    wp: usize,
    /// Padded height `h + 2 * pad_h`.
    hp: usize,
    /// Padded pixel count of the output, `oh * wp`: the GEMMs' inner dimension.
    pp: usize,
}

impl Window {
    /// The window layout for `g`, or `None` where the im2col path is used: strided and 1×1
    /// unpadded convolutions (no im2col there either), and shapes where the padding columns
    /// would add more than 1/4 to the GEMM work.
    fn of(g: &Conv2dGeom) -> Option<Window> {
        Window::any_waste(g).filter(|win| (win.wp - g.out_w()) * 4 <= win.wp)
    }

    /// The window layout for every stride-1 convolution that is not 1×1 unpadded, whatever
    /// its padding columns cost.
    fn any_waste(g: &Conv2dGeom) -> Option<Window> {
        if g.stride_h != 1 || g.stride_w != 1 || g.is_pointwise() {
            return None;
        }
        let (wp, hp) = (g.in_w + 2 * g.pad_w, g.in_h + 2 * g.pad_h);
        Some(Window { wp, hp, pp: g.out_h() * wp })
    }

    /// Elements of `xp`: the padded image plus `kw - 1` zero pixels the last window reaches.
    fn xp_len(&self, g: &Conv2dGeom) -> usize {
        g.in_channels * (self.hp * self.wp + g.kernel_w - 1)
    }

    /// Elements of `dyp`.
    fn dyp_len(&self, g: &Conv2dGeom) -> usize {
        self.pp * g.out_channels
    }

    /// Workspace of one thread group: `xp`, `dyp` and the weight gradient in the GEMMs'
    /// order `[kh, c_out, kw, c_in]`.
    fn len(&self, g: &Conv2dGeom) -> usize {
        self.xp_len(g) + self.dyp_len(g) + g.weight_len()
    }
}

/// Elements of the backward-params pass's transposes: `col^T[P, K]` and `dy^T[P, c_out]`.
fn transposes_len(g: &Conv2dGeom) -> usize {
    g.col_cols() * (g.col_rows() + g.out_channels)
}


/// True for a stride-1 convolution whose output has the input's size (3×3 with padding 1,
/// 5×5 with padding 2, ...): then every im2col row is the input plane shifted by a constant
/// offset, so it is one block copy plus a few zeroed columns ([`im2col`], [`col2im`]).
fn is_same_stride1(g: &Conv2dGeom) -> bool {
    g.stride_h == 1 && g.stride_w == 1 && g.out_h() == g.in_h && g.out_w() == g.in_w
}

/// Row pitch, in `f32`s, of the im2col matrix `col[K, pitch]` (`pitch >= oh * ow`).
///
/// At 32×32 and 16×16 pixels a row of `oh * ow` floats is 4 KiB or 1 KiB: the GEMM reads and
/// writes `col` down its K axis (the packing of a pixel panel gathers one short run per row,
/// `dcol`'s tiles are stored row by row), and rows a multiple of 1 KiB apart fall into a few
/// L1 sets of the 8-way cache, which evicts each other before a panel is done. One cache line
/// more per row spreads them over every set.
pub(crate) fn col_pitch(g: &Conv2dGeom) -> usize {
    let plane = g.col_cols();
    if plane >= 256 && plane.is_multiple_of(256) { plane + 16 } else { plane }
}

/// Elements of one im2col matrix (`0` for a pointwise convolution, which needs none).
fn col_len(g: &Conv2dGeom) -> usize {
    if g.is_pointwise() { 0 } else { g.col_rows() * col_pitch(g) }
}

/// For a same-size stride-1 convolution: the flat offset of im2col row (ki, kj), the valid
/// destination range `j0..j1`, and the column shift.
fn same_shift(g: &Conv2dGeom, ki: usize, kj: usize) -> (isize, usize, usize, isize) {
    let (h, w) = (g.in_h as isize, g.in_w as isize);
    let hw = h * w;
    let s = kj as isize - g.pad_w as isize;
    let off = (ki as isize - g.pad_h as isize) * w + s;
    let j0 = (-off).clamp(0, hw) as usize;
    let j1 = (hw - off).clamp(0, hw) as usize;
    (off, j0, j1.max(j0), s)
}

/// Zeroes, in every row of a `[h, w]` plane, the columns whose source column `ox + s` falls
/// outside `0..w` (they wrapped into the neighbouring row in a flat shifted copy).
fn zero_wrapped_columns(plane: &mut [f32], h: usize, w: usize, s: isize) {
    let k = s.unsigned_abs().min(w);
    let cols = if s < 0 { 0..k } else { w - k..w };
    // Column by column with single stores: per row the run is short (1 float for a 3×3
    // kernel), and a fill per row became a `memset` call per row, 5% of a ResNet-20 step.
    for c in cols {
        for v in plane[..h * w].iter_mut().skip(c).step_by(w) {
            *v = 0.0;
        }
    }
}

/// Unfolds one image `[c_in, h, w]` into `col[c_in*kh*kw, oh*ow]`.
pub(crate) fn im2col(g: &Conv2dGeom, x: &[f32], col: &mut [f32]) {
    if is_same_stride1(g) { im2col_same(g, x, col) } else { im2col_general(g, x, col) }
}

/// [`im2col`] for same-size stride-1 convolutions: one block copy per row.
pub(crate) fn im2col_same(g: &Conv2dGeom, x: &[f32], col: &mut [f32]) {
    let (h, w) = (g.in_h, g.in_w);
    let hw = h * w;
    let pitch = col_pitch(g);
    for c in 0..g.in_channels {
        let xc = &x[c * hw..(c + 1) * hw];
        for ki in 0..g.kernel_h {
            for kj in 0..g.kernel_w {
                let row = (c * g.kernel_h + ki) * g.kernel_w + kj;
                let dst = &mut col[row * pitch..row * pitch + hw];
                let (off, j0, j1, s) = same_shift(g, ki, kj);
                dst[..j0].fill(0.0);
                dst[j1..].fill(0.0);
                if j0 < j1 {
                    let src0 = (j0 as isize + off) as usize;
                    dst[j0..j1].copy_from_slice(&xc[src0..src0 + (j1 - j0)]);
                }
                zero_wrapped_columns(dst, h, w, s);
            }
        }
    }
}

/// [`im2col`] for any geometry, row segment by row segment.
pub(crate) fn im2col_general(g: &Conv2dGeom, x: &[f32], col: &mut [f32]) {
    let (oh, ow) = (g.out_h(), g.out_w());
    let (h, w) = (g.in_h, g.in_w);
    let (plane, pitch) = (oh * ow, col_pitch(g));
    for c in 0..g.in_channels {
        let xc = &x[c * h * w..(c + 1) * h * w];
        for ki in 0..g.kernel_h {
            for kj in 0..g.kernel_w {
                let row = (c * g.kernel_h + ki) * g.kernel_w + kj;
                let dst = &mut col[row * pitch..row * pitch + plane];
                // Output columns ox whose input column ix = ox*s + kj - p lies in 0..w.
                let (lo, hi) = valid_range(ow, g.stride_w, kj, g.pad_w, w);
                for oy in 0..oh {
                    let drow = &mut dst[oy * ow..(oy + 1) * ow];
                    let iy = (oy * g.stride_h + ki) as isize - g.pad_h as isize;
                    if iy < 0 || iy >= h as isize || lo >= hi {
                        drow.fill(0.0);
                        continue;
                    }
                    let src = &xc[iy as usize * w..(iy as usize + 1) * w];
                    drow[..lo].fill(0.0);
                    drow[hi..].fill(0.0);
                    if g.stride_w == 1 {
                        let s0 = lo + kj - g.pad_w;
                        drow[lo..hi].copy_from_slice(&src[s0..s0 + (hi - lo)]);
                    } else {
                        for (ox, d) in drow[lo..hi].iter_mut().enumerate() {
                            *d = src[(ox + lo) * g.stride_w + kj - g.pad_w];
                        }
                    }
                }
            }
        }
    }
}

/// Folds `col[c_in*kh*kw, oh*ow]` back into an image, overwriting `dx`. `col` is scratch:
/// the same-size fast path zeroes its wrapped columns.
pub(crate) fn col2im(g: &Conv2dGeom, col: &mut [f32], dx: &mut [f32]) {
    if is_same_stride1(g) {
        col2im_same(g, col, dx)
    } else {
        dx.fill(0.0);
        col2im_general(g, col, dx)
    }
}

/// [`col2im`] for same-size stride-1 convolutions, overwriting `dx`: the centre tap (offset
/// 0, nothing wraps) is copied, the other taps are added.
pub(crate) fn col2im_same(g: &Conv2dGeom, col: &mut [f32], dx: &mut [f32]) {
    let (h, w) = (g.in_h, g.in_w);
    let hw = h * w;
    let pitch = col_pitch(g);
    for c in 0..g.in_channels {
        let xc = &mut dx[c * hw..(c + 1) * hw];
        let centre = (c * g.kernel_h + g.pad_h) * g.kernel_w + g.pad_w;
        xc.copy_from_slice(&col[centre * pitch..centre * pitch + hw]);
        for ki in 0..g.kernel_h {
            for kj in 0..g.kernel_w {
                if (ki, kj) == (g.pad_h, g.pad_w) {
                    continue;
                }
                let row = (c * g.kernel_h + ki) * g.kernel_w + kj;
                let src = &mut col[row * pitch..row * pitch + hw];
                let (off, j0, j1, s) = same_shift(g, ki, kj);
                zero_wrapped_columns(src, h, w, s);
                if j0 < j1 {
                    let d0 = (j0 as isize + off) as usize;
                    add_into(&mut xc[d0..d0 + (j1 - j0)], &src[j0..j1]);
                }
            }
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `d += s`, element by element.
    fn add_into / add_into_portable(d: &mut [f32], s: &[f32]) {
        for (a, &b) in d.iter_mut().zip(s) {
            *a += b;
        }
    }
}

/// [`col2im`] for any geometry.
pub(crate) fn col2im_general(g: &Conv2dGeom, col: &[f32], dx: &mut [f32]) {
    let (oh, ow) = (g.out_h(), g.out_w());
    let (h, w) = (g.in_h, g.in_w);
    let (plane, pitch) = (oh * ow, col_pitch(g));
    for c in 0..g.in_channels {
        let xc = &mut dx[c * h * w..(c + 1) * h * w];
        for ki in 0..g.kernel_h {
            for kj in 0..g.kernel_w {
                let row = (c * g.kernel_h + ki) * g.kernel_w + kj;
                let src = &col[row * pitch..row * pitch + plane];
                let (lo, hi) = valid_range(ow, g.stride_w, kj, g.pad_w, w);
                if lo >= hi {
                    continue;
                }
                for oy in 0..oh {
                    let iy = (oy * g.stride_h + ki) as isize - g.pad_h as isize;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    let srow = &src[oy * ow..(oy + 1) * ow];
                    let drow = &mut xc[iy as usize * w..(iy as usize + 1) * w];
                    if g.stride_w == 1 {
                        let d0 = lo + kj - g.pad_w;
                        add_into(&mut drow[d0..d0 + (hi - lo)], &srow[lo..hi]);
                    } else {
                        for ox in lo..hi {
                            drow[ox * g.stride_w + kj - g.pad_w] += srow[ox];
                        }
                    }
                }
            }
        }
    }
}

/// The range `lo..hi` of output columns `ox` for which `ox*s + k - p` is inside `0..w`.
fn valid_range(ow: usize, s: usize, k: usize, p: usize, w: usize) -> (usize, usize) {
    // ox*s + k >= p  <=>  ox >= ceil((p - k) / s)
    let lo = if k >= p { 0 } else { (p - k).div_ceil(s) };
    // ox*s + k - p <= w - 1  <=>  ox <= (w - 1 + p - k) / s
    let hi = if w + p > k { ((w - 1 + p - k) / s + 1).min(ow) } else { 0 };
    (lo.min(ow), hi.max(lo.min(ow)))
}

/// `y[m, n] = W[m, k] * col[k, n] (+ beta * y)`, row-major, the rows of `col` `ld` apart. With few output channels the
/// product is computed transposed (`y^T = col^T W^T`, written through strides), which puts
/// the long pixel dimension on the GEMM's M side: matrixmultiply's kernels are then ~25%
/// faster at 16 channels (`cargo bench -p crossbow-benches --bench gemm_conv`).
#[allow(clippy::too_many_arguments)]
fn weights_times_col(ctx: CpuCtx<'_>, (m, n, k): (usize, usize, usize), w: &[f32], col: &[f32], ld: usize, beta: f32, y: &mut [f32]) {
    if m < 32 && n >= 4 * m {
        gemm_strided(
            ctx.gemm,
            n,
            m,
            k,
            1.0,
            Mat { data: col, rs: 1, cs: ld as isize },
            Mat { data: w, rs: 1, cs: k as isize },
            beta,
            y,
            1,
            n as isize,
        );
    } else {
        gemm_strided(
            ctx.gemm,
            m,
            n,
            k,
            1.0,
            Mat { data: w, rs: k as isize, cs: 1 },
            Mat { data: col, rs: ld as isize, cs: 1 },
            beta,
            y,
            n as isize,
            1,
        );
    }
}

/// The forward or backward-data pass of a stride-1 convolution by the [`Direct`] kernel:
/// `weight(co, c, t)` is the direct convolution's kernel, packed once into the workspace and
/// read by every image; images `src[n]` (`src_img` floats) into `dst[n]` (`dst_img`).
#[allow(clippy::too_many_arguments)]
fn run_direct(
    ctx: CpuCtx<'_>,
    d: Direct,
    batch: usize,
    weight: impl Fn(usize, usize, usize) -> f32,
    bias: Option<&[f32]>,
    (src, src_img): (&[f32], usize),
    (dst, dst_img): (&mut [f32], usize),
    ws: &mut [f32],
) {
    let groups = ctx.groups(batch);
    let (wp, scratch) = ws.split_at_mut(d.packed_len());
    d.pack(weight, wp);
    let wp = &*wp;
    let plan = d.plan();
    let ranges = split_ranges(batch, groups);
    let dsts = split_mut_by(dst, &ranges, dst_img);
    let scratches = chunks_mut_n(scratch, groups, d.scratch_len());
    let items: Vec<_> = ranges.into_iter().zip(dsts).zip(scratches).collect();
    ctx.for_each(items, |((r, dg), sc)| {
        // The padding of the padded copy stays zero: each image rewrites only the interior.
        sc.fill(0.0);
        for (i, n) in r.enumerate() {
            d.run(&plan, &src[n * src_img..(n + 1) * src_img], wp, bias, &mut dg[i * dst_img..(i + 1) * dst_img], sc);
        }
    });
}

/// The forward or backward-data pass of a wide 3×3 convolution by [`Winograd`]: `weight(co,
/// c, t)` transformed and packed once into the workspace, then the images in groups of
/// [`Winograd::lanes`], whole groups per thread.
#[allow(clippy::too_many_arguments)]
fn run_winograd(
    ctx: CpuCtx<'_>,
    wg: Winograd,
    batch: usize,
    weight: impl Fn(usize, usize, usize) -> f32 + Sync,
    bias: Option<&[f32]>,
    (src, src_img): (&[f32], usize),
    (dst, dst_img): (&mut [f32], usize),
    ws: &mut [f32],
) {
    // Whole groups of `lanes` images per thread: a group is computed the same way on any
    // thread, so the bits do not depend on the thread count.
    let lanes = wg.lanes;
    let lane_groups = batch.div_ceil(lanes);
    let groups = ctx.groups(lane_groups);
    let ranges: Vec<_> = split_ranges(lane_groups, groups)
        .into_iter()
        .map(|r| r.start * lanes..(r.end * lanes).min(batch))
        .collect();
    let (u, scratch) = ws.split_at_mut(wg.packed_len());
    wg.pack(ctx, weight, u);
    let u = &*u;
    let dsts = split_mut_by(dst, &ranges, dst_img);
    let scratches = chunks_mut_n(scratch, groups, wg.scratch_len());
    let items: Vec<_> = ranges.into_iter().zip(dsts).zip(scratches).collect();
    ctx.for_each(items, |((r, dg), sc)| {
        let mut i = 0;
        while i < r.len() {
            let k = (r.len() - i).min(lanes);
            let n0 = r.start + i;
            wg.run_group(k, &src[n0 * src_img..], u, bias, &mut dg[i * dst_img..(i + k) * dst_img], sc);
            i += k;
        }
    });
}

fn forward(ctx: CpuCtx<'_>, g: &Conv2dGeom, x: &[f32], params: &[f32], y: &mut [f32], ws: &mut [f32]) {
    let in_img = g.in_channels * g.in_h * g.in_w;
    let out_img = g.out_channels * g.col_cols();
    if let Some(wg) = Winograd::forward(g) {
        let (w, bias) = params.split_at(g.weight_len());
        let c = g.in_channels;
        let weight = |co: usize, ci: usize, t: usize| w[(co * c + ci) * 9 + t];
        run_winograd(ctx, wg, g.batch, weight, g.bias.then_some(bias), (x, in_img), (y, out_img), ws);
        return;
    }
    if let Some(d) = Direct::forward(g) {
        let (w, bias) = params.split_at(g.weight_len());
        let (c, taps) = (g.in_channels, g.kernel_h * g.kernel_w);
        let weight = |co: usize, ci: usize, t: usize| w[(co * c + ci) * taps + t];
        run_direct(ctx, d, g.batch, weight, g.bias.then_some(bias), (x, in_img), (y, out_img), ws);
        return;
    }
    let groups = ctx.groups(g.batch);
    let ranges = split_ranges(g.batch, groups);
    let col_len = col_len(g);
    let ys = split_mut_by(y, &ranges, out_img);
    let wss = chunks_mut_n(ws, groups, col_len);
    let (w, bias) = params.split_at(g.weight_len());
    let items: Vec<_> = ranges.into_iter().zip(ys).zip(wss).collect();
    ctx.for_each(items, |((r, yg), col)| {
        for (i, n) in r.enumerate() {
            let xi = &x[n * in_img..(n + 1) * in_img];
            let yi = &mut yg[i * out_img..(i + 1) * out_img];
            let (src, ld): (&[f32], usize) = if g.is_pointwise() {
                (xi, g.col_cols())
            } else {
                im2col(g, xi, col);
                (col, col_pitch(g))
            };
            let beta = if g.bias {
                for (co, row) in yi.chunks_mut(g.col_cols()).enumerate() {
                    row.fill(bias[co]);
                }
                1.0
            } else {
                0.0
            };
            let dims = (g.out_channels, g.col_cols(), g.col_rows());
            weights_times_col(ctx, dims, w, src, ld, beta, yi);
        }
    });
}

fn backward_data(ctx: CpuCtx<'_>, g: &Conv2dGeom, dy: &[f32], params: &[f32], dx: &mut [f32], ws: &mut [f32]) {
    let in_img = g.in_channels * g.in_h * g.in_w;
    let out_img = g.out_channels * g.col_cols();
    if let Some(wg) = Winograd::backward_data(g) {
        // dx = dy convolved with the kernel transposed (c_in <-> c_out) and flipped.
        let w = &params[..g.weight_len()];
        let c = g.in_channels;
        let weight = |ci: usize, co: usize, t: usize| w[(co * c + ci) * 9 + (8 - t)];
        run_winograd(ctx, wg, g.batch, weight, None, (dy, out_img), (dx, in_img), ws);
        return;
    }
    if let Some(d) = Direct::backward_data(g) {
        // dx = dy convolved with the kernel transposed (c_in <-> c_out) and flipped.
        let w = &params[..g.weight_len()];
        let (c, taps) = (g.in_channels, g.kernel_h * g.kernel_w);
        let weight = |ci: usize, co: usize, t: usize| w[(co * c + ci) * taps + (taps - 1 - t)];
        run_direct(ctx, d, g.batch, weight, None, (dy, out_img), (dx, in_img), ws);
        return;
    }
    if let Some(p) = Phases::of(g) {
        p.run(ctx, g, dy, &params[..g.weight_len()], dx, ws);
        return;
    }
    let groups = ctx.groups(g.batch);
    let ranges = split_ranges(g.batch, groups);
    let col_len = col_len(g);
    let dxs = split_mut_by(dx, &ranges, in_img);
    let wss = chunks_mut_n(ws, groups, col_len);
    let w = &params[..g.weight_len()];
    let items: Vec<_> = ranges.into_iter().zip(dxs).zip(wss).collect();
    ctx.for_each(items, |((r, dxg), col)| {
        let (m, nn, k) = (g.col_rows(), g.col_cols(), g.out_channels);
        for (i, n) in r.enumerate() {
            let dyi = &dy[n * out_img..(n + 1) * out_img];
            let dxi = &mut dxg[i * in_img..(i + 1) * in_img];
            // dcol[K, P] = W^T[K, c_out] * dy[c_out, P]
            let a = Mat { data: w, rs: 1, cs: m as isize };
            let b = Mat { data: dyi, rs: nn as isize, cs: 1 };
            if g.is_pointwise() {
                gemm_strided(ctx.gemm, m, nn, k, 1.0, a, b, 0.0, dxi, nn as isize, 1);
            } else {
                gemm_strided(ctx.gemm, m, nn, k, 1.0, a, b, 0.0, col, col_pitch(g) as isize, 1);
                col2im(g, col, dxi);
            }
        }
    });
}

fn backward_params(ctx: CpuCtx<'_>, g: &Conv2dGeom, x: &[f32], dy: &[f32], dparams: &mut [f32], ws: &mut [f32]) {
    if let Some(wp) = WinogradParams::of(g) {
        return backward_params_winograd(ctx, g, wp, x, dy, dparams, ws);
    }
    if let Some(pr) = Projection::of(g) {
        return backward_params_projection(ctx, g, pr, x, dy, dparams, ws);
    }
    if let Some(pd) = ParamsDirect::of(g) {
        return backward_params_direct(ctx, g, pd, x, dy, dparams, ws);
    }
    match Window::of(g) {
        Some(win) => backward_params_window(ctx, g, win, x, dy, dparams, ws),
        None => backward_params_im2col(ctx, g, x, dy, dparams, ws),
    }
}

/// [`backward_params`] of a wide 3×3 layer by [`WinogradParams`]: each thread sums its
/// images' transformed products, then the sums are added in thread order and transformed.
fn backward_params_winograd(
    ctx: CpuCtx<'_>,
    g: &Conv2dGeom,
    wp: WinogradParams,
    x: &[f32],
    dy: &[f32],
    dparams: &mut [f32],
    ws: &mut [f32],
) {
    let groups = ctx.groups(g.batch);
    let ranges = split_ranges(g.batch, groups);
    let scratches = chunks_mut_n(ws, groups, wp.scratch_len());
    let items: Vec<_> = ranges.into_iter().zip(scratches).collect();
    let scratches = ctx.map(items, |(r, sc)| {
        wp.accumulate(x, dy, r, sc);
        sc
    });
    let sums: Vec<&[f32]> = scratches.iter().map(|s| &**s).collect();
    wp.finish(ctx, &sums, g.bias, dparams);
}

/// Sums `dy` per output channel into `db` (`+=`).
fn add_bias_grad(g: &Conv2dGeom, dyi: &[f32], db: &mut [f32]) {
    let k = g.col_cols();
    // Eight channels' sums side by side: each is still one chain over its pixels in order
    // (the bits of `iter().sum()`, and of the f64 reference's order), but eight chains run
    // at once instead of one add's latency per pixel.
    const L: usize = 8;
    for (bi, b) in db.chunks_mut(L).enumerate() {
        let n = b.len();
        let co0 = bi * L;
        // A block of fewer than eight channels sums its last channel again in the spare
        // chains, which are never stored.
        let planes: [&[f32]; L] = std::array::from_fn(|j| {
            let co = co0 + j.min(n - 1);
            &dyi[co * k..(co + 1) * k]
        });
        let mut acc = [0.0f32; L];
        for p in 0..k {
            for j in 0..L {
                // SAFETY: every plane holds k values and p < k.
                acc[j] += unsafe { *planes[j].get_unchecked(p) };
            }
        }
        for (d, a) in b.iter_mut().zip(acc) {
            *d += a;
        }
    }
}

/// Adds the per-group partial gradients into `dparams` in group order (deterministic for a
/// given thread count).
fn sum_partials(dparams: &mut [f32], outs: &[&mut [f32]]) {
    if let Some((first, rest)) = outs.split_first() {
        dparams.copy_from_slice(first);
        for p in rest {
            for (d, s) in dparams.iter_mut().zip(p.iter()) {
                *d += *s;
            }
        }
    }
}

/// Runs a weight-gradient `work(images, buffer, out)` per thread group of the batch: each
/// group gets `len` floats of `ws` as its buffer and writes straight into `dparams` when it
/// is the only group, else into its partial (taken from `ws` after the buffers), summed in
/// group order.
fn params_over_groups(
    ctx: CpuCtx<'_>,
    g: &Conv2dGeom,
    len: usize,
    ws: &mut [f32],
    dparams: &mut [f32],
    work: impl Fn(std::ops::Range<usize>, &mut [f32], &mut [f32]) + Sync + Send,
) {
    let groups = ctx.groups(g.batch);
    let ranges = split_ranges(g.batch, groups);
    let (bufs, partials) = ws.split_at_mut(groups * len);
    let bufs = chunks_mut_n(bufs, groups, len);
    if groups == 1 {
        let (r, buf) = ranges.into_iter().zip(bufs).next().unwrap_or_default();
        work(r, buf, dparams);
        return;
    }
    let mut outs = chunks_mut_n(partials, groups, g.params_len());
    let items: Vec<_> = ranges.into_iter().zip(bufs).zip(outs.iter_mut()).collect();
    ctx.for_each(items, |((r, buf), out)| work(r, buf, out));
    sum_partials(dparams, &outs);
}

/// Workspace of one thread group of [`backward_params_direct`]: `xp`, `dyt`, `dwt`.
fn params_direct_len(pd: &ParamsDirect) -> usize {
    pd.xp_len() + pd.dyt_len() + pd.dwt_len()
}

/// [`backward_params`] through [`ParamsDirect`] (any kernel but 1×1 unpadded): no im2col, no
/// GEMM.
fn backward_params_direct(
    ctx: CpuCtx<'_>,
    g: &Conv2dGeom,
    pd: ParamsDirect,
    x: &[f32],
    dy: &[f32],
    dparams: &mut [f32],
    ws: &mut [f32],
) {
    let (c, co_n) = (g.in_channels, g.out_channels);
    let (h, w, pixels) = (g.in_h, g.in_w, g.col_cols());
    let (in_img, out_img) = (c * h * w, co_n * pixels);
    let (hp, wp) = pd.padded();
    let work = |r: std::ops::Range<usize>, buf: &mut [f32], out: &mut [f32]| {
        let (xp, rest) = buf.split_at_mut(pd.xp_len());
        let (dyt, dwt) = rest.split_at_mut(pd.dyt_len());
        // The padding stays zero: each image rewrites only the interior.
        xp.fill(0.0);
        let (dw, db) = out.split_at_mut(g.weight_len());
        if g.bias {
            db.fill(0.0);
        }
        for (i, n) in r.enumerate() {
            let xi = &x[n * in_img..(n + 1) * in_img];
            let dyi = &dy[n * out_img..(n + 1) * out_img];
            for ch in 0..c {
                for iy in 0..h {
                    let d0 = (ch * hp + iy + g.pad_h) * wp + g.pad_w;
                    xp[d0..d0 + w].copy_from_slice(&xi[(ch * h + iy) * w..(ch * h + iy + 1) * w]);
                }
            }
            if pd.cop == co_n {
                transpose(dyi, co_n, pixels, dyt);
            } else {
                // Rows padded to the vector width with zero channels.
                crate::cpu::simd::transpose_padded(dyi, co_n, pixels, pd.cop, dyt);
            }
            pd.accumulate(xp, dyt, dwt, i == 0);
            if g.bias {
                add_bias_grad(g, dyi, db);
            }
        }
        // dW[co, c, t] from the kernel's order [c, t, cop].
        let taps = g.kernel_h * g.kernel_w;
        for co in 0..co_n {
            for ch in 0..c {
                for t in 0..taps {
                    dw[(co * c + ch) * taps + t] = dwt[(ch * taps + t) * pd.cop + co];
                }
            }
        }
    };
    params_over_groups(ctx, g, params_direct_len(&pd), ws, dparams, work);
}

/// [`backward_params`] of a strided 1×1 convolution ([`Projection`]): per image, the
/// subsampled pixels, then the product along the pixels.
fn backward_params_projection(
    ctx: CpuCtx<'_>,
    g: &Conv2dGeom,
    pr: Projection,
    x: &[f32],
    dy: &[f32],
    dparams: &mut [f32],
    ws: &mut [f32],
) {
    let (in_img, out_img) = (g.in_channels * g.in_h * g.in_w, g.out_channels * g.col_cols());
    let work = |r: std::ops::Range<usize>, xs: &mut [f32], out: &mut [f32]| {
        let (dw, db) = out.split_at_mut(g.weight_len());
        dw.fill(0.0);
        if g.bias {
            db.fill(0.0);
        }
        for n in r {
            let dyi = &dy[n * out_img..(n + 1) * out_img];
            pr.subsample(&x[n * in_img..(n + 1) * in_img], xs);
            pr.accumulate_dw(dyi, xs, dw);
            if g.bias {
                add_bias_grad(g, dyi, db);
            }
        }
    };
    params_over_groups(ctx, g, pr.subsampled_len(), ws, dparams, work);
}

/// [`backward_params`] through a [`Window`]: no im2col.
fn backward_params_window(
    ctx: CpuCtx<'_>,
    g: &Conv2dGeom,
    win: Window,
    x: &[f32],
    dy: &[f32],
    dparams: &mut [f32],
    ws: &mut [f32],
) {
    let (c, co_n) = (g.in_channels, g.out_channels);
    let (h, w, oh, ow) = (g.in_h, g.in_w, g.out_h(), g.out_w());
    let (kh, kw) = (g.kernel_h, g.kernel_w);
    let (in_img, out_img) = (c * h * w, co_n * oh * ow);
    let (wp, pp) = (win.wp, win.pp);
    let (xp_len, dyp_len) = (win.xp_len(g), win.dyp_len(g));
    let nk = kw * c;
    let work = |r: std::ops::Range<usize>, buf: &mut [f32], out: &mut [f32]| {
        let (xp, rest) = buf.split_at_mut(xp_len);
        let (dyp, dwp) = rest.split_at_mut(dyp_len);
        // The padding of both stays zero: each image rewrites only the interior.
        xp.fill(0.0);
        dyp.fill(0.0);
        let (dw, db) = out.split_at_mut(g.weight_len());
        if g.bias {
            db.fill(0.0);
        }
        for (i, n) in r.enumerate() {
            let xi = &x[n * in_img..(n + 1) * in_img];
            let dyi = &dy[n * out_img..(n + 1) * out_img];
            for iy in 0..h {
                let d0 = ((iy + g.pad_h) * wp + g.pad_w) * c;
                transpose_ld(&xi[iy * w..], c, w, h * w, &mut xp[d0..d0 + w * c]);
            }
            for oy in 0..oh {
                let d0 = oy * wp * co_n;
                transpose_ld(&dyi[oy * ow..], co_n, ow, oh * ow, &mut dyp[d0..d0 + ow * co_n]);
            }
            for ki in 0..kh {
                gemm_strided(
                    ctx.gemm,
                    co_n,
                    nk,
                    pp,
                    1.0,
                    Mat { data: dyp, rs: 1, cs: co_n as isize },
                    Mat { data: &xp[ki * wp * c..], rs: c as isize, cs: 1 },
                    if i == 0 { 0.0 } else { 1.0 },
                    &mut dwp[ki * co_n * nk..(ki + 1) * co_n * nk],
                    nk as isize,
                    1,
                );
            }
            if g.bias {
                add_bias_grad(g, dyi, db);
            }
        }
        // dW[co, c, ki, kj] from the GEMMs' order [ki, co, kj, c].
        for co in 0..co_n {
            for ch in 0..c {
                for ki in 0..kh {
                    for kj in 0..kw {
                        dw[((co * c + ch) * kh + ki) * kw + kj] = dwp[(ki * co_n + co) * nk + kj * c + ch];
                    }
                }
            }
        }
    };
    params_over_groups(ctx, g, win.len(g), ws, dparams, work);
}

/// [`backward_params`] through im2col and transposes.
fn backward_params_im2col(
    ctx: CpuCtx<'_>,
    g: &Conv2dGeom,
    x: &[f32],
    dy: &[f32],
    dparams: &mut [f32],
    ws: &mut [f32],
) {
    let in_img = g.in_channels * g.in_h * g.in_w;
    let out_img = g.out_channels * g.col_cols();
    let col_len = col_len(g);
    let work = |r: std::ops::Range<usize>, buf: &mut [f32], out: &mut [f32]| {
        let (col, tbuf) = buf.split_at_mut(col_len);
        let (dw, db) = out.split_at_mut(g.weight_len());
        if g.bias {
            db.fill(0.0);
        }
        let (m, nn, k) = (g.out_channels, g.col_rows(), g.col_cols());
        let (col_t, dy_t) = tbuf.split_at_mut(k * nn);
        for (i, n) in r.enumerate() {
            let xi = &x[n * in_img..(n + 1) * in_img];
            let dyi = &dy[n * out_img..(n + 1) * out_img];
            let (src, ld): (&[f32], usize) = if g.is_pointwise() {
                (xi, k)
            } else {
                im2col(g, xi, col);
                (col, col_pitch(g))
            };
            // dW[c_out, K] (+)= dy[c_out, P] * col^T[P, K]. Both operands are read along P,
            // which is the contiguous axis of `dy` and of `col`: handed over as they are, the
            // GEMM's packing gathers them with a stride of P floats (4 KiB at 32×32 pixels,
            // where every load of a panel misses L1: that packing was 24% of a ResNet-20
            // training step). Transposed first in L1-sized tiles, every pack is contiguous.
            transpose_ld(src, nn, k, ld, col_t);
            transpose(dyi, m, k, dy_t);
            gemm_strided(
                ctx.gemm,
                m,
                nn,
                k,
                1.0,
                Mat { data: dy_t, rs: 1, cs: m as isize },
                Mat { data: col_t, rs: nn as isize, cs: 1 },
                if i == 0 { 0.0 } else { 1.0 },
                dw,
                nn as isize,
                1,
            );
            if g.bias {
                add_bias_grad(g, dyi, db);
            }
        }
    };
    params_over_groups(ctx, g, col_len + transposes_len(g), ws, dparams, work);
}

/// The weight and bias gradient of `g` by the window path (taken whatever its padding
/// columns cost) and by the im2col path, for the tests: `None` where the window path does
/// not apply (strides above 1, 1×1 unpadded).
#[cfg(test)]
pub(crate) fn backward_params_both_paths(
    be: &CpuBackend,
    g: &Conv2dGeom,
    x: &[f32],
    dy: &[f32],
) -> Option<(Vec<f32>, Vec<f32>)> {
    let win = Window::any_waste(g)?;
    let groups = be.threads().min(g.batch).max(1);
    let col = col_len(g);
    let partial = if groups > 1 { g.params_len() } else { 0 };
    let mut ws = vec![f32::NAN; groups * (col + win.len(g).max(transposes_len(g)) + partial)];
    let mut a = vec![f32::NAN; g.params_len()];
    let mut b = vec![f32::NAN; g.params_len()];
    backward_params_window(be.ctx(), g, win, x, dy, &mut a, &mut ws);
    ws.fill(f32::NAN);
    backward_params_im2col(be.ctx(), g, x, dy, &mut b, &mut ws);
    Some((a, b))
}

#[cfg(test)]
mod simd_tests {
    use super::*;
    use crate::cpu::simd::test_vectors;

    /// The col2im accumulation's AVX2 path (on a CPU that has it) gives the portable path's bits.
    #[test]
    fn add_into_paths_agree_bit_for_bit() {
        for x in test_vectors() {
            let d0: Vec<f32> = x.iter().map(|v| v * 0.77 - 3.0).collect();
            let (mut a, mut b) = (d0.clone(), d0);
            add_into(&mut a, &x);
            add_into_portable(&mut b, &x);
            assert_eq!(a, b);
        }
    }

    /// The bias gradient's side-by-side chains give each channel's in-order sum, bit for bit,
    /// for channel counts below, at and above a block of eight, added onto what is there.
    #[test]
    fn bias_gradient_chains_are_each_channels_sum_in_order() {
        for co in [1, 6, 8, 11, 16, 19] {
            let g = Conv2dGeom::square(1, 1, (9, 7), co, 3, 1, 1, true);
            let k = g.col_cols();
            let dy = crate::testing::random_vec(co as u64, co * k, 3.0);
            let start: Vec<f32> = (0..co).map(|c| c as f32 * 0.37 - 1.0).collect();
            let mut db = start.clone();
            add_bias_grad(&g, &dy, &mut db);
            let want: Vec<u32> = (0..co)
                .map(|c| (start[c] + dy[c * k..(c + 1) * k].iter().fold(0.0f32, |s, v| s + v)).to_bits())
                .collect();
            assert_eq!(db.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "co {co}");
        }
    }
}
