//! The x86-64 kernels of the direct convolutions (AVX-512 and AVX2 + FMA): the window
//! micro-kernels, the padded and ragged row kernels, and the weight-gradient tiles.

use std::arch::x86_64::*;

use super::{AVX2_MR, Direct, MAX_SEGS, MR, NV, PARAMS_CB, ParamsDirect};
#[cfg(test)]
use super::Rows;

const NV512: usize = NV;
use super::{Plan, SLOTS};
const NV256: usize = 1;

/// Generates the kernel for one vector width.
macro_rules! direct_kernel {
    ($name:ident, $feat:literal, $lanes:expr, $nv:expr, $vec:ty, $zero:expr, $load:expr, $set1:expr, $fma:expr, $add_store:expr) => {
        /// # Safety
        /// The CPU has the target features; `src`, `wp`, `bias` and `dst` are at least as
        /// long as [`Direct::run`] checks.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $name(d: &Direct, plan: &Plan, src: &[f32], wp: &[f32], bias: Option<&[f32]>, dst: &mut [f32]) {
            // SAFETY: the weight offsets stay below `packed_len()`, the segment offsets
            // below the tile's table, the loads read only lanes whose mask says they lie in
            // the image and the stores only the first `n` lanes of an output row block
            // (the caller checked every length).
            unsafe {
            const LANES: usize = $lanes;
            const NV: usize = $nv;
            let (hw, taps) = (d.h * d.w, d.taps());
            let p_end = d.oh() * d.ow();
            let per_tile = taps * SLOTS * MAX_SEGS;
            let sp = src.as_ptr();
            for p0 in (0..p_end).step_by(LANES * NV) {
                let ti = p0 / (LANES * NV);
                let (counts, tsegs) = (plan.counts[ti], plan.segs.as_ptr().add(ti * per_tile));
                for b in 0..d.co.div_ceil(MR) {
                    let wb = wp.as_ptr().add(b * d.c * taps * MR);
                    let mut acc: [[$vec; NV]; MR] = [[$zero; NV]; MR];
                    for c in 0..d.c {
                        let base = sp.wrapping_add(c * hw);
                        let wc = wb.add(c * taps * MR);
                        for t in 0..taps {
                            let mut x: [$vec; NV] = [$zero; NV];
                            for v in 0..NV {
                                let segs = tsegs.add((t * SLOTS + v) * MAX_SEGS);
                                for s in 0..counts[v] {
                                    let sg = *segs.add(s);
                                    x[v] = $load(x[v], sg.mask, base.wrapping_offset(sg.off));
                                }
                            }
                            let wt = wc.add(t * MR);
                            for i in 0..MR {
                                let a = $set1(*wt.add(i));
                                for v in 0..NV {
                                    acc[i][v] = $fma(a, x[v], acc[i][v]);
                                }
                            }
                        }
                    }
                    for i in 0..MR {
                        let co = b * MR + i;
                        if co >= d.co {
                            break;
                        }
                        let bv = bias.map_or(0.0, |bb| bb[co]);
                        for v in 0..NV {
                            let p = p0 + v * LANES;
                            if p >= p_end {
                                break;
                            }
                            let n = (p_end - p).min(LANES);
                            $add_store(acc[i][v], bv, dst.as_mut_ptr().add(co * p_end + p), n);
                        }
                    }
                }
            }
            }
        }
    };
}

#[inline(always)]
unsafe fn load512(x: __m512, mask: u32, p: *const f32) -> __m512 {
    // SAFETY: (as the caller guarantees) every lane whose mask bit is set addresses an element of the
    // source image; masked-off lanes are not read (AVX-512 masked loads do not fault).
    unsafe { _mm512_mask_loadu_ps(x, mask as __mmask16, p) }
}

#[inline(always)]
unsafe fn store512(v: __m512, bias: f32, p: *mut f32, n: usize) {
    let mask: __mmask16 = if n >= 16 { 0xffff } else { ((1u32 << n) - 1) as __mmask16 };
    // SAFETY: (as the caller guarantees) the first n lanes are elements of the destination.
    unsafe { _mm512_mask_storeu_ps(p, mask, _mm512_add_ps(v, _mm512_set1_ps(bias))) }
}

direct_kernel!(
    run_avx512,
    "avx512f",
    16,
    NV512,
    __m512,
    _mm512_setzero_ps(),
    load512,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    store512
);

/// The lanes of `mask` as an AVX2 lane mask (all ones where the bit is set).
///
/// # Safety
/// The CPU has AVX2 (only the AVX2 kernel calls it).
#[inline(always)]
unsafe fn mask256(mask: u32) -> __m256i {
    // SAFETY: register arithmetic only; the caller guarantees AVX2.
    unsafe {
        let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        let m = _mm256_and_si256(_mm256_set1_epi32(mask as i32), bits);
        _mm256_cmpeq_epi32(m, bits)
    }
}

#[inline(always)]
unsafe fn load256(x: __m256, mask: u32, p: *const f32) -> __m256 {
    // SAFETY: the caller runs on a CPU with AVX2.
    let m = unsafe { mask256(mask) };
    // SAFETY: (as the caller guarantees) lanes with their mask bit set address elements of the source;
    // `vmaskmovps` does not read (or fault on) masked-off lanes.
    unsafe { _mm256_blendv_ps(x, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m)) }
}

#[inline(always)]
unsafe fn store256(v: __m256, bias: f32, p: *mut f32, n: usize) {
    // SAFETY: the caller runs on a CPU with AVX2.
    let m = unsafe { mask256(if n >= 8 { 0xff } else { (1u32 << n) - 1 }) };
    // SAFETY: (as the caller guarantees) the first n lanes are elements of the destination.
    unsafe { _mm256_maskstore_ps(p, m, _mm256_add_ps(v, _mm256_set1_ps(bias))) }
}

direct_kernel!(
    run_avx2,
    "avx2,fma",
    8,
    NV256,
    __m256,
    _mm256_setzero_ps(),
    load256,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    store256
);

/// The AVX-512 kernel over a zero-padded copy `xp[c, hp, wp]` of the source: no masks and
/// no segment table. A tile is 32 output pixels (2 vectors) × [`MR`] output channels;
/// with `PAIRS` each vector is two output rows of 8 pixels (two half loads), else 16
/// pixels of one row; `S` is the stride (the copy's phase planes make every stride read
/// consecutive floats). Same order of additions as the masked kernels: `(c, ki, kj)`.
///
/// # Safety
/// The CPU has AVX-512F; `xp` holds `c·hp·wp` floats; `wp` (the packed weights), `bias`
/// and `dst` are as long as [`Direct::run`] checks; `oh·ow` is a multiple of 32 and the
/// row width a multiple of 16 (or 8 with `PAIRS`).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run_padded_avx512<const PAIRS: bool, const S: usize>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) {
    // SAFETY: as this function's contract.
    unsafe {
        match ((d.kh, d.kw), S) {
            // Winograd's products: the loop over the input channels alone.
            ((1, 1), 1) => padded_avx512::<PAIRS, S, 1>(d, xp, wp, bias, dst),
            _ => padded_avx512::<PAIRS, S, 0>(d, xp, wp, bias, dst),
        }
    }
}

