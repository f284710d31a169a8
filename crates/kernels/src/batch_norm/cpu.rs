//! CPU batch norm: per-channel statistics in f64, the batch split over the backend's threads.

use super::{BatchNorm, BatchNormGeom, Epilogue};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, CpuCtx, host_slice, host_slice_mut, split_mut_by, split_ranges};
use crate::error::Result;

impl BatchNorm for CpuBackend {
    unsafe fn batch_norm_forward_train_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()> {
        let ep = Epi { residual: ep.residual.map(host_slice), relu: ep.relu };
        forward_train(self.ctx(), g, host_slice(x), ep, host_slice(params), host_slice_mut(y), host_slice_mut(saved), host_slice_mut(running));
        Ok(())
    }

    unsafe fn batch_norm_forward_infer_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let ep = Epi { residual: ep.residual.map(host_slice), relu: ep.relu };
        forward_infer(self.ctx(), g, host_slice(x), ep, host_slice(params), host_slice(running), host_slice_mut(y));
        Ok(())
    }

    unsafe fn batch_norm_backward_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        saved: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        let grad = Grad { dy: host_slice(dy), mask: None, dres: None };
        backward(self.ctx(), g, host_slice(x), grad, host_slice(params), host_slice(saved), host_slice_mut(dx), host_slice_mut(dparams));
        Ok(())
    }

    /// One pass fewer than the separate calls: the mask is applied as `dy` is read, and `dy`
    /// is left as it was.
    unsafe fn batch_norm_backward_fused_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        y: Option<View<'_, Self>>,
        dy: ViewMut<'_, Self>,
        params: View<'_, Self>,
        saved: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        dres: Option<ViewMut<'_, Self>>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        let grad = Grad { dy: host_slice(dy.as_view()), mask: y.map(host_slice), dres: dres.map(host_slice_mut) };
        backward(self.ctx(), g, host_slice(x), grad, host_slice(params), host_slice(saved), host_slice_mut(dx), host_slice_mut(dparams));
        Ok(())
    }
}

/// A fused forward call's epilogue on host slices.
#[derive(Clone, Copy)]
struct Epi<'a> {
    residual: Option<&'a [f32]>,
    relu: bool,
}

/// The gradient a backward call reads: `dy`, masked by `mask > 0` when the forward call
/// rectified, and where the masked gradient also goes (the residual's gradient).
struct Grad<'a> {
    dy: &'a [f32],
    mask: Option<&'a [f32]>,
    dres: Option<&'a mut [f32]>,
}

crate::cpu::simd::multiversion! {
/// `sum(x)` in f64 over eight independent lanes (vectorisable, and no worse than serial).
fn sum_f64 / sum_f64_portable(x: &[f32]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v as f64;
        }
    }
    acc.iter().sum::<f64>() + rest.iter().map(|&v| v as f64).sum::<f64>()
}
}

crate::cpu::simd::multiversion! {
/// `sum((x - mean)^2)` in f64 over eight lanes.
fn sum_sq_dev / sum_sq_dev_portable(x: &[f32], mean: f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            let d = v as f64 - mean;
            *a += d * d;
        }
    }
    acc.iter().sum::<f64>() + rest.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>()
}
}

/// `(sum(dy), sum(dy * (x - mean)))` in f64 over eight lanes.
fn sum_dy_dyx(dy: &[f32], x: &[f32], mean: f64) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() {
        // SAFETY: the CPU has AVX2 (checked just now).
        return unsafe { x86::sum_dy_dyx::<false>(dy, &[], x, mean) };
    }
    sum_dy_dyx_portable(dy, x, mean)
}

/// [`sum_dy_dyx`] of `dy` masked by `y > 0` (what ReLU's backward pass would have left).
fn sum_dy_dyx_masked(dy: &[f32], y: &[f32], x: &[f32], mean: f64) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() {
        // SAFETY: the CPU has AVX2 (checked just now).
        return unsafe { x86::sum_dy_dyx::<true>(dy, y, x, mean) };
    }
    sum_dy_dyx_masked_portable(dy, y, x, mean)
}

