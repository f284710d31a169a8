//! The weight gradient of the wide 3×3 layers (stride 1, padding 1, at least
//! `MIN_CHANNELS` channels in and out) by Winograd F(4×4, 3×3): the transpose of the
//! forward pass in `winograd.rs`.
//!
//! The forward pass computes each 4×4 output tile as `A^T [U ⊙ V] A` with `U = G g G^T` and
//! `V = B^T d B`; it is bilinear in `g` and `d` and equals the convolution exactly (up to
//! rounding), so its derivative in `g` is the weight gradient:
//!
//! `dg = G^T [ Σ_tiles M ⊙ V ] G`,  `M = A dy A^T`,
//!
//! where `dy` is the tile's 4×4 block of the output gradient (zero past the image's edge) and
//! the sum runs over every tile of every image. Summed over the images' tiles, the
//! element-wise product is, for each of the 36 positions `ξ`, the product
//! `dU[ξ] (co × c) += M[ξ]^T (co × tiles) · V[ξ] (tiles × c)`: 36 multiply-adds per tile
//! (16 output pixels) and channel pair instead of the direct kernel's 144, plus the
//! transforms of the input (as the forward pass's) and of `dy` (4×4 into 6×6), and at the
//! end one transform of `dU` into the 3×3 gradient.
//!
//! Layout: unlike the forward pass (one image per vector lane), the vectors here run over
//! channels — the product's rows and columns are channels, its sum runs over tiles — so each
//! image is transposed pixel-major (`xt[hp][wp][cp]`, zero-padded, and `dyt[4·th][4·tw][kp]`,
//! the channel counts rounded up to the vector width with zero channels), the transforms of a
//! chunk of images' tiles are written to `V[ξ][tile][cp]` and `M[ξ][tile][kp]` (kept within
//! L2), and a micro-kernel of [`MR`] output channels × up to four vectors of input channels
//! adds `M^T V` into `dU[ξ][kp][cp]` (broadcasts of `M`, loads of `V`; per position the
//! chunk's `V` and `M` stay in L1 across the tiles of `dU`).
//!
//! The batch is split over the threads as in the other weight-gradient kernels: each thread
//! sums its images into its own `dU` (and bias gradient), the threads' sums are added in
//! thread order when `dU` is transformed, so the result is deterministic for a given thread
//! count and CPU. Against the f64 definition it differs by the rounding of the transforms
//! (tested: [`super::tests`]'s Winograd weight-gradient bound).

use super::Conv2dGeom;
use super::winograd::{GM, SKEW, XI, add, bt, scale, sub, wide_layer};
use crate::cpu::CpuCtx;

/// Floats of `V` and `M` per chunk of images that the chunking aims at (512 KB): they are
/// written once and read once per position, in L2.
const CHUNK_FLOATS: usize = 128 * 1024;

/// Output channels (rows of `dU`) per micro-kernel tile.
const MR: usize = 4;

/// The weight gradient of one 3×3, stride-1, padding-1 convolution of `c` channels of
/// `h × w` into `co` channels, by F(4×4, 3×3), with vectors of `vw` channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WinogradParams {
    pub c: usize,
    pub co: usize,
    pub h: usize,
    pub w: usize,
    /// Channels per vector: 16 with AVX-512, 8 with AVX2.
    pub vw: usize,
}

/// `A y` for 4 lane vectors (`A` is 6×4, the transpose of the forward pass's output
/// transform `A^T`).
#[inline(always)]
fn a_col<const G: usize>(y: [[f32; G]; 4]) -> [[f32; G]; 6] {
    let [y0, y1, y2, y3] = y;
    let (s02, s13) = (add(y0, y2), add(y1, y3));
    let (t02, t13) = (add(y0, scale(y2, 4.0)), add(scale(y1, 2.0), scale(y3, 8.0)));
    [y0, add(s02, s13), sub(s02, s13), add(t02, t13), sub(t02, t13), y3]
}

impl WinogradParams {
    /// The weight gradient of `g` where this path applies: the shapes of [`super::winograd`]'s
    /// path (3×3, stride 1, padding 1, at least [`super::winograd::MIN_CHANNELS`] in and out,
    /// `CROSSBOW_WINOGRAD` not off) on a CPU with AVX-512 or AVX2, at any batch (the vectors
    /// run over channels, so no batch leaves lanes empty).
    pub(crate) fn of(g: &Conv2dGeom) -> Option<WinogradParams> {
        if !wide_layer(g) {
            return None;
        }
        let vw = if crate::cpu::simd::has_avx512() {
            16
        } else if crate::cpu::simd::has_avx2() {
            8
        } else {
            return None;
        };
        Some(WinogradParams { c: g.in_channels, co: g.out_channels, h: g.in_h, w: g.in_w, vw })
    }