/// [`run_padded_avx512`], with the taps' loops of constant trip counts for a `K × K`
/// kernel (`K` 1; 0: the kernel's size at run time).
///
/// # Safety
/// As [`run_padded_avx512`]; with `K > 0` a `K × K` kernel.
#[inline(always)]
unsafe fn padded_avx512<const PAIRS: bool, const S: usize, const K: usize>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) {
    let (kh, kw) = if K > 0 { (K, K) } else { (d.kh, d.kw) };
    // SAFETY: every tap of every output pixel (oy + ki < hp, ox + kj < wp) lies in `xp`;
    // the weight offsets stay below `packed_len()`; the stores write whole vectors of
    // the `oh·ow` pixels of output channels below `co`.
    unsafe {
        let (hp, pitch) = d.padded_dims();
        let plane = S * hp * pitch;
        let (ow, p_end, taps) = (d.ow(), d.oh() * d.ow(), d.taps());
        let start = |p: usize| S * (p / ow) * pitch + p % ow;
        let (lo, hi) = (0x00ff as __mmask16, 0xff00 as __mmask16);
        for p0 in (0..p_end).step_by(32) {
            let (s0, s1) = (start(p0), start(p0 + 16));
            // With PAIRS, the second row of each vector (its lanes 8..16 read 8 floats
            // before the pointer, hence the - 8).
            let (h0, h1) = if PAIRS { (start(p0 + 8) - 8, start(p0 + 24) - 8) } else { (0, 0) };
            for b in 0..d.co.div_ceil(MR) {
                let wb = wp.as_ptr().add(b * d.c * taps * MR);
                let mut acc = [[_mm512_setzero_ps(); 2]; MR];
                for c in 0..d.c {
                    let xc = xp.as_ptr().add(c * plane);
                    let wc = wb.add(c * taps * MR);
                    for ki in 0..kh {
                        for kj in 0..kw {
                            let off = ki * pitch + (kj % S) * hp * pitch + kj / S;
                            let x = if PAIRS {
                                [
                                    _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(lo, xc.add(s0 + off)), hi, xc.add(h0 + off)),
                                    _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(lo, xc.add(s1 + off)), hi, xc.add(h1 + off)),
                                ]
                            } else {
                                [_mm512_loadu_ps(xc.add(s0 + off)), _mm512_loadu_ps(xc.add(s1 + off))]
                            };
                            let wt = wc.add((ki * kw + kj) * MR);
                            for (i, a) in acc.iter_mut().enumerate() {
                                let w = _mm512_set1_ps(*wt.add(i));
                                a[0] = _mm512_fmadd_ps(w, x[0], a[0]);
                                a[1] = _mm512_fmadd_ps(w, x[1], a[1]);
                            }
                        }
                    }
                }
                for (i, a) in acc.iter().enumerate() {
                    let co = b * MR + i;
                    if co >= d.co {
                        break;
                    }
                    let bv = _mm512_set1_ps(bias.map_or(0.0, |bb| bb[co]));
                    let out = dst.as_mut_ptr().add(co * p_end + p0);
                    _mm512_storeu_ps(out, _mm512_add_ps(a[0], bv));
                    _mm512_storeu_ps(out.add(16), _mm512_add_ps(a[1], bv));
                }
            }
        }
    }
}

/// The AVX2 kernel over a zero-padded copy `xp[c, hp, wp]` of the source: no masks and no
/// segment table. Register-blocked for 16 YMM registers: a tile is [`AVX2_V`] vectors of 8
/// output pixels (each inside one output row) × [`AVX2_MR`] output channels (one block
/// of packed weights), 12 accumulators; per input channel and tap, 2 loads and 6
/// broadcasts from consecutive addresses feed 12 FMAs (15 registers: with all 16 in use
/// LLVM spills an accumulator). Same order of additions as every other direct kernel:
/// `(c, ki, kj)`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `xp` holds `c·hp·wp` floats; `wp` (the weights packed in
/// blocks of [`AVX2_MR`]), `bias` and `dst` are as long as [`Direct::run`] checks; the
/// output rows are a multiple of 8 pixels wide.
/// With `RAGGED`, output rows of any width: each is computed [`super::Rows::Ragged`]'s
/// way, rounded up to a multiple of 8, from a copy of [`Direct::padded_dims_for`] that width.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn run_padded_avx2<const RAGGED: bool>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) {
    // SAFETY: as this function's contract.
    unsafe {
        match ((d.kh, d.kw), d.s) {
            ((3, 3), 1) => padded_avx2::<3, 1, RAGGED>(d, xp, wp, bias, dst),
            // Winograd's products: the loop over the input channels alone.
            ((1, 1), 1) => padded_avx2::<1, 1, RAGGED>(d, xp, wp, bias, dst),
            (_, 1) => padded_avx2::<0, 1, RAGGED>(d, xp, wp, bias, dst),
            // Unrolled, the strided taps make LLVM spill an accumulator.
            (_, _) => padded_avx2::<0, 2, RAGGED>(d, xp, wp, bias, dst),
        }
    }
}

/// Output pixels per row as [`run_padded_avx2`] computes them: `ow`, or with `RAGGED`
/// `ow` rounded up to a multiple of 8.
#[inline(always)]
fn row_width<const RAGGED: bool>(d: &Direct) -> usize {
    if RAGGED { d.ow().div_ceil(8) * 8 } else { d.ow() }
}