/// The portable path of [`sum_dy_dyx`].
fn sum_dy_dyx_portable(dy: &[f32], x: &[f32], mean: f64) -> (f64, f64) {
    let (mut a, mut b) = ([0.0f64; 8], [0.0f64; 8]);
    let (cd, cx) = (dy.chunks_exact(8), x.chunks_exact(8));
    let (rd, rx) = (cd.remainder(), cx.remainder());
    for (d8, x8) in cd.zip(cx) {
        for i in 0..8 {
            a[i] += d8[i] as f64;
            b[i] += d8[i] as f64 * (x8[i] as f64 - mean);
        }
    }
    let mut sa: f64 = a.iter().sum();
    let mut sb: f64 = b.iter().sum();
    for (&d, &v) in rd.iter().zip(rx) {
        sa += d as f64;
        sb += d as f64 * (v as f64 - mean);
    }
    (sa, sb)
}

/// The portable path of [`sum_dy_dyx_masked`].
fn sum_dy_dyx_masked_portable(dy: &[f32], y: &[f32], x: &[f32], mean: f64) -> (f64, f64) {
    let (mut a, mut b) = ([0.0f64; 8], [0.0f64; 8]);
    let (cd, cy, cx) = (dy.chunks_exact(8), y.chunks_exact(8), x.chunks_exact(8));
    let (rd, ry, rx) = (cd.remainder(), cy.remainder(), cx.remainder());
    for ((d8, y8), x8) in cd.zip(cy).zip(cx) {
        for i in 0..8 {
            let d = if y8[i] > 0.0 { d8[i] } else { 0.0 };
            a[i] += d as f64;
            b[i] += d as f64 * (x8[i] as f64 - mean);
        }
    }
    let mut sa: f64 = a.iter().sum();
    let mut sb: f64 = b.iter().sum();
    for ((&d, &yv), &v) in rd.iter().zip(ry).zip(rx) {
        let d = if yv > 0.0 { d } else { 0.0 };
        sa += d as f64;
        sb += d as f64 * (v as f64 - mean);
    }
    (sa, sb)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// The portable sums written with AVX2 intrinsics: LLVM compiled their f32-to-f64 loops
    /// to scalar code (with branches for the mask), a tenth of a ResNet iteration. The same
    /// eight lanes and operations (multiply, then add: no FMA), so the same bits; `MASK`
    /// zeroes `dy` where `y > 0` fails (`+0.0`, as ReLU's backward pass leaves it).
    ///
    /// # Safety
    /// The CPU has AVX2; `x` (and `y` when `MASK`) are at least as long as `dy`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum_dy_dyx<const MASK: bool>(dy: &[f32], y: &[f32], x: &[f32], mean: f64) -> (f64, f64) {
        let n = if MASK { dy.len().min(x.len()).min(y.len()) } else { dy.len().min(x.len()) };
        let full = n / 8 * 8;
        let m = _mm256_set1_pd(mean);
        let (mut a0, mut a1, mut b0, mut b1) = (_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd());
        let mut i = 0;
        while i < full {
            // SAFETY: i + 8 <= n, within every slice read.
            let (mut d, xv) = unsafe { (_mm256_loadu_ps(dy.as_ptr().add(i)), _mm256_loadu_ps(x.as_ptr().add(i))) };
            if MASK {
                // SAFETY: as above.
                let yv = unsafe { _mm256_loadu_ps(y.as_ptr().add(i)) };
                d = _mm256_and_ps(d, _mm256_cmp_ps::<_CMP_GT_OQ>(yv, _mm256_setzero_ps()));
            }
            let (dlo, dhi) = (_mm256_cvtps_pd(_mm256_castps256_ps128(d)), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(d)));
            let (xlo, xhi) = (_mm256_cvtps_pd(_mm256_castps256_ps128(xv)), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(xv)));
            a0 = _mm256_add_pd(a0, dlo);
            a1 = _mm256_add_pd(a1, dhi);
            b0 = _mm256_add_pd(b0, _mm256_mul_pd(dlo, _mm256_sub_pd(xlo, m)));
            b1 = _mm256_add_pd(b1, _mm256_mul_pd(dhi, _mm256_sub_pd(xhi, m)));
            i += 8;
        }
        let (mut a, mut b) = ([0.0f64; 8], [0.0f64; 8]);
        // SAFETY: each array holds eight doubles.
        unsafe {
            _mm256_storeu_pd(a.as_mut_ptr(), a0);
            _mm256_storeu_pd(a.as_mut_ptr().add(4), a1);
            _mm256_storeu_pd(b.as_mut_ptr(), b0);
            _mm256_storeu_pd(b.as_mut_ptr().add(4), b1);
        }
        let mut sa: f64 = a.iter().sum();
        let mut sb: f64 = b.iter().sum();
        for j in full..n {
            let d = if !MASK || y[j] > 0.0 { dy[j] } else { 0.0 };
            sa += d as f64;
            sb += d as f64 * (x[j] as f64 - mean);
        }
        (sa, sb)
    }
}