    fn th(&self) -> usize {
        self.h.div_ceil(4)
    }

    fn tw(&self) -> usize {
        self.w.div_ceil(4)
    }

    fn tiles(&self) -> usize {
        self.th() * self.tw()
    }

    /// Input channels rounded up to the vector width: the row length of `xt`, `V` and `dU`.
    fn cp(&self) -> usize {
        self.c.next_multiple_of(self.vw)
    }

    /// Output channels rounded up to the vector width: the row length of `dyt` and `M`,
    /// the rows of `dU`.
    fn kp(&self) -> usize {
        self.co.next_multiple_of(self.vw)
    }

    /// Height and width of `xt`: every tile's 6×6 input block inside it.
    fn padded(&self) -> (usize, usize) {
        (4 * self.th() + 2, 4 * self.tw() + 2)
    }

    /// Images whose tiles are transformed before the products run: as many as keep `V` and
    /// `M` within [`CHUNK_FLOATS`], at least one.
    fn chunk_images(&self) -> usize {
        (CHUNK_FLOATS / (XI * (self.cp() + self.kp()) * self.tiles())).max(1)
    }

    /// Floats between the positions' planes of `V` and of `M`.
    fn strides(&self) -> (usize, usize) {
        let cols = self.chunk_images() * self.tiles();
        (cols * self.cp() + SKEW, cols * self.kp() + SKEW)
    }

    /// Floats of one thread's `dU`.
    fn du_len(&self) -> usize {
        XI * self.kp() * self.cp()
    }

    /// Floats of one thread's scratch, in order: `dU`, the bias gradient (`kp`), `xt`, `dyt`,
    /// a transpose buffer, `V`, `M`.
    pub(crate) fn scratch_len(&self) -> usize {
        let (hp, wp) = self.padded();
        let (vs, ms) = self.strides();
        let (cp, kp) = (self.cp(), self.kp());
        self.du_len() + kp + hp * wp * cp + 16 * self.tiles() * kp + self.h * self.w * cp.max(kp) + XI * (vs + ms)
    }

    /// The workspace of `groups` threads.
    pub(crate) fn workspace_len(&self, groups: usize) -> usize {
        groups * self.scratch_len()
    }