/// [`run_padded_avx2`], with the taps unrolled at compile time for `K × K` kernels (`K`
/// 3 or 1; 0: the kernel's size at run time), for stride `S` (the copy's phase planes
/// make every stride read consecutive floats).
///
/// # Safety
/// As [`run_padded_avx2`]; with `K > 0` a `K × K` kernel.
#[inline(always)]
unsafe fn padded_avx2<const K: usize, const S: usize, const RAGGED: bool>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) {
    let p_end = d.oh() * row_width::<RAGGED>(d);
    let whole = p_end - p_end % (8 * AVX2_V);
    let rows = d.co - d.co % AVX2_MR;
    // SAFETY: as this function's contract; every tile lies below `p_end` and `co`.
    unsafe {
        for p0 in (0..whole).step_by(8 * AVX2_V) {
            for co0 in (0..rows).step_by(AVX2_MR) {
                padded_tile_avx2::<AVX2_MR, AVX2_V, K, S, RAGGED>(d, xp, wp, bias, dst, p0, co0);
            }
            padded_rest_avx2::<AVX2_V, K, S, RAGGED>(d, xp, wp, bias, dst, p0, rows);
        }
        for p0 in (whole..p_end).step_by(8) {
            for co0 in (0..rows).step_by(AVX2_MR) {
                padded_tile_avx2::<AVX2_MR, 1, K, S, RAGGED>(d, xp, wp, bias, dst, p0, co0);
            }
            padded_rest_avx2::<1, K, S, RAGGED>(d, xp, wp, bias, dst, p0, rows);
        }
    }
}

/// The last `co - co0` (fewer than [`AVX2_MR`]) output channels of a tile, in one tile of
/// that many rows (one row at a time would leave the FMA units waiting on latency).
///
/// # Safety
/// As [`padded_tile_avx2`].
#[inline(always)]
unsafe fn padded_rest_avx2<const V: usize, const K: usize, const S: usize, const RAGGED: bool>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
    p0: usize,
    co0: usize,
) {
    // SAFETY: as the caller guarantees; each arm's rows end at `co`.
    unsafe {
        match d.co - co0 {
            5 => padded_tile_avx2::<5, V, K, S, RAGGED>(d, xp, wp, bias, dst, p0, co0),
            4 => padded_tile_avx2::<4, V, K, S, RAGGED>(d, xp, wp, bias, dst, p0, co0),
            3 => padded_tile_avx2::<3, V, K, S, RAGGED>(d, xp, wp, bias, dst, p0, co0),
            2 => padded_tile_avx2::<2, V, K, S, RAGGED>(d, xp, wp, bias, dst, p0, co0),
            1 => padded_tile_avx2::<1, V, K, S, RAGGED>(d, xp, wp, bias, dst, p0, co0),
            _ => {}
        }
    }
}

/// Vectors of 8 pixels per tile of [`run_padded_avx2`].
const AVX2_V: usize = 2;

/// One tile of [`run_padded_avx2`]: `V` vectors of 8 output pixels from `p0` × `R`
/// output channels from `co0` (a multiple of [`AVX2_MR`]).
///
/// # Safety
/// As [`run_padded_avx2`]; `p0 + 8·V <= oh·ow`, `co0 + R <= co`, `R <= AVX2_MR`; with
/// `K > 0` a `K × K` kernel.
#[inline(always)]
unsafe fn padded_tile_avx2<const R: usize, const V: usize, const K: usize, const S: usize, const RAGGED: bool>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
    p0: usize,
    co0: usize,
) {
    // SAFETY: every tap of every output pixel (oy + ki < hp, ox + kj < wp) lies in `xp`;
    // the weight offsets stay below `packed_len()`; the stores write whole vectors of
    // the `oh·ow` pixels of output channels below `co`.
    unsafe {
        let owv = row_width::<RAGGED>(d);
        let (hp, pitch) = d.padded_dims_for(owv);
        let plane = S * hp * pitch;
        let (ow, p_end, taps) = (d.ow(), d.oh() * d.ow(), d.taps());
        let mut xv = [xp.as_ptr(); V];
        for (v, x) in xv.iter_mut().enumerate() {
            let p = p0 + 8 * v;
            *x = xp.as_ptr().add(S * (p / owv) * pitch + p % owv);
        }
        // The block's weights, AVX2_MR per (c, tap), read in order.
        let wb = wp.as_ptr().add(co0 * d.c * taps);
        let mut acc = [[_mm256_setzero_ps(); V]; R];
        // Constant trip counts for 3×3 and 1×1 kernels, so the taps unroll (1×1: the loop
        // over the input channels is the only one); other kernels skip the kernel rows
        // that read only padding for the tile's output rows.
        let (kh, kw) = if K > 0 { (K, K) } else { (d.kh, d.kw) };
        let (ki0, ki1) = if K > 0 { (0, kh) } else { d.live_rows(p0 / owv, (p0 + 8 * V - 1) / owv) };
        for c in 0..d.c {
            let mut wt = wb.add((c * taps + ki0 * kw) * AVX2_MR);
            for ki in ki0..ki1 {
                let row = c * plane + ki * pitch;
                for kj in 0..kw {
                    let mut x = [_mm256_setzero_ps(); V];
                    let tap = row + (kj % S) * hp * pitch + kj / S;
                    for v in 0..V {
                        x[v] = _mm256_loadu_ps(xv[v].add(tap));
                    }
                    for (i, a) in acc.iter_mut().enumerate() {
                        let w = _mm256_set1_ps(*wt.add(i));
                        for v in 0..V {
                            a[v] = _mm256_fmadd_ps(w, x[v], a[v]);
                        }
                    }
                    wt = wt.add(AVX2_MR);
                }
            }
        }
        if RAGGED {
            // Each vector's pixels in the real rows; past `ow`, lanes are not stored.
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            for v in 0..V {
                let p = p0 + 8 * v;
                let (oy, ox) = (p / owv, p % owv);
                let at = oy * ow + ox;
                let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((ow - ox).min(8) as i32), lane);
                for (i, a) in acc.iter().enumerate() {
                    let co = co0 + i;
                    let y = _mm256_add_ps(a[v], _mm256_set1_ps(bias.map_or(0.0, |bb| bb[co])));
                    let out = dst.as_mut_ptr().add(co * p_end + at);
                    if ox + 8 <= ow {
                        _mm256_storeu_ps(out, y);
                    } else {
                        _mm256_maskstore_ps(out, keep, y);
                    }
                }
            }
            return;
        }
        for (i, a) in acc.iter().enumerate() {
            let co = co0 + i;
            let bv = _mm256_set1_ps(bias.map_or(0.0, |bb| bb[co]));
            let out = dst.as_mut_ptr().add(co * p_end + p0);
            for (v, av) in a.iter().enumerate() {
                _mm256_storeu_ps(out.add(8 * v), _mm256_add_ps(*av, bv));
            }
        }
    }
}

/// Output pixels per tile of [`run_channels_avx2`]: 6 pixels × 2 vectors of 8 channels
/// are 12 accumulators.
const CHANNELS_P: usize = 6;