crate::cpu::simd::multiversion! {
    /// `y = max(x * a + b, 0)` over one plane.
    fn scale_shift_relu / scale_shift_relu_portable(y: &mut [f32], x: &[f32], a: f32, b: f32) {
        for (yv, &xv) in y.iter_mut().zip(x) {
            *yv = (xv * a + b).max(0.0);
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y = x * a + b + r` over one plane.
    fn scale_shift_add / scale_shift_add_portable(y: &mut [f32], x: &[f32], r: &[f32], a: f32, b: f32) {
        for ((yv, &xv), &rv) in y.iter_mut().zip(x).zip(r) {
            *yv = (xv * a + b) + rv;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y = max(x * a + b + r, 0)` over one plane.
    fn scale_shift_add_relu / scale_shift_add_relu_portable(y: &mut [f32], x: &[f32], r: &[f32], a: f32, b: f32) {
        for ((yv, &xv), &rv) in y.iter_mut().zip(x).zip(r) {
            *yv = ((xv * a + b) + rv).max(0.0);
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `dx = a * m + b * x + k` with `m = dy` where `y > 0`, else 0.
    fn dx_plane_masked / dx_plane_masked_portable(dx: &mut [f32], dy: &[f32], y: &[f32], x: &[f32], a: f32, b: f32, k: f32) {
        for (((out, &dv), &yv), &xv) in dx.iter_mut().zip(dy).zip(y).zip(x) {
            let m = if yv > 0.0 { dv } else { 0.0 };
            *out = a * m + b * xv + k;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// [`dx_plane_masked`], also writing the masked gradient `m` to `dres`.
    fn dx_plane_masked_res / dx_plane_masked_res_portable(dx: &mut [f32], dres: &mut [f32], dy: &[f32], y: &[f32], x: &[f32], abk: (f32, f32, f32)) {
        let (a, b, k) = abk;
        for ((((out, r), &dv), &yv), &xv) in dx.iter_mut().zip(dres.iter_mut()).zip(dy).zip(y).zip(x) {
            let m = if yv > 0.0 { dv } else { 0.0 };
            *r = m;
            *out = a * m + b * xv + k;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y = x * a + b` over one plane.
    fn scale_shift / scale_shift_portable(y: &mut [f32], x: &[f32], a: f32, b: f32) {
        for (yv, &xv) in y.iter_mut().zip(x) {
            *yv = xv * a + b;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `dx = a * dy + b * x + k` over one plane.
    fn dx_plane / dx_plane_portable(dx: &mut [f32], dy: &[f32], x: &[f32], a: f32, b: f32, k: f32) {
        for ((out, &dv), &xv) in dx.iter_mut().zip(dy).zip(x) {
            *out = a * dv + b * xv + k;
        }
    }
}

/// `f(offset, channel)` of every (sample, channel) plane, indexed `[n * channels + c]`.
///
/// The planes are visited in memory order, each thread streaming through one contiguous run
/// of them: a loop per channel would jump a whole sample's planes at every step, which cost
/// the backward sums five times the time of the pass that applies them (the prefetchers
/// restart at every plane). Summing the per-plane results over `n` in order afterwards gives
/// the same bits as that loop did.
fn per_plane<R: Send>(ctx: CpuCtx<'_>, g: &BatchNormGeom, f: impl Fn(usize, usize) -> R + Sync + Send) -> Vec<R> {
    let planes = g.batch * g.channels;
    ctx.map((0..planes).collect(), |p| f(p * g.spatial, p % g.channels))
}

/// Mean and biased variance of each channel, accumulated in f64.
pub(crate) fn channel_stats(ctx: CpuCtx<'_>, g: &BatchNormGeom, x: &[f32]) -> Vec<(f64, f64)> {
    let (c, m) = (g.channels, g.count() as f64);
    let sums = per_plane(ctx, g, |o, _| sum_f64(&x[o..o + g.spatial]));
    let means: Vec<f64> = (0..c).map(|ch| (0..g.batch).fold(0.0f64, |s, n| s + sums[n * c + ch]) / m).collect();
    let devs = per_plane(ctx, g, |o, ch| sum_sq_dev(&x[o..o + g.spatial], means[ch]));
    means.iter().enumerate().map(|(ch, &mean)| (mean, (0..g.batch).fold(0.0f64, |v, n| v + devs[n * c + ch]) / m)).collect()
}

/// `y = relu?(x * scale[c] + shift[c] + residual?)`, in parallel over samples.
fn affine(ctx: CpuCtx<'_>, g: &BatchNormGeom, x: &[f32], ep: Epi<'_>, scale: &[f32], shift: &[f32], y: &mut [f32]) {
    let ranges = split_ranges(g.batch, ctx.groups(g.batch));
    let per = g.channels * g.spatial;
    let ys = split_mut_by(y, &ranges, per);
    let items: Vec<_> = ranges.into_iter().zip(ys).collect();
    ctx.for_each(items, |(r, yg)| {
        for (i, n) in r.enumerate() {
            for c in 0..g.channels {
                let o = (n * g.channels + c) * g.spatial;
                let d = (i * g.channels + c) * g.spatial;
                let (yp, xp) = (&mut yg[d..d + g.spatial], &x[o..o + g.spatial]);
                match (ep.residual, ep.relu) {
                    (None, false) => scale_shift(yp, xp, scale[c], shift[c]),
                    (None, true) => scale_shift_relu(yp, xp, scale[c], shift[c]),
                    (Some(r), false) => scale_shift_add(yp, xp, &r[o..o + g.spatial], scale[c], shift[c]),
                    (Some(r), true) => scale_shift_add_relu(yp, xp, &r[o..o + g.spatial], scale[c], shift[c]),
                }
            }
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn forward_train(
    ctx: CpuCtx<'_>,
    g: &BatchNormGeom,
    x: &[f32],
    ep: Epi<'_>,
    params: &[f32],
    y: &mut [f32],
    saved: &mut [f32],
    running: &mut [f32],
) {
    let c = g.channels;
    let stats = channel_stats(ctx, g, x);
    let (gamma, beta) = params.split_at(c);
    let (smean, sinv) = saved.split_at_mut(c);
    let (rmean, rvar) = running.split_at_mut(c);
    let m = g.count() as f64;
    let unbias = if g.count() > 1 { m / (m - 1.0) } else { 1.0 };
    let mom = g.momentum as f64;
    let mut scale = vec![0.0f32; c];
    let mut shift = vec![0.0f32; c];
    for (ch, &(mean, var)) in stats.iter().enumerate() {
        let inv = 1.0 / (var + g.eps as f64).sqrt();
        smean[ch] = mean as f32;
        sinv[ch] = inv as f32;
        scale[ch] = (gamma[ch] as f64 * inv) as f32;
        shift[ch] = (beta[ch] as f64 - mean * gamma[ch] as f64 * inv) as f32;
        rmean[ch] = ((1.0 - mom) * rmean[ch] as f64 + mom * mean) as f32;
        rvar[ch] = ((1.0 - mom) * rvar[ch] as f64 + mom * var * unbias) as f32;
    }
    affine(ctx, g, x, ep, &scale, &shift, y);
}

fn forward_infer(
    ctx: CpuCtx<'_>,
    g: &BatchNormGeom,
    x: &[f32],
    ep: Epi<'_>,
    params: &[f32],
    running: &[f32],
    y: &mut [f32],
) {
    let c = g.channels;
    let (gamma, beta) = params.split_at(c);
    let (rmean, rvar) = running.split_at(c);
    let mut scale = vec![0.0f32; c];
    let mut shift = vec![0.0f32; c];
    for ch in 0..c {
        let inv = 1.0 / (rvar[ch] as f64 + g.eps as f64).sqrt();
        scale[ch] = (gamma[ch] as f64 * inv) as f32;
        shift[ch] = (beta[ch] as f64 - rmean[ch] as f64 * gamma[ch] as f64 * inv) as f32;
    }
    affine(ctx, g, x, ep, &scale, &shift, y);
}

#[allow(clippy::too_many_arguments)]
fn backward(
    ctx: CpuCtx<'_>,
    g: &BatchNormGeom,
    x: &[f32],
    grad: Grad<'_>,
    params: &[f32],
    saved: &[f32],
    dx: &mut [f32],
    dparams: &mut [f32],
) {
    let c = g.channels;
    let gamma = &params[..c];
    let (smean, sinv) = saved.split_at(c);
    let Grad { dy, mask, dres } = grad;
    // dbeta = sum dy, dgamma = sum dy * xhat
    let parts = per_plane(ctx, g, |o, ch| {
        let (dyp, xp) = (&dy[o..o + g.spatial], &x[o..o + g.spatial]);
        match mask {
            Some(y) => sum_dy_dyx_masked(dyp, &y[o..o + g.spatial], xp, smean[ch] as f64),
            None => sum_dy_dyx(dyp, xp, smean[ch] as f64),
        }
    });
    let sums: Vec<(f64, f64)> = (0..c)
        .map(|ch| {
            let (sdy, sdyx) = (0..g.batch).fold((0.0f64, 0.0f64), |(a, b), n| (a + parts[n * c + ch].0, b + parts[n * c + ch].1));
            (sdy, sdyx * sinv[ch] as f64)
        })
        .collect();
    let (dgamma, dbeta) = dparams.split_at_mut(c);
    let m = g.count() as f64;
    // dx = gamma*inv/m * (m*dy - dbeta - xhat*dgamma) = a*dy + b*x + k
    let mut ka = vec![0.0f32; c];
    let mut kb = vec![0.0f32; c];
    let mut kc = vec![0.0f32; c];
    for ch in 0..c {
        let (sdy, sdyx) = sums[ch];
        dbeta[ch] = sdy as f32;
        dgamma[ch] = sdyx as f32;
        let (mean, inv, gm) = (smean[ch] as f64, sinv[ch] as f64, gamma[ch] as f64);
        let a = gm * inv;
        let b = -gm * inv * inv * sdyx / m;
        ka[ch] = a as f32;
        kb[ch] = b as f32;
        kc[ch] = (-a * sdy / m - b * mean) as f32;
    }
    let ranges = split_ranges(g.batch, ctx.groups(g.batch));
    let per = c * g.spatial;
    let dxs = split_mut_by(dx, &ranges, per);
    let dress: Vec<Option<&mut [f32]>> = match dres {
        Some(d) => split_mut_by(d, &ranges, per).into_iter().map(Some).collect(),
        None => ranges.iter().map(|_| None).collect(),
    };
    let items: Vec<_> = ranges.into_iter().zip(dxs.into_iter().zip(dress)).collect();
    ctx.for_each(items, |(r, (dxg, mut dresg))| {
        for (i, n) in r.enumerate() {
            for ch in 0..c {
                let o = (n * c + ch) * g.spatial;
                let d = (i * c + ch) * g.spatial;
                let (out, dyp, xp) = (&mut dxg[d..d + g.spatial], &dy[o..o + g.spatial], &x[o..o + g.spatial]);
                let (a, b, k) = (ka[ch], kb[ch], kc[ch]);
                match (mask, dresg.as_deref_mut()) {
                    (None, None) => dx_plane(out, dyp, xp, a, b, k),
                    (Some(y), None) => dx_plane_masked(out, dyp, &y[o..o + g.spatial], xp, a, b, k),
                    (Some(y), Some(rg)) => {
                        dx_plane_masked_res(out, &mut rg[d..d + g.spatial], dyp, &y[o..o + g.spatial], xp, (a, b, k))
                    }
                    (None, Some(rg)) => {
                        rg[d..d + g.spatial].copy_from_slice(dyp);
                        dx_plane(out, dyp, xp, a, b, k);
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::test_vectors;

    /// The dispatching functions (the AVX2 path on a CPU that has it) give the same bits as
    /// the portable path.
    #[test]
    fn avx2_and_portable_paths_agree_bit_for_bit() {
        for x in test_vectors() {
            let n = x.len();
            let dy: Vec<f32> = x.iter().map(|v| v * -0.3 + 0.1).collect();
            assert_eq!(sum_f64(&x).to_bits(), sum_f64_portable(&x).to_bits());
            assert_eq!(sum_sq_dev(&x, 0.3).to_bits(), sum_sq_dev_portable(&x, 0.3).to_bits());
            let (a, b) = (sum_dy_dyx(&dy, &x, -0.2), sum_dy_dyx_portable(&dy, &x, -0.2));
            assert_eq!((a.0.to_bits(), a.1.to_bits()), (b.0.to_bits(), b.1.to_bits()));
            let (mut a, mut b) = (vec![f32::NAN; n], vec![f32::NAN; n]);
            scale_shift(&mut a, &x, 1.3, -0.7);
            scale_shift_portable(&mut b, &x, 1.3, -0.7);
            assert_eq!(a, b);
            dx_plane(&mut a, &dy, &x, 0.9, -0.04, 0.01);
            dx_plane_portable(&mut b, &dy, &x, 0.9, -0.04, 0.01);
            assert_eq!(a, b);
            // The fused forms; `r` doubles as the residual and the ReLU's mask.
            let r: Vec<f32> = x.iter().map(|v| 0.25 - v * 0.5).collect();
            let (ma, mb) = (sum_dy_dyx_masked(&dy, &r, &x, 0.1), sum_dy_dyx_masked_portable(&dy, &r, &x, 0.1));
            assert_eq!((ma.0.to_bits(), ma.1.to_bits()), (mb.0.to_bits(), mb.1.to_bits()));
            scale_shift_relu(&mut a, &x, 1.3, -0.7);
            scale_shift_relu_portable(&mut b, &x, 1.3, -0.7);
            assert_eq!(a, b);
            scale_shift_add(&mut a, &x, &r, 1.3, -0.7);
            scale_shift_add_portable(&mut b, &x, &r, 1.3, -0.7);
            assert_eq!(a, b);
            scale_shift_add_relu(&mut a, &x, &r, 1.3, -0.7);
            scale_shift_add_relu_portable(&mut b, &x, &r, 1.3, -0.7);
            assert_eq!(a, b);
            dx_plane_masked(&mut a, &dy, &r, &x, 0.9, -0.04, 0.01);
            dx_plane_masked_portable(&mut b, &dy, &r, &x, 0.9, -0.04, 0.01);
            assert_eq!(a, b);
            let (mut ra, mut rb) = (vec![f32::NAN; n], vec![f32::NAN; n]);
            dx_plane_masked_res(&mut a, &mut ra, &dy, &r, &x, (0.9, -0.04, 0.01));
            dx_plane_masked_res_portable(&mut b, &mut rb, &dy, &r, &x, (0.9, -0.04, 0.01));
            assert_eq!((a.clone(), ra), (b.clone(), rb));
        }
    }
}