    /// One thread's sums over images `images` of `x[img][c][h][w]` and `dy[img][co][h][w]`:
    /// `dU` and the bias gradient, at the start of `scratch` ([`WinogradParams::scratch_len`]
    /// floats, any contents).
    pub(crate) fn accumulate(&self, x: &[f32], dy: &[f32], images: std::ops::Range<usize>, scratch: &mut [f32]) {
        let (in_img, out_img) = (self.c * self.h * self.w, self.co * self.h * self.w);
        assert!(x.len() >= images.end * in_img && dy.len() >= images.end * out_img, "winograd params: short operand");
        assert!(scratch.len() >= self.scratch_len(), "winograd params: short scratch");
        #[cfg(target_arch = "x86_64")]
        {
            if self.vw == 16 && crate::cpu::simd::has_avx512() {
                // SAFETY: the CPU has AVX-512F; the lengths were checked above.
                unsafe { self.accumulate_avx512(x, dy, images, scratch) };
                return;
            }
            if self.vw == 8 && crate::cpu::simd::has_avx2() {
                // SAFETY: the CPU has AVX2 and FMA; the lengths were checked above.
                unsafe { self.accumulate_avx2(x, dy, images, scratch) };
                return;
            }
        }
        unreachable!("WinogradParams is only made where AVX-512 or AVX2 runs ({} channels per vector)", self.vw)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn accumulate_avx512(&self, x: &[f32], dy: &[f32], images: std::ops::Range<usize>, sc: &mut [f32]) {
        self.accumulate_lanes::<16>(x, dy, images, sc, |m, v, cols, du, cp, kp| {
            // SAFETY: AVX-512F runs; the caller passes whole planes (see `products`).
            unsafe { x86::products_avx512(m, v, cols, du, cp, kp) }
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn accumulate_avx2(&self, x: &[f32], dy: &[f32], images: std::ops::Range<usize>, sc: &mut [f32]) {
        self.accumulate_lanes::<8>(x, dy, images, sc, |m, v, cols, du, cp, kp| {
            // SAFETY: AVX2 and FMA run; the caller passes whole planes (see `products`).
            unsafe { x86::products_avx2(m, v, cols, du, cp, kp) }
        })
    }

    /// [`WinogradParams::accumulate`] with vectors of `G` channels; `products(m, v, cols, du,
    /// cp, kp)` adds one position's `M^T V` over `cols` tiles into its `dU` plane.
    #[inline(always)]
    fn accumulate_lanes<const G: usize>(
        &self,
        x: &[f32],
        dy: &[f32],
        images: std::ops::Range<usize>,
        sc: &mut [f32],
        products: impl Fn(&[f32], &[f32], usize, &mut [f32], usize, usize),
    ) {
        let (hp, wp) = self.padded();
        let (c, co, h, w) = (self.c, self.co, self.h, self.w);
        let (cp, kp, tw, tiles) = (self.cp(), self.kp(), self.tw(), self.tiles());
        let (in_img, out_img) = (c * h * w, co * h * w);
        let (vs, ms) = self.strides();
        let (du, rest) = sc.split_at_mut(self.du_len());
        let (db, rest) = rest.split_at_mut(kp);
        let (xt, rest) = rest.split_at_mut(hp * wp * cp);
        let (dyt, rest) = rest.split_at_mut(16 * tiles * kp);
        let (tmp, rest) = rest.split_at_mut(h * w * cp.max(kp));
        let (v, rest) = rest.split_at_mut(XI * vs);
        let m = &mut rest[..XI * ms];
        du.fill(0.0);
        db.fill(0.0);
        // The padding of xt and the edge of dyt stay zero: each image rewrites the interior.
        xt.fill(0.0);
        dyt.fill(0.0);
        let per_chunk = self.chunk_images();
        let mut filled = 0;
        for n in images.clone() {
            // Pixel-major copies: row by row straight into place where the channels fill
            // whole vectors (the ResNets), else through `tmp` with the channels padded.
            let xi = &x[n * in_img..][..in_img];
            if c == cp {
                for y in 0..h {
                    crate::cpu::simd::transpose_ld(&xi[y * w..], c, w, h * w, &mut xt[((y + 1) * wp + 1) * cp..][..w * cp]);
                }
            } else {
                crate::cpu::simd::transpose_padded(xi, c, h * w, cp, tmp);
                for y in 0..h {
                    xt[((y + 1) * wp + 1) * cp..][..w * cp].copy_from_slice(&tmp[y * w * cp..][..w * cp]);
                }
            }
            let dyi = &dy[n * out_img..][..out_img];
            if co == kp {
                for y in 0..h {
                    crate::cpu::simd::transpose_ld(&dyi[y * w..], co, w, h * w, &mut dyt[y * 4 * tw * kp..][..w * kp]);
                }
            } else {
                crate::cpu::simd::transpose_padded(dyi, co, h * w, kp, tmp);
                for y in 0..h {
                    dyt[y * 4 * tw * kp..][..w * kp].copy_from_slice(&tmp[y * w * kp..][..w * kp]);
                }
            }
            // The bias gradient: each channel's sum over the image's pixels in order, added.
            for kv in (0..kp).step_by(G) {
                let mut s = [0.0f32; G];
                for y in 0..h {
                    for x in 0..w {
                        let at = (y * 4 * tw + x) * kp + kv;
                        s = add(s, <[f32; G]>::try_from(&dyt[at..at + G]).unwrap_or([0.0; G]));
                    }
                }
                for (d, s) in db[kv..kv + G].iter_mut().zip(s) {
                    *d += s;
                }
            }
            let col0 = filled * tiles;
            self.input_tiles::<G>(xt, v, vs, col0);
            self.gradient_tiles::<G>(dyt, m, ms, col0);
            filled += 1;
            if filled == per_chunk || n + 1 == images.end {
                let cols = filled * tiles;
                for xi in 0..XI {
                    products(&m[xi * ms..][..cols * kp], &v[xi * vs..][..cols * cp], cols, &mut du[xi * kp * cp..][..kp * cp], cp, kp);
                }
                filled = 0;
            }
        }
    }

    /// The input transform `B^T d B` of every tile of the image in `xt` into
    /// `v[ξ][col0 + tile][cp]`, one vector of channels at a time.
    #[inline(always)]
    fn input_tiles<const G: usize>(&self, xt: &[f32], v: &mut [f32], vs: usize, col0: usize) {
        let (_, wp) = self.padded();
        let (cp, tw) = (self.cp(), self.tw());
        // B^T d, row-major, reused by every tile: 36 vectors do not fit the registers, and
        // arrays built per tile (`array::from_fn`) were moved with `memcpy` calls, a quarter
        // of the time.
        let mut s = [[0.0f32; G]; XI];
        for tile in 0..self.tiles() {
            let (ty, tx) = (tile / tw, tile % tw);
            for cv in (0..cp).step_by(G) {
                let ld = |i: usize, j: usize| -> [f32; G] {
                    let at = ((4 * ty + i) * wp + 4 * tx + j) * cp + cv;
                    <[f32; G]>::try_from(&xt[at..at + G]).unwrap_or([0.0; G])
                };
                for j in 0..6 {
                    let col = bt([ld(0, j), ld(1, j), ld(2, j), ld(3, j), ld(4, j), ld(5, j)]);
                    for (i, r) in col.iter().enumerate() {
                        s[6 * i + j] = *r;
                    }
                }
                let at = (col0 + tile) * cp + cv;
                for i in 0..6 {
                    let row = bt([s[6 * i], s[6 * i + 1], s[6 * i + 2], s[6 * i + 3], s[6 * i + 4], s[6 * i + 5]]);
                    for (j, r) in row.iter().enumerate() {
                        v[(i * 6 + j) * vs + at..][..G].copy_from_slice(r);
                    }
                }
            }
        }
    }

    /// The gradient transform `A dy A^T` of every tile of the image in `dyt` into
    /// `m[ξ][col0 + tile][kp]`, one vector of channels at a time.
    #[inline(always)]
    fn gradient_tiles<const G: usize>(&self, dyt: &[f32], m: &mut [f32], ms: usize, col0: usize) {
        let (kp, tw) = (self.kp(), self.tw());
        // A dy, row-major (6 × 4), reused by every tile (see `input_tiles`).
        let mut s = [[0.0f32; G]; 24];
        for tile in 0..self.tiles() {
            let (ty, tx) = (tile / tw, tile % tw);
            for kv in (0..kp).step_by(G) {
                let ld = |a: usize, b: usize| -> [f32; G] {
                    let at = ((4 * ty + a) * 4 * tw + 4 * tx + b) * kp + kv;
                    <[f32; G]>::try_from(&dyt[at..at + G]).unwrap_or([0.0; G])
                };
                for b in 0..4 {
                    let col = a_col([ld(0, b), ld(1, b), ld(2, b), ld(3, b)]);
                    for (i, r) in col.iter().enumerate() {
                        s[4 * i + b] = *r;
                    }
                }
                let at = (col0 + tile) * kp + kv;
                for i in 0..6 {
                    let row = a_col([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
                    for (j, r) in row.iter().enumerate() {
                        m[(i * 6 + j) * ms + at..][..G].copy_from_slice(r);
                    }
                }
            }
        }
    }

    /// The gradient from the threads' scratches (each after [`WinogradParams::accumulate`],
    /// in thread order): `dU` summed over the threads in order, `dg = G^T dU G` into
    /// `dparams` (weights `[co][c][3][3]`, then the bias, summed the same way, where `bias`).
    /// Split over the backend's threads by output channels.
    pub(crate) fn finish(&self, ctx: CpuCtx<'_>, scratches: &[&[f32]], bias: bool, dparams: &mut [f32]) {
        let (c, co) = (self.c, self.co);
        assert!(dparams.len() >= co * c * 9 + if bias { co } else { 0 }, "winograd params: short gradient");
        assert!(scratches.iter().all(|s| s.len() >= self.du_len() + self.kp()), "winograd params: short scratch");
        let (dw, db) = dparams.split_at_mut(co * c * 9);
        if bias {
            for (k, d) in db[..co].iter_mut().enumerate() {
                let mut s = 0.0;
                for sc in scratches {
                    s += sc[self.du_len() + k];
                }
                *d = s;
            }
        }
        let rows: Vec<_> = dw[..co * c * 9].chunks_mut(c * 9).enumerate().collect();
        ctx.for_each(rows, |(k, row)| {
            #[cfg(target_arch = "x86_64")]
            {
                if self.vw == 16 && crate::cpu::simd::has_avx512() {
                    // SAFETY: the CPU has AVX-512F; the lengths were checked above.
                    unsafe { self.finish_row_avx512(scratches, k, row) };
                    return;
                }
                if crate::cpu::simd::has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA; the lengths were checked above.
                    unsafe { self.finish_row_avx2(scratches, k, row) };
                    return;
                }
            }
            unreachable!("WinogradParams is only made where AVX-512 or AVX2 runs")
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn finish_row_avx512(&self, scratches: &[&[f32]], k: usize, row: &mut [f32]) {
        self.finish_row::<16>(scratches, k, row)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn finish_row_avx2(&self, scratches: &[&[f32]], k: usize, row: &mut [f32]) {
        self.finish_row::<8>(scratches, k, row)
    }

    /// Row `k` of the weight gradient, `row[ci·9 + 3·ky + kx]`, `G` input channels at a time:
    /// `T_i[l] = Σ_j dU[6i + j] G[j][l]` one row `i` of positions at a time, added into
    /// `dg[ky][l] = Σ_i G[i][ky] T_i[l]` (18 vectors live, no 36-vector array: those were
    /// built on the stack and copied).
    #[inline(always)]
    fn finish_row<const G: usize>(&self, scratches: &[&[f32]], k: usize, row: &mut [f32]) {
        let (c, cp, kp) = (self.c, self.cp(), self.kp());
        for cv in (0..cp).step_by(G) {
            let du = |xi: usize| -> [f32; G] {
                let at = (xi * kp + k) * cp + cv;
                let mut s = [0.0f32; G];
                for sc in scratches {
                    s = add(s, <[f32; G]>::try_from(&sc[at..at + G]).unwrap_or([0.0; G]));
                }
                s
            };
            let mut dg = [[[0.0f32; G]; 3]; 3];
            for (i, gi) in GM.iter().enumerate() {
                let d = [du(6 * i), du(6 * i + 1), du(6 * i + 2), du(6 * i + 3), du(6 * i + 4), du(6 * i + 5)];
                for l in 0..3 {
                    let mut t = scale(d[0], GM[0][l]);
                    for (j, dj) in d.iter().enumerate().skip(1) {
                        t = add(t, scale(*dj, GM[j][l]));
                    }
                    for (ky, dgk) in dg.iter_mut().enumerate() {
                        dgk[l] = if i == 0 { scale(t, gi[ky]) } else { add(dgk[l], scale(t, gi[ky])) };
                    }
                }
            }
            for (ky, dgk) in dg.iter().enumerate() {
                for (l, g) in dgk.iter().enumerate() {
                    for (lane, v) in g.iter().enumerate().take(c.saturating_sub(cv)) {
                        row[(cv + lane) * 9 + 3 * ky + l] = *v;
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::MR;

    /// One position's `dU[kp][cp] += M^T V`, `m[cols][kp]`, `v[cols][cp]`, in tiles of
    /// [`MR`] rows × up to 4 vectors of 16 channels.
    ///
    /// # Safety
    /// AVX-512F runs; `m`, `v`, `du` hold `cols·kp`, `cols·cp`, `kp·cp` floats; `cp` and
    /// `kp` are multiples of 16.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn products_avx512(m: &[f32], v: &[f32], cols: usize, du: &mut [f32], cp: usize, kp: usize) {
        assert!(m.len() >= cols * kp && v.len() >= cols * cp && du.len() >= kp * cp);
        assert!(cp.is_multiple_of(16) && kp.is_multiple_of(MR));
        let (m, v, du) = (m.as_ptr(), v.as_ptr(), du.as_mut_ptr());
        // SAFETY: every tile reads rows `k0..k0 + MR` of `m`'s columns and vectors
        // `c0..c0 + 16·NR <= cp` of `v`'s rows, inside the lengths asserted above.
        unsafe {
            for k0 in (0..kp).step_by(MR) {
                let mut c0 = 0;
                while c0 < cp {
                    let (mk, vc, dt) = (m.add(k0), v.add(c0), du.add(k0 * cp + c0));
                    match (cp - c0) / 16 {
                        1 => tile16::<1>(mk, kp, vc, cp, cols, dt, cp),
                        2 => tile16::<2>(mk, kp, vc, cp, cols, dt, cp),
                        3 => tile16::<3>(mk, kp, vc, cp, cols, dt, cp),
                        _ => tile16::<4>(mk, kp, vc, cp, cols, dt, cp),
                    }
                    c0 += 16 * ((cp - c0) / 16).min(4);
                }
            }
        }
    }

    /// `MR × NR` vectors of `dU` (rows `ldu` apart) `+= Σ_col m[col·ldm + r] · v[col·ldv + 16n ..]`.
    ///
    /// # Safety
    /// AVX-512F runs; the pointers cover what is read and written.
    #[inline(always)]
    unsafe fn tile16<const NR: usize>(m: *const f32, ldm: usize, v: *const f32, ldv: usize, cols: usize, du: *mut f32, ldu: usize) {
        // SAFETY: as this function's contract.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); NR]; MR];
            for (r, row) in acc.iter_mut().enumerate() {
                for (n, a) in row.iter_mut().enumerate() {
                    *a = _mm512_loadu_ps(du.add(r * ldu + 16 * n));
                }
            }
            for col in 0..cols {
                let (mc, vc) = (m.add(col * ldm), v.add(col * ldv));
                let mut b = [_mm512_setzero_ps(); NR];
                for (n, bn) in b.iter_mut().enumerate() {
                    *bn = _mm512_loadu_ps(vc.add(16 * n));
                }
                for (r, row) in acc.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(*mc.add(r));
                    for (x, bn) in row.iter_mut().zip(b) {
                        *x = _mm512_fmadd_ps(a, bn, *x);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                for (n, a) in row.iter().enumerate() {
                    _mm512_storeu_ps(du.add(r * ldu + 16 * n), *a);
                }
            }
        }
    }

    /// [`products_avx512`] with vectors of 8 channels, tiles of [`MR`] rows × up to 3
    /// vectors (12 accumulators in 16 registers).
    ///
    /// # Safety
    /// AVX2 and FMA run; lengths as [`products_avx512`]'s, `cp` a multiple of 8.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn products_avx2(m: &[f32], v: &[f32], cols: usize, du: &mut [f32], cp: usize, kp: usize) {
        assert!(m.len() >= cols * kp && v.len() >= cols * cp && du.len() >= kp * cp);
        assert!(cp.is_multiple_of(8) && kp.is_multiple_of(MR));
        let (m, v, du) = (m.as_ptr(), v.as_ptr(), du.as_mut_ptr());
        // SAFETY: as in products_avx512, vectors of 8.
        unsafe {
            for k0 in (0..kp).step_by(MR) {
                let mut c0 = 0;
                while c0 < cp {
                    let (mk, vc, dt) = (m.add(k0), v.add(c0), du.add(k0 * cp + c0));
                    // Blocks of 3 vectors, 2 + 2 rather than 3 + 1 for four.
                    let nr = match (cp - c0) / 8 {
                        4 => 2,
                        left => left.min(3),
                    };
                    match nr {
                        1 => tile8::<1>(mk, kp, vc, cp, cols, dt, cp),
                        2 => tile8::<2>(mk, kp, vc, cp, cols, dt, cp),
                        _ => tile8::<3>(mk, kp, vc, cp, cols, dt, cp),
                    }
                    c0 += 8 * nr;
                }
            }
        }
    }

    /// [`tile16`] with vectors of 8.
    ///
    /// # Safety
    /// AVX2 and FMA run; the pointers cover what is read and written.
    #[inline(always)]
    unsafe fn tile8<const NR: usize>(m: *const f32, ldm: usize, v: *const f32, ldv: usize, cols: usize, du: *mut f32, ldu: usize) {
        // SAFETY: as this function's contract.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); NR]; MR];
            for (r, row) in acc.iter_mut().enumerate() {
                for (n, a) in row.iter_mut().enumerate() {
                    *a = _mm256_loadu_ps(du.add(r * ldu + 8 * n));
                }
            }
            for col in 0..cols {
                let (mc, vc) = (m.add(col * ldm), v.add(col * ldv));
                let mut b = [_mm256_setzero_ps(); NR];
                for (n, bn) in b.iter_mut().enumerate() {
                    *bn = _mm256_loadu_ps(vc.add(8 * n));
                }
                for (r, row) in acc.iter_mut().enumerate() {
                    let a = _mm256_broadcast_ss(&*mc.add(r));
                    for (x, bn) in row.iter_mut().zip(b) {
                        *x = _mm256_fmadd_ps(a, bn, *x);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                for (n, a) in row.iter().enumerate() {
                    _mm256_storeu_ps(du.add(r * ldu + 8 * n), *a);
                }
            }
        }
    }
}