/// The AVX2 kernel with the output channels in the lanes, for rows no padded kernel
/// fits: a tile is [`CHANNELS_P`] consecutive output pixels (across rows: each has its
/// own pointer into the zero-padded copy, made once per tile) × 2 vectors of 8 output
/// channels; per input channel and tap, 2 loads of weights (packed in one block of all
/// the channels, `wp[(c·taps + t)·cop + o]`) and 6 broadcasts of input pixels feed 12
/// FMAs, no lane wasted on a row's end. The sums are stored lane by lane into the
/// channel planes. Same order of additions as every other direct kernel: `(c, ki, kj)`,
/// then the bias.
///
/// # Safety
/// The CPU has AVX2 and FMA; stride 1; `xp` holds the zero-padded copy of
/// [`Direct::padded_dims_for`] `ow` (where this kernel runs, [`Direct::pad_into`]'s);
/// `wp` (packed in one block of `co` rounded up to 8), `bias` and `dst` are as long as
/// [`Direct::run`] checks.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn run_channels_avx2(d: &Direct, xp: &[f32], wp: &[f32], bias: Option<&[f32]>, dst: &mut [f32]) {
    const P: usize = CHANNELS_P;
    let cop = d.co.next_multiple_of(8);
    let (_, pitch) = d.padded_dims_for(d.ow());
    let (ow, p_end) = (d.ow(), d.oh() * d.ow());
    for p0 in (0..p_end).step_by(P) {
        let np = (p_end - p0).min(P);
        // A partial tile repeats its last pixel (computed, not stored).
        let mut xb = [xp.as_ptr(); P];
        for (j, x) in xb.iter_mut().enumerate() {
            let p = p0 + j.min(np - 1);
            *x = xp.as_ptr().wrapping_add((p / ow) * pitch + p % ow);
        }
        let mut ob = 0;
        // SAFETY: as this function's contract; the tiles' channels end at `cop`.
        unsafe {
            while ob + 16 <= cop {
                channels_tile_avx2::<2>(d, &xb, wp, bias, dst, p0, np, ob);
                ob += 16;
            }
            if ob < cop {
                channels_tile_avx2::<1>(d, &xb, wp, bias, dst, p0, np, ob);
            }
        }
    }
}

/// One tile of [`run_channels_avx2`]: the pixels of `xb` (`np` of them stored, from
/// `p0`) × `NV` vectors of 8 output channels from `ob`.
///
/// # Safety
/// As [`run_channels_avx2`]; `xb` point at the taps' origins of output pixels in the
/// padded copy; `ob + 8·NV <= cop`; `p0 + np <= oh·ow`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn channels_tile_avx2<const NV: usize>(
    d: &Direct,
    xb: &[*const f32; CHANNELS_P],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
    p0: usize,
    np: usize,
    ob: usize,
) {
    // SAFETY: every tap of every output pixel (oy + ki < hp, ox + kj < pitch) lies in the
    // padded copy; the weight offsets stay below `c·taps·cop`; the stores write pixels
    // below `oh·ow` of channels below `co`.
    unsafe {
        let cop = d.co.next_multiple_of(8);
        let (hp, pitch) = d.padded_dims_for(d.ow());
        let p_end = d.oh() * d.ow();
        let mut acc = [[_mm256_setzero_ps(); NV]; CHANNELS_P];
        // Kernel rows that read only padding for the tile's output rows are skipped.
        let (ki0, ki1) = d.live_rows(p0 / d.ow(), (p0 + np - 1) / d.ow());
        for c in 0..d.c {
            let mut wt = wp.as_ptr().add(ob + (c * d.taps() + ki0 * d.kw) * cop);
            for ki in ki0..ki1 {
                let row = (c * hp + ki) * pitch;
                for kj in 0..d.kw {
                    let mut w = [_mm256_setzero_ps(); NV];
                    for (v, wv) in w.iter_mut().enumerate() {
                        *wv = _mm256_loadu_ps(wt.add(8 * v));
                    }
                    for (j, a) in acc.iter_mut().enumerate() {
                        let x = _mm256_set1_ps(*xb[j].add(row + kj));
                        for v in 0..NV {
                            a[v] = _mm256_fmadd_ps(x, w[v], a[v]);
                        }
                    }
                    wt = wt.add(cop);
                }
            }
        }
        // Every accumulator out by constant indices first (indexed by `np`, LLVM kept
        // them in memory through the loop above), then the pixels stored.
        let mut sums = [[0.0f32; 16]; CHANNELS_P];
        for (a, out) in acc.iter().zip(sums.iter_mut()) {
            for (v, av) in a.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(8 * v), *av);
            }
        }
        for (j, lanes) in sums.iter().enumerate().take(np) {
            for (l, y) in lanes.iter().enumerate().take((d.co - ob).min(8 * NV)) {
                let co = ob + l;
                *dst.get_unchecked_mut(co * p_end + p0 + j) = y + bias.map_or(0.0, |b| b[co]);
            }
        }
    }
}

/// Vectors of 16 pixels per tile of [`run_ragged_avx512`]: 6 channels × 4 vectors are 24
/// of the 32 ZMM registers.
const RAGGED512_V: usize = 4;

/// [`super::Rows::Ragged16`]: the AVX-512 kernel over a zero-padded copy whose output rows
/// are computed rounded up to a multiple of 16 pixels (the copy of
/// [`Direct::padded_dims_for`] that width), each vector inside one row, the last of a row
/// stored under a mask. A tile is up to [`RAGGED512_V`] vectors × [`AVX2_MR`] output
/// channels (the weights packed in blocks of [`AVX2_MR`], as the ragged AVX2 kernel's);
/// per input channel and tap, V loads and 6 broadcasts feed 6·V FMAs. Same order of
/// additions as every other direct kernel: `(c, ki, kj)`.
///
/// # Safety
/// The CPU has AVX-512F; stride 1; `xp` holds `c·hp·wp` floats of that copy; `wp` (packed
/// in blocks of [`AVX2_MR`]), `bias` and `dst` are as long as [`Direct::run`] checks.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run_ragged_avx512(d: &Direct, xp: &[f32], wp: &[f32], bias: Option<&[f32]>, dst: &mut [f32]) {
    const V: usize = RAGGED512_V;
    let p_end = d.oh() * d.ow().div_ceil(16) * 16;
    let (whole, pairs) = (p_end - p_end % (16 * V), p_end - p_end % 32);
    let rows = d.co - d.co % AVX2_MR;
    // SAFETY: as this function's contract; every tile lies below `p_end` and `co`.
    unsafe {
        for p0 in (0..whole).step_by(16 * V) {
            for co0 in (0..rows).step_by(AVX2_MR) {
                ragged_tile_avx512::<AVX2_MR, V>(d, xp, wp, bias, dst, p0, co0);
            }
            ragged_rest_avx512::<V>(d, xp, wp, bias, dst, p0, rows);
        }
        for p0 in (whole..pairs).step_by(32) {
            for co0 in (0..rows).step_by(AVX2_MR) {
                ragged_tile_avx512::<AVX2_MR, 2>(d, xp, wp, bias, dst, p0, co0);
            }
            ragged_rest_avx512::<2>(d, xp, wp, bias, dst, p0, rows);
        }
        for p0 in (pairs..p_end).step_by(16) {
            for co0 in (0..rows).step_by(AVX2_MR) {
                ragged_tile_avx512::<AVX2_MR, 1>(d, xp, wp, bias, dst, p0, co0);
            }
            ragged_rest_avx512::<1>(d, xp, wp, bias, dst, p0, rows);
        }
    }
}

/// The last `co - co0` (fewer than [`AVX2_MR`]) output channels of a tile of
/// [`run_ragged_avx512`].
///
/// # Safety
/// As [`ragged_tile_avx512`].
#[inline(always)]
unsafe fn ragged_rest_avx512<const V: usize>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
    p0: usize,
    co0: usize,
) {
    // SAFETY: as the caller guarantees; each arm's rows end at `co`.
    unsafe {
        match d.co - co0 {
            5 => ragged_tile_avx512::<5, V>(d, xp, wp, bias, dst, p0, co0),
            4 => ragged_tile_avx512::<4, V>(d, xp, wp, bias, dst, p0, co0),
            3 => ragged_tile_avx512::<3, V>(d, xp, wp, bias, dst, p0, co0),
            2 => ragged_tile_avx512::<2, V>(d, xp, wp, bias, dst, p0, co0),
            1 => ragged_tile_avx512::<1, V>(d, xp, wp, bias, dst, p0, co0),
            _ => {}
        }
    }
}

/// One tile of [`run_ragged_avx512`]: `V` vectors of 16 pixels of the rounded-up rows
/// from `p0` × `R` output channels from `co0` (a multiple of [`AVX2_MR`]).
///
/// # Safety
/// As [`run_ragged_avx512`]; `p0 + 16·V <= oh·owv`, `co0 + R <= co`, `R <= AVX2_MR`.
#[inline(always)]
unsafe fn ragged_tile_avx512<const R: usize, const V: usize>(
    d: &Direct,
    xp: &[f32],
    wp: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
    p0: usize,
    co0: usize,
) {
    // SAFETY: every tap of every pixel of the rounded-up rows (oy + ki < hp, ox + kj <
    // pitch) lies in `xp`; the weight offsets stay below `packed_len()`; the stores write
    // the lanes of each vector inside the `ow` real pixels of its row, channels below `co`.
    unsafe {
        let owv = d.ow().div_ceil(16) * 16;
        let (hp, pitch) = d.padded_dims_for(owv);
        let (ow, p_end, taps) = (d.ow(), d.oh() * d.ow(), d.taps());
        let mut xv = [xp.as_ptr(); V];
        for (v, x) in xv.iter_mut().enumerate() {
            let p = p0 + 16 * v;
            *x = xp.as_ptr().add((p / owv) * pitch + p % owv);
        }
        let wb = wp.as_ptr().add(co0 * d.c * taps);
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        // Kernel rows that read only padding for the tile's output rows are skipped.
        let (ki0, ki1) = d.live_rows(p0 / owv, (p0 + 16 * V - 1) / owv);
        for c in 0..d.c {
            let mut wt = wb.add((c * taps + ki0 * d.kw) * AVX2_MR);
            for ki in ki0..ki1 {
                let row = (c * hp + ki) * pitch;
                for kj in 0..d.kw {
                    let mut x = [_mm512_setzero_ps(); V];
                    for v in 0..V {
                        x[v] = _mm512_loadu_ps(xv[v].add(row + kj));
                    }
                    for (i, a) in acc.iter_mut().enumerate() {
                        let w = _mm512_set1_ps(*wt.add(i));
                        for v in 0..V {
                            a[v] = _mm512_fmadd_ps(w, x[v], a[v]);
                        }
                    }
                    wt = wt.add(AVX2_MR);
                }
            }
        }
        for v in 0..V {
            let p = p0 + 16 * v;
            let (oy, ox) = (p / owv, p % owv);
            // Lanes past the row's `ow` real pixels are not stored.
            let n = (ow - ox).min(16);
            let keep = if n == 16 { 0xffff } else { ((1u32 << n) - 1) as __mmask16 };
            for (i, a) in acc.iter().enumerate() {
                let co = co0 + i;
                let y = _mm512_add_ps(a[v], _mm512_set1_ps(bias.map_or(0.0, |bb| bb[co])));
                _mm512_mask_storeu_ps(dst.as_mut_ptr().add(co * p_end + oy * ow + ox), keep, y);
            }
        }
    }
}

/// Generates the weight-gradient kernel for one vector width: `$tile::<CB>` is the
/// micro-kernel for CB input channels, `$name` runs it over every channel block.
macro_rules! params_kernel {
    ($name:ident, $tile:ident, $tile5:ident, $general:ident, $rows:expr, $kr:expr, $two:expr, $feat:literal, $lanes:expr, $cb:expr, $vec:ty, $zero:expr, $loadu:path, $storeu:path, $set1:path, $fma:path, $add:path) => {
        /// Any kernel size: tiles of `$rows` consecutive `(c, tap)` rows whose offsets in
        /// the padded copy come from a table (an extra load per FMA, which the 3×3
        /// kernel's constant displacements avoid).
        ///
        /// # Safety
        /// As [`ParamsDirect::accumulate`], on a CPU with the target features.
        #[target_feature(enable = $feat)]
        unsafe fn $general(d: &ParamsDirect, xp: &[f32], dyt: &[f32], dwt: &mut [f32], first: bool) {
            const R: usize = $rows;
            // SAFETY: every row offset plus every output pixel's tap origin lies in the
            // padded copy (`padded()`); `dyt` holds `oh·ow` rows and `dwt` `c·taps` rows of
            // `cop` floats; rows past the last are read at offset 0 and never stored.
            unsafe {
                let (hp, wp) = d.padded();
                let (taps, plane) = (d.kh * d.kw, hp * wp);
                let rows = d.c * taps;
                let mut offs = [0usize; R];
                for r0 in (0..rows).step_by(R) {
                    let n = (rows - r0).min(R);
                    for (j, o) in offs.iter_mut().enumerate() {
                        *o = if j < n {
                            let (c, t) = ((r0 + j) / taps, (r0 + j) % taps);
                            c * plane + (t / d.kw) * wp + t % d.kw
                        } else {
                            0
                        };
                    }
                    for ob in (0..d.cop).step_by($lanes) {
                        let mut acc = [$zero; R];
                        for oy in 0..d.oh {
                            let row = xp.as_ptr().add(oy * d.sh * wp);
                            let drow = dyt.as_ptr().add(oy * d.ow * d.cop + ob);
                            for ox in 0..d.ow {
                                let dv = $loadu(drow.add(ox * d.cop));
                                let q = row.add(ox * d.sw);
                                for j in 0..R {
                                    acc[j] = $fma($set1(*q.add(offs[j])), dv, acc[j]);
                                }
                            }
                        }
                        for (j, a) in acc.iter().enumerate().take(n) {
                            let p = dwt.as_mut_ptr().add((r0 + j) * d.cop + ob);
                            let v = if first { *a } else { $add(*a, $loadu(p)) };
                            $storeu(p, v);
                        }
                    }
                }
            }
        }

        /// # Safety
        /// The CPU has the target features; `xp`, `dyt` and `dwt` are at least as long as
        /// [`ParamsDirect::accumulate`] checks; `c0 + CB <= d.c`, `ob + lanes <= d.cop`; a
        /// 3×3 kernel.
        #[inline(always)]
        unsafe fn $tile<const CB: usize>(d: &ParamsDirect, xp: &[f32], dyt: &[f32], dwt: &mut [f32], first: bool, c0: usize, ob: usize) {
            // SAFETY: every tap of every output pixel lies inside the padded copy `xp`
            // (`padded()`), `dyt` holds `oh·ow` rows of `co` and `dwt` `c·9` rows of `co`.
            unsafe {
                let (hp, wp) = d.padded();
                let plane = hp * wp;
                let mut acc = [[$zero; 9]; CB];
                let xb = xp.as_ptr().add(c0 * plane);
                for oy in 0..d.oh {
                    let row = oy * d.sh * wp;
                    let drow = dyt.as_ptr().add(oy * d.ow * d.cop + ob);
                    for ox in 0..d.ow {
                        let dv = $loadu(drow.add(ox * d.cop));
                        let q = xb.add(row + ox * d.sw);
                        for j in 0..CB {
                            let xc = q.add(j * plane);
                            for ki in 0..3 {
                                for kj in 0..3 {
                                    let a = $set1(*xc.add(ki * wp + kj));
                                    acc[j][ki * 3 + kj] = $fma(a, dv, acc[j][ki * 3 + kj]);
                                }
                            }
                        }
                    }
                }
                for j in 0..CB {
                    for t in 0..9 {
                        let p = dwt.as_mut_ptr().add(((c0 + j) * 9 + t) * d.cop + ob);
                        let v = if first { acc[j][t] } else { $add(acc[j][t], $loadu(p)) };
                        $storeu(p, v);
                    }
                }
            }
        }

        /// One tile of a 5×5 kernel's weight gradient: `KR` kernel rows from `ki0` × the
        /// five taps of each, of input channel `c`, × `NV` vectors of output channels from
        /// `ob`; the taps' offsets are constants from `KR` row pointers (the general
        /// kernel's offset table cost a load per FMA: LeNet-5's layers). Each sum runs over
        /// the output pixels in order, as in every other weight-gradient kernel (same bits).
        ///
        /// # Safety
        /// As [`ParamsDirect::accumulate`], on a CPU with the target features; a 5×5
        /// kernel, `c < d.c`, `ki0 + KR <= 5`, `ob + NV·lanes <= d.cop`.
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $tile5<const KR: usize, const NV: usize>(
            d: &ParamsDirect,
            xp: &[f32],
            dyt: &[f32],
            dwt: &mut [f32],
            first: bool,
            c: usize,
            ki0: usize,
            ob: usize,
        ) {
            // SAFETY: every tap of every output pixel lies inside the padded copy `xp`
            // (`padded()`), `dyt` holds `oh·ow` rows of `cop` and `dwt` `c·25` rows of `cop`.
            unsafe {
                let (hp, wp) = d.padded();
                let mut acc = [[[$zero; NV]; 5]; KR];
                let xb = xp.as_ptr().add(c * hp * wp + ki0 * wp);
                for oy in 0..d.oh {
                    let row = oy * d.sh * wp;
                    let drow = dyt.as_ptr().add(oy * d.ow * d.cop + ob);
                    for ox in 0..d.ow {
                        let dp = drow.add(ox * d.cop);
                        let mut dv = [$zero; NV];
                        for (v, x) in dv.iter_mut().enumerate() {
                            *x = $loadu(dp.add(v * $lanes));
                        }
                        let q = xb.add(row + ox * d.sw);
                        for (r, ar) in acc.iter_mut().enumerate() {
                            let xr = q.add(r * wp);
                            for (kj, a) in ar.iter_mut().enumerate() {
                                let x = $set1(*xr.add(kj));
                                for v in 0..NV {
                                    a[v] = $fma(x, dv[v], a[v]);
                                }
                            }
                        }
                    }
                }
                for (r, ar) in acc.iter().enumerate() {
                    for (kj, a) in ar.iter().enumerate() {
                        let p = dwt.as_mut_ptr().add((c * 25 + (ki0 + r) * 5 + kj) * d.cop + ob);
                        for (v, av) in a.iter().enumerate() {
                            let pv = p.add(v * $lanes);
                            let sum = if first { *av } else { $add(*av, $loadu(pv)) };
                            $storeu(pv, sum);
                        }
                    }
                }
            }
        }

        /// # Safety
        /// As [`ParamsDirect::accumulate`], on a CPU with the target features.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $name(d: &ParamsDirect, xp: &[f32], dyt: &[f32], dwt: &mut [f32], first: bool) {
            if (d.kh, d.kw) == (5, 5) {
                // Two vectors of output channels per tile (one kernel row) where `$two`
                // and the channels allow, else `$kr` kernel rows of one vector.
                let two = $two && d.cop.is_multiple_of(2 * $lanes);
                for c in 0..d.c {
                    let mut ki0 = 0;
                    while ki0 < 5 {
                        let kr = if two { 1 } else { (5 - ki0).min($kr) };
                        for ob in (0..d.cop).step_by(if two { 2 * $lanes } else { $lanes }) {
                            // SAFETY: c < d.c, ki0 + kr <= 5, the vectors end at cop; the
                            // caller checked the lengths.
                            unsafe {
                                match (two, kr) {
                                    (true, _) => $tile5::<1, 2>(d, xp, dyt, dwt, first, c, ki0, ob),
                                    (false, 5) => $tile5::<5, 1>(d, xp, dyt, dwt, first, c, ki0, ob),
                                    (false, 2) => $tile5::<2, 1>(d, xp, dyt, dwt, first, c, ki0, ob),
                                    _ => $tile5::<1, 1>(d, xp, dyt, dwt, first, c, ki0, ob),
                                }
                            }
                        }
                        ki0 += kr;
                    }
                }
                return;
            }
            if (d.kh, d.kw) != (3, 3) {
                // SAFETY: as this function's own contract.
                unsafe { $general(d, xp, dyt, dwt, first) };
                return;
            }
            let mut c0 = 0;
            while c0 < d.c {
                let cb = (d.c - c0).min($cb);
                for ob in (0..d.cop).step_by($lanes) {
                    // SAFETY: c0 + cb <= c and ob + lanes <= co (co is a multiple of the
                    // lanes); the caller checked the lengths.
                    unsafe {
                        match cb {
                            3 => $tile::<3>(d, xp, dyt, dwt, first, c0, ob),
                            2 => $tile::<2>(d, xp, dyt, dwt, first, c0, ob),
                            _ => $tile::<1>(d, xp, dyt, dwt, first, c0, ob),
                        }
                    }
                }
                c0 += cb;
            }
        }
    };
}

params_kernel!(
    params_avx512,
    params_tile_avx512,
    params_tile5_avx512,
    params_general_avx512,
    24,
    5,
    false,
    "avx512f",
    16,
    PARAMS_CB,
    __m512,
    _mm512_setzero_ps(),
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_add_ps
);

params_kernel!(
    params_avx2_one_vector,
    params_tile_avx2,
    params_tile5_avx2,
    params_general_avx2,
    12,
    2,
    true,
    "avx2,fma",
    8,
    1,
    __m256,
    _mm256_setzero_ps(),
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_add_ps
);

/// The AVX2 weight gradient: for 3×3 kernels and output channels a multiple of 16,
/// [`params3_avx2`]; elsewhere one vector of output channels per tile.
///
/// # Safety
/// As [`ParamsDirect::accumulate`], on a CPU with AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn params_avx2(d: &ParamsDirect, xp: &[f32], dyt: &[f32], dwt: &mut [f32], first: bool) {
    // SAFETY: as this function's contract.
    unsafe {
        if (d.kh, d.kw) != (3, 3) || !d.cop.is_multiple_of(16) {
            params_avx2_one_vector(d, xp, dyt, dwt, first);
            return;
        }
        let mut c0 = 0;
        while c0 < d.c {
            let cb = (d.c - c0).min(2);
            for ob in (0..d.cop).step_by(16) {
                for ki in 0..3 {
                    if cb == 2 {
                        params3_avx2::<2>(d, xp, dyt, dwt, first, c0, ob, ki);
                    } else {
                        params3_avx2::<1>(d, xp, dyt, dwt, first, c0, ob, ki);
                    }
                }
            }
            c0 += cb;
        }
    }
}

/// One tile of the AVX2 weight gradient of a 3×3 kernel: `CB` input channels × the three
/// taps of kernel row `ki` × 2 vectors of output channels (16 from `ob`), 12 accumulators
/// with `CB = 2`; per output pixel, 2 loads of `dyt` and 6 broadcasts feed 12 FMAs (the
/// one-vector kernel needs 10 loads per 9 FMAs). Each sum runs over the output pixels in
/// order, as in every other weight-gradient kernel (same bits).
///
/// # Safety
/// As [`ParamsDirect::accumulate`], on a CPU with AVX2 and FMA; a 3×3 kernel, `c0 + CB <=
/// c`, `ob + 16 <= cop`, `ki < 3`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn params3_avx2<const CB: usize>(
    d: &ParamsDirect,
    xp: &[f32],
    dyt: &[f32],
    dwt: &mut [f32],
    first: bool,
    c0: usize,
    ob: usize,
    ki: usize,
) {
    // SAFETY: every tap of every output pixel lies inside the padded copy `xp`
    // (`padded()`), `dyt` holds `oh·ow` rows of `cop` and `dwt` `c·9` rows of `cop`.
    unsafe {
        let (hp, wp) = d.padded();
        let plane = hp * wp;
        let mut acc = [[[_mm256_setzero_ps(); 2]; 3]; CB];
        let xb = xp.as_ptr().add(c0 * plane + ki * wp);
        for oy in 0..d.oh {
            let row = oy * d.sh * wp;
            let drow = dyt.as_ptr().add(oy * d.ow * d.cop + ob);
            for ox in 0..d.ow {
                let dp = drow.add(ox * d.cop);
                let dv = [_mm256_loadu_ps(dp), _mm256_loadu_ps(dp.add(8))];
                let q = xb.add(row + ox * d.sw);
                for (j, aj) in acc.iter_mut().enumerate() {
                    let xc = q.add(j * plane);
                    for (kj, a) in aj.iter_mut().enumerate() {
                        let x = _mm256_set1_ps(*xc.add(kj));
                        a[0] = _mm256_fmadd_ps(x, dv[0], a[0]);
                        a[1] = _mm256_fmadd_ps(x, dv[1], a[1]);
                    }
                }
            }
        }
        for (j, aj) in acc.iter().enumerate() {
            for (kj, a) in aj.iter().enumerate() {
                let p = dwt.as_mut_ptr().add(((c0 + j) * 9 + ki * 3 + kj) * d.cop + ob);
                for (v, av) in a.iter().enumerate() {
                    let pv = p.add(8 * v);
                    let sum = if first { *av } else { _mm256_add_ps(*av, _mm256_loadu_ps(pv)) };
                    _mm256_storeu_ps(pv, sum);
                }
            }
        }
    }
}

/// Both weight-gradient paths, for the tests (each where the CPU has it).
#[cfg(test)]
pub(crate) fn params_paths(d: &ParamsDirect, xp: &[f32], dyt: &[f32]) -> Vec<(&'static str, Vec<f32>)> {
    let mut out = Vec::new();
    if super::has_avx512() {
        // Rows of 16 channels for the AVX-512 kernel (where `d` has rows of 8, zero
        // channels added), the result cut back to `d`'s rows.
        let d16 = ParamsDirect { cop: d.cop.next_multiple_of(16), ..*d };
        let mut dyt16 = vec![0.0; d16.dyt_len()];
        for (to, from) in dyt16.chunks_exact_mut(d16.cop).zip(dyt.chunks_exact(d.cop)) {
            to[..d.cop].copy_from_slice(from);
        }
        let mut w16 = vec![f32::NAN; d16.dwt_len()];
        // SAFETY: the CPU has AVX-512F; lengths as the tests make them.
        unsafe { params_avx512(&d16, xp, &dyt16, &mut w16, true) };
        let w = w16.chunks_exact(d16.cop).flat_map(|row| row[..d.cop].iter().copied()).collect();
        out.push(("avx512", w));
        // The general kernel (any kernel size) too, which the 3×3 and 5×5 tiles replace.
        let mut w16 = vec![f32::NAN; d16.dwt_len()];
        // SAFETY: as above.
        unsafe { params_general_avx512(&d16, xp, &dyt16, &mut w16, true) };
        let w = w16.chunks_exact(d16.cop).flat_map(|row| row[..d.cop].iter().copied()).collect();
        out.push(("avx512-general", w));
    }
    if crate::cpu::simd::has_avx2() {
        let mut w = vec![f32::NAN; d.dwt_len()];
        // SAFETY: the CPU has AVX2 and FMA; lengths as the tests make them.
        unsafe { params_avx2(d, xp, dyt, &mut w, true) };
        out.push(("avx2", w));
        let mut w = vec![f32::NAN; d.dwt_len()];
        // SAFETY: as above.
        unsafe { params_general_avx2(d, xp, dyt, &mut w, true) };
        out.push(("avx2-general", w));
    }
    out
}

/// Both paths, for the tests (each where the CPU has it).
#[cfg(test)]
pub(crate) fn run_paths(
    d: &Direct,
    src: &[f32],
    weight: impl Fn(usize, usize, usize) -> f32,
    bias: Option<&[f32]>,
) -> Vec<(&'static str, Vec<f32>)> {
    let mut out = Vec::new();
    let mut wp = vec![f32::NAN; d.packed_len_for(MR)];
    d.pack_for(MR, &weight, &mut wp);
    let wp = &wp[..];
    let mut wp6 = vec![f32::NAN; d.packed_len_for(AVX2_MR)];
    d.pack_for(AVX2_MR, &weight, &mut wp6);
    let n = d.co * d.oh() * d.ow();
    let (hp, pitch) = d.padded_dims();
    let mut xp = vec![0.0; d.c * d.s * hp * pitch];
    d.pad_into(src, &mut xp);
    if let Some(rows) = d.padded_rows().filter(|r| matches!(r, Rows::Whole | Rows::Pairs)) {
        let mut y = vec![f32::NAN; n];
        // SAFETY: padded_rows() saw AVX-512F and whole tiles; `xp` is the padded copy.
        unsafe {
            match (rows, d.s) {
                (Rows::Pairs, 1) => run_padded_avx512::<true, 1>(d, &xp, wp, bias, &mut y),
                (Rows::Pairs, _) => run_padded_avx512::<true, 2>(d, &xp, wp, bias, &mut y),
                (_, 1) => run_padded_avx512::<false, 1>(d, &xp, wp, bias, &mut y),
                _ => run_padded_avx512::<false, 2>(d, &xp, wp, bias, &mut y),
            }
        };
        out.push(("avx512-padded", y));
    }
    if crate::cpu::simd::has_avx2() && d.ow().is_multiple_of(8) && d.padded_dims_for(d.ow()) == (hp, pitch) {
        let mut y = vec![f32::NAN; n];
        // SAFETY: the CPU has AVX2 and FMA; rows a multiple of 8; `xp` is the padded copy.
        unsafe { run_padded_avx2::<false>(d, &xp, &wp6, bias, &mut y) };
        out.push(("avx2-padded", y));
    }
    if crate::cpu::simd::has_avx2() && super::ragged_ok(d.ow()) {
        // The ragged kernel, on any CPU with AVX2 (an AVX-512 one included).
        let dims = d.padded_dims_for(d.ow().div_ceil(8) * 8);
        let mut xr = vec![0.0; d.c * d.s * dims.0 * dims.1];
        d.pad_into_dims(src, &mut xr, dims);
        let mut y = vec![f32::NAN; n];
        // SAFETY: the CPU has AVX2 and FMA; `xr` is the copy of the rounded-up rows.
        unsafe { run_padded_avx2::<true>(d, &xr, &wp6, bias, &mut y) };
        out.push(("avx2-ragged", y));
    }
    if super::has_avx512() && d.s == 1 && super::ragged16_ok(d.ow()) {
        let dims = d.padded_dims_for(d.ow().div_ceil(16) * 16);
        let mut xr = vec![0.0; d.c * dims.0 * dims.1];
        d.pad_into_dims(src, &mut xr, dims);
        let mut y = vec![f32::NAN; n];
        // SAFETY: the CPU has AVX-512F; stride 1; `xr` is the copy of the rounded-up rows.
        unsafe { run_ragged_avx512(d, &xr, &wp6, bias, &mut y) };
        out.push(("avx512-ragged", y));
    }
    // The channels kernel (stride 1, any rows), on any CPU with AVX2.
    if crate::cpu::simd::has_avx2() && d.s == 1 && (d.eh, d.ew, d.pad_to) == (0, 0, (0, 0)) {
        let cop = d.co.next_multiple_of(8);
        let mut wc = vec![f32::NAN; d.packed_len_for(cop)];
        d.pack_for(cop, &weight, &mut wc);
        let dims = d.padded_dims_for(d.ow());
        let mut xr = vec![0.0; d.c * dims.0 * dims.1];
        d.pad_into_dims(src, &mut xr, dims);
        let mut y = vec![f32::NAN; n];
        // SAFETY: the CPU has AVX2 and FMA; stride 1; `xr` is the padded copy of the
        // channels kernel's dimensions (padded_dims() where it runs).
        unsafe { run_channels_avx2(d, &xr, &wc, bias, &mut y) };
        out.push(("avx2-channels", y));
    }
    // The masked kernels (stride 1 only).
    if super::has_avx512() && d.s == 1 {
        let mut y = vec![f32::NAN; n];
        let plan = Plan::for_lanes(d, 16, NV);
        // SAFETY: the CPU has AVX-512F; lengths as the tests make them.
        unsafe { run_avx512(d, &plan, src, wp, bias, &mut y) };
        out.push(("avx512", y));
    }
    if crate::cpu::simd::has_avx2() && d.s == 1 {
        let mut y = vec![f32::NAN; n];
        let plan = Plan::for_lanes(d, 8, 1);
        // SAFETY: the CPU has AVX2 and FMA; lengths as the tests make them.
        unsafe { run_avx2(d, &plan, src, wp, bias, &mut y) };
        out.push(("avx2", y));
    }
    out
}
