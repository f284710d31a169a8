//! Direct stride-1 convolution on the CPU, without im2col: the forward pass and, through the
//! transposed and flipped kernel, the backward-data pass of every stride-1 convolution whose
//! output rows are at least 8 pixels wide (the 3×3 layers of the CIFAR ResNets, LeNet-5's).
//!
//! The im2col path writes a `c_in·kh·kw × pixels` matrix per image (9× the input for a 3×3
//! kernel), then the GEMM packs it again into panels: two copies of nine times the input per
//! image, read back from L2, and the weights re-packed for every image. Here the GEMM's B
//! operand is read straight from the image: a vector of 16 consecutive output pixels needs,
//! for input channel `c` and tap `(ki, kj)`, 16 consecutive input pixels of one row shifted by
//! the tap (a masked load where the row's ends fall outside the image, a second one where the
//! vector crosses into the next output row). The weights are packed once per call into
//! blocks of [`MR`] output channels, `wp[((block·c_in + c)·taps + t)·MR + i]`, so the
//! micro-kernel broadcasts them from consecutive addresses.
//!
//! Micro-kernels: with AVX-512, [`MR`] = 8 output channels × [`NV`] = 2 vectors of 16 pixels,
//! 16 accumulators; per input channel and tap, 2 loads of pixels and 8 broadcasts feed 16
//! FMAs. With AVX2 (16 registers), [`AVX2_MR`] = 6 output channels × 2 vectors of 8 pixels,
//! 12 accumulators, 2 loads and 6 broadcasts per 12 FMAs, the weights packed in blocks of 6.
//! Where the output rows allow (rows a multiple of 16 or pairs of rows of 8 with AVX-512, a
//! multiple of 8 with AVX2, or with AVX2 rows rounded up to a multiple of 8 where that adds at
//! most a quarter, the last vector of each row stored under a mask) the kernels read a
//! zero-padded copy of the image with plain loads and, for 3×3 kernels, the nine taps
//! unrolled; AVX-512 CPUs take rows rounded up to a multiple of 16 where that adds at most
//! three eighths ([`Rows::Ragged16`]); AVX2-only CPUs put the output channels in the lanes
//! where no padded kernel fits ([`Direct::channels`]); elsewhere masked loads from a segment
//! plan.
//! The sum over `(c, ki, kj)` runs in that order for every output element, on every machine
//! and path (the AVX-512 and AVX2 paths add in the same order, so they give the same bits;
//! tested).

use super::Conv2dGeom;
use crate::cpu::simd::deinterleave;

/// Output channels per block of packed weights (rows of the micro-kernel's tile).
pub(crate) const MR: usize = 8;
/// Output channels per block of packed weights for the padded AVX2 kernel: 6 rows × 2
/// vectors of 8 pixels are its 12 accumulators.
pub(crate) const AVX2_MR: usize = 6;
/// Most pixel vectors per tile (columns of the micro-kernel's tile, in vectors): 2 with
/// AVX-512 (32 registers), 1 with AVX2 (16 registers: 8 accumulators, the pixels, the
/// broadcast weight).
const NV: usize = 2;

/// One stride-1 convolution of one image, as the direct kernel sees it: `src[c, h, w]` into
/// `dst[co, oh, ow]` with a `kh × kw` kernel and padding `(ph, pw)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Direct {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub co: usize,
    pub kh: usize,
    pub kw: usize,
    pub ph: usize,
    pub pw: usize,
    /// Stride (the same along both axes): 1, or 2 where a padded kernel runs.
    pub s: usize,
    /// Zero rows and columns after the image beyond `ph` and `pw`: 0 but for the phases of a
    /// strided backward-data pass ([`super::phases`]), whose padding is not symmetric.
    pub eh: usize,
    pub ew: usize,
    /// The padded copy's least height and row pitch: `(0, 0)` but where the phases of a
    /// strided backward-data pass share one copy of `dy`.
    pub pad_to: (usize, usize),
}

impl Direct {
    /// The forward pass of `g`, where the direct kernel applies: not pointwise, output rows at
    /// least 8 pixels wide, stride 1, or stride 2 along both axes for kernels larger than 1×1
    /// where a padded kernel runs (the masked kernels' segment plans assume stride 1).
    pub(crate) fn forward(g: &Conv2dGeom) -> Option<Direct> {
        let d = Direct {
            c: g.in_channels,
            h: g.in_h,
            w: g.in_w,
            co: g.out_channels,
            kh: g.kernel_h,
            kw: g.kernel_w,
            ph: g.pad_h,
            pw: g.pad_w,
            s: g.stride_h,
            eh: 0,
            ew: 0,
            pad_to: (0, 0),
        };
        // A 1×1 kernel with stride 2 stays with im2col + GEMM (a strided gather, then one
        // GEMM): here it would copy the whole image for one tap per channel (measured 19% of
        // peak against 40%).
        let stride_ok =
            g.stride_h == g.stride_w && (d.s == 1 || (d.s == 2 && d.taps() > 1 && d.padded_rows().is_some()));
        (stride_ok && !g.is_pointwise() && d.ow() >= 8 && has_kernel()).then_some(d)
    }

    /// The backward-data pass of `g` as a convolution of `dy[co, oh, ow]` with the transposed,
    /// flipped kernel and padding `k - 1 - p`, whose output is `dx[c, h, w]`.
    pub(crate) fn backward_data(g: &Conv2dGeom) -> Option<Direct> {
        Direct::forward(g)?;
        if g.stride_h != 1 || g.pad_h >= g.kernel_h || g.pad_w >= g.kernel_w {
            return None;
        }
        let d = Direct {
            c: g.out_channels,
            h: g.out_h(),
            w: g.out_w(),
            co: g.in_channels,
            kh: g.kernel_h,
            kw: g.kernel_w,
            ph: g.kernel_h - 1 - g.pad_h,
            pw: g.kernel_w - 1 - g.pad_w,
            s: 1,
            eh: 0,
            ew: 0,
            pad_to: (0, 0),
        };
        (d.ow() >= 8 && d.oh() == g.in_h && d.ow() == g.in_w).then_some(d)
    }

    pub(crate) fn oh(&self) -> usize {
        (self.h + 2 * self.ph + self.eh - self.kh) / self.s + 1
    }

    pub(crate) fn ow(&self) -> usize {
        (self.w + 2 * self.pw + self.ew - self.kw) / self.s + 1
    }

    fn taps(&self) -> usize {
        self.kh * self.kw
    }

    /// The kernel rows `lo..hi` that read a row of the image, not of the zero padding, for
    /// some output row in `oy0..=oy1`. The other rows' products are exact zeros, which
    /// change no sum (but the sign of an exactly zero one), so the padded kernels of 5×5 and
    /// larger kernels skip them: LeNet-5's backward-data pass (padding 4 around 10 rows) reads
    /// padding for 29% of its taps.
    #[inline(always)]
    pub(crate) fn live_rows(&self, oy0: usize, oy1: usize) -> (usize, usize) {
        let lo = self.ph.saturating_sub(self.s * oy1).min(self.kh);
        let hi = (self.ph + self.h).saturating_sub(self.s * oy0).min(self.kh);
        (lo, hi.max(lo))
    }

    /// Output channels per block of packed weights for the kernel [`Direct::run`] will use
    /// on this CPU: [`MR`], or [`AVX2_MR`] for the padded AVX2 kernel.
    pub(crate) fn block(&self) -> usize {
        if self.channels() {
            return self.co.next_multiple_of(8);
        }
        if matches!(self.padded_rows(), Some(Rows::Eights | Rows::Ragged | Rows::Ragged16)) { AVX2_MR } else { MR }
    }

    /// Whether [`Direct::run`] takes the AVX2 kernel with the output channels in the vector
    /// lanes ([`x86::run_channels_avx2`]): stride 1, on an AVX2 CPU without AVX-512, where no
    /// padded kernel runs (rows that vectors of 8 pixels fit badly: LeNet-5's second forward
    /// pass, 10 pixels wide) and the channels fill their vectors of 8 to three quarters.
    pub(crate) fn channels(&self) -> bool {
        let cop = self.co.next_multiple_of(8);
        self.s == 1
            && (self.eh, self.ew, self.pad_to) == (0, 0, (0, 0))
            && 4 * (cop - self.co) <= cop
            && !has_avx512()
            && crate::cpu::simd::has_avx2()
            && self.padded_rows().is_none()
    }

    /// Elements of the packed weights.
    pub(crate) fn packed_len(&self) -> usize {
        self.packed_len_for(self.block())
    }

    fn packed_len_for(&self, mr: usize) -> usize {
        self.co.div_ceil(mr) * mr * self.c * self.taps()
    }

    /// Packs `weight(co, c, t)` (t = ki·kw + kj) into `wp` in blocks of [`Direct::block`]
    /// output channels (zero for the padding channels of the last block).
    pub(crate) fn pack(&self, weight: impl Fn(usize, usize, usize) -> f32, wp: &mut [f32]) {
        self.pack_for(self.block(), weight, wp)
    }

    /// [`Direct::pack`] in blocks of `mr`: `wp[((block·c_in + c)·taps + t)·mr + i]`.
    fn pack_for(&self, mr: usize, weight: impl Fn(usize, usize, usize) -> f32, wp: &mut [f32]) {
        let taps = self.taps();
        for (b, block) in wp[..self.packed_len_for(mr)].chunks_mut(self.c * taps * mr).enumerate() {
            // One output channel at a time, its taps innermost: the callers' `weight` reads
            // a run of `taps` consecutive floats per (channel, input channel), where the
            // lanes innermost jumped a whole filter per float (2-2.4× faster on a 64→64 3×3
            // layer, forward and backward-data layouts; 44 µs before, serial in every call).
            for i in 0..mr {
                let co = b * mr + i;
                for c in 0..self.c {
                    for t in 0..taps {
                        block[(c * taps + t) * mr + i] = if co < self.co { weight(co, c, t) } else { 0.0 };
                    }
                }
            }
        }
    }

    /// `dst[co, p] = bias[co] + Σ_{c, t} wp(co, c, t) · src[c, shifted p]` for one image.
    ///
    /// `scratch` holds [`Direct::scratch_len`] floats, zero where [`Direct::pad_into`] does
    /// not write (the caller zeroes it once, before its first image).
    pub(crate) fn run(&self, plan: &Plan, src: &[f32], wp: &[f32], bias: Option<&[f32]>, dst: &mut [f32], scratch: &mut [f32]) {
        assert!(src.len() >= self.c * self.h * self.w, "direct conv: short source");
        assert!(dst.len() >= self.co * self.oh() * self.ow(), "direct conv: short destination");
        assert!(wp.len() >= self.packed_len(), "direct conv: short packed weights");
        assert!(bias.is_none_or(|b| b.len() >= self.co), "direct conv: short bias");
        assert!(scratch.len() >= self.scratch_len(), "direct conv: short scratch");
        #[cfg(target_arch = "x86_64")]
        {
            if self.padded_rows().is_some() {
                self.pad_into(src, scratch);
                self.run_on_copy(scratch, wp, bias, dst);
                return;
            }
            if self.channels() {
                self.pad_into(src, scratch);
                // SAFETY: the CPU has AVX2 and FMA (channels() checked); the padded copy and
                // the other operands' lengths were checked above.
                unsafe { x86::run_channels_avx2(self, scratch, wp, bias, dst) };
                return;
            }
            if has_avx512() {
                // SAFETY: the CPU has AVX-512F; the lengths were checked above.
                unsafe { x86::run_avx512(self, plan, src, wp, bias, dst) };
                return;
            }
            if crate::cpu::simd::has_avx2() {
                // SAFETY: the CPU has AVX2 and FMA; the lengths were checked above.
                unsafe { x86::run_avx2(self, plan, src, wp, bias, dst) };
                return;
            }
        }
        unreachable!("Direct is only made where has_kernel() holds")
    }
}

impl Direct {
    /// [`Direct::run`]'s padded kernel on `xp`, a copy [`Direct::pad_into`] made (this
    /// geometry's or one of the same [`Direct::padded_dims`] and padding).
    ///
    /// # Panics
    /// Where no padded kernel runs on this CPU, or an operand is short.
    pub(crate) fn run_on_copy(&self, xp: &[f32], wp: &[f32], bias: Option<&[f32]>, dst: &mut [f32]) {
        let Some(rows) = self.padded_rows() else { unreachable!("direct conv: no padded kernel on this CPU") };
        let (hp, pitch) = self.padded_dims();
        assert!(xp.len() >= self.c * self.s * hp * pitch, "direct conv: short padded copy");
        assert!(dst.len() >= self.co * self.oh() * self.ow(), "direct conv: short destination");
        assert!(wp.len() >= self.packed_len(), "direct conv: short packed weights");
        assert!(bias.is_none_or(|b| b.len() >= self.co), "direct conv: short bias");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has the vector unit padded_rows() chose; the padded copy holds
        // every tap of every output pixel; the other lengths were checked above.
        unsafe {
            match rows {
                Rows::Whole if self.s == 1 => x86::run_padded_avx512::<false, 1>(self, xp, wp, bias, dst),
                Rows::Whole => x86::run_padded_avx512::<false, 2>(self, xp, wp, bias, dst),
                Rows::Pairs if self.s == 1 => x86::run_padded_avx512::<true, 1>(self, xp, wp, bias, dst),
                Rows::Pairs => x86::run_padded_avx512::<true, 2>(self, xp, wp, bias, dst),
                Rows::Eights => x86::run_padded_avx2::<false>(self, xp, wp, bias, dst),
                Rows::Ragged => x86::run_padded_avx2::<true>(self, xp, wp, bias, dst),
                Rows::Ragged16 => x86::run_ragged_avx512(self, xp, wp, bias, dst),
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("padded kernels exist on x86_64 only: {rows:?}");
    }
}

/// Which kernel over a zero-padded copy of the source runs, by how it reads a vector of
/// output pixels: AVX-512 with 16 pixels of one output row (rows a multiple of 16 wide) or two
/// rows of 8; AVX2 with 8 pixels of one row (rows a multiple of 8 wide).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rows {
    Whole,
    Pairs,
    Eights,
    /// AVX2, output rows not a multiple of 8 wide: each row is computed as if rounded up to
    /// the next multiple of 8 (the copy's rows long enough to read there), the last vector of
    /// a row stored under a mask. Taken where the rounding adds at most a quarter
    /// ([`ragged_ok`]): LeNet-5's 28- and 14-pixel rows.
    Ragged,
    /// AVX-512, stride 1, rows not a multiple of 8 wide where rounding them up to a multiple
    /// of 16 adds at most three eighths of the rounded row ([`ragged16_ok`]): vectors of 16
    /// pixels, the last of each row stored under a mask, the weights in [`AVX2_MR`]'s blocks.
    Ragged16,
}

/// Whether output rows `ow` wide take the ragged padded AVX2 kernel: not a multiple of 8,
/// and rounded up to one adding at most a quarter of the row.
fn ragged_ok(ow: usize) -> bool {
    let owv = ow.div_ceil(8) * 8;
    ow >= 8 && !ow.is_multiple_of(8) && 4 * (owv - ow) <= owv
}

/// Whether output rows `ow` wide take [`Rows::Ragged16`] on an AVX-512 CPU: not a multiple of
/// 8, and rounded up to a multiple of 16 at most three eighths padding (LeNet-5's 28, 14 and
/// 10: the 10-pixel rows' masked kernel was slower than computing 16).
fn ragged16_ok(ow: usize) -> bool {
    let owv = ow.div_ceil(16) * 16;
    ow >= 8 && !ow.is_multiple_of(8) && 8 * (owv - ow) <= 3 * owv
}

impl Direct {
    /// Where a padded kernel runs (no vector needs a mask): with AVX-512, output rows a
    /// multiple of 16 or exactly 8 pixels wide and a multiple of 32 output pixels (whole
    /// tiles); elsewhere, on any CPU with AVX2 (an AVX-512 one included), output rows a
    /// multiple of 8 pixels wide, or [`Rows::Ragged`] ones. Elsewhere the masked kernels of
    /// [`Direct::run`] run.
    ///
    /// An AVX-512 CPU takes the AVX2 forms where its own do not apply: LeNet-5's second layer
    /// ran its backward-data pass (14-pixel rows) 1.5× faster through the ragged AVX2 kernel
    /// than through the masked AVX-512 one on a Zen 4 (docs/results/benchmarks-history.md §10.6). Its ragged rows take
    /// [`Rows::Ragged16`] where rounding to 16 wastes no more than three eighths: on a core
    /// with two 512-bit FMA units the AVX2 kernel ran at half its peak (docs/results/benchmarks-history.md §10.13).
    /// All add in the same order, so the bits do not change.
    pub(crate) fn padded_rows(&self) -> Option<Rows> {
        let (ow, p) = (self.ow(), self.oh() * self.ow());
        if has_avx512() && p.is_multiple_of(16 * NV) {
            if ow.is_multiple_of(16) {
                return Some(Rows::Whole);
            }
            if ow == 8 {
                return Some(Rows::Pairs);
            }
        }
        if has_avx512() && self.s == 1 && ragged16_ok(ow) {
            return Some(Rows::Ragged16);
        }
        if !crate::cpu::simd::has_avx2() {
            return None;
        }
        if ow.is_multiple_of(8) {
            Some(Rows::Eights)
        } else {
            ragged_ok(ow).then_some(Rows::Ragged)
        }
    }

    /// Height and row pitch of the zero-padded copy of the source. With stride `s` each
    /// channel's padded image is stored as `s` phase planes, plane `q` holding the columns
    /// `x ≡ q (mod s)` (`x / s` within a row), so that the taps of consecutive output pixels
    /// are consecutive floats for every stride: `xp[((c·s + q)·hp + y)·pitch + x / s]`.
    pub(crate) fn padded_dims(&self) -> (usize, usize) {
        let owv = match self.padded_rows() {
            Some(Rows::Ragged) => self.ow().div_ceil(8) * 8,
            Some(Rows::Ragged16) => self.ow().div_ceil(16) * 16,
            _ => self.ow(),
        };
        self.padded_dims_for(owv)
    }

    /// [`Direct::padded_dims`] for output rows computed `owv` pixels wide (at least `ow`).
    pub(crate) fn padded_dims_for(&self, owv: usize) -> (usize, usize) {
        let hp = (self.h + 2 * self.ph + self.eh).max(self.s * (self.oh() - 1) + self.kh);
        let wfull = (self.w + 2 * self.pw + self.ew).max(self.s * (owv - 1) + self.kw);
        (hp.max(self.pad_to.0), wfull.div_ceil(self.s).max(self.pad_to.1))
    }

    /// Scratch floats [`Direct::run`] needs per image: the padded copy, where it is used.
    pub(crate) fn scratch_len(&self) -> usize {
        if self.padded_rows().is_some() || self.channels() {
            let (hp, wp) = self.padded_dims();
            self.c * self.s * hp * wp
        } else {
            0
        }
    }

    /// Copies `src[c, h, w]` into the interior of the padded `xp` ([`Direct::padded_dims`]).
    pub(crate) fn pad_into(&self, src: &[f32], xp: &mut [f32]) {
        self.pad_into_dims(src, xp, self.padded_dims());
    }

    /// [`Direct::pad_into`] for a copy of dimensions `(hp, wp)`.
    fn pad_into_dims(&self, src: &[f32], xp: &mut [f32], (hp, wp): (usize, usize)) {
        let s = self.s;
        for c in 0..self.c {
            for y in 0..self.h {
                let row = &src[(c * self.h + y) * self.w..][..self.w];
                if s == 1 {
                    let d0 = (c * hp + y + self.ph) * wp + self.pw;
                    xp[d0..d0 + self.w].copy_from_slice(row);
                    continue;
                }
                // Stride 2: even padded columns to phase 0, odd ones to phase 1. Source
                // column x is padded column x + pw: the pair (2i, 2i + 1) lands at column
                // i + pw/2 of (phase 0, phase 1) for even pw, at (i + (pw - 1)/2 of phase 1,
                // i + (pw + 1)/2 of phase 0) for odd pw.
                debug_assert_eq!(s, 2);
                let r0 = (c * s * hp + y + self.ph) * wp;
                let r1 = r0 + hp * wp;
                let (phase0, phase1) = xp.split_at_mut(r1);
                let (p0, p1) = (&mut phase0[r0..r0 + wp], &mut phase1[..wp]);
                if self.pw.is_multiple_of(2) {
                    deinterleave(row, &mut p0[self.pw / 2..], &mut p1[self.pw / 2..]);
                } else {
                    deinterleave(row, &mut p1[(self.pw - 1) / 2..], &mut p0[self.pw.div_ceil(2)..]);
                }
            }
        }
    }
}

/// Whether the kernels may use AVX-512F (the CPU has it and `CROSSBOW_CPU_ISA` allows it).
pub(crate) fn has_avx512() -> bool {
    crate::cpu::simd::has_avx512()
}

/// Whether one of the direct kernels runs on this CPU (AVX-512F, or AVX2 and FMA).
pub(crate) fn has_kernel() -> bool {
    has_avx512() || crate::cpu::simd::has_avx2()
}

/// A run of consecutive lanes of one pixel vector that lies in one output row: for a tap,
/// lanes `l` with bit `l` of `mask` read `src[c·h·w + off + l]`.
#[derive(Clone, Copy, Debug, Default)]
struct Seg {
    mask: u32,
    off: isize,
}

/// Most rows one vector of pixels can touch (16 lanes over rows of at least 8 pixels).
const MAX_SEGS: usize = 3;

/// Vector slots per tap in a [`Plan`] (the most any path uses).
const SLOTS: usize = NV;

/// The segments of every tap of every tile of the masked kernels, made once per call (they
/// depend on the geometry alone) and read for every image: `counts[tile][v]` segments in
/// `segs[((tile·taps + t)·SLOTS + v)·MAX_SEGS + s]`. Empty where the padded kernel runs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    counts: Vec<[usize; SLOTS]>,
    segs: Vec<Seg>,
}

/// Plans made on this thread, by geometry and vector shape: a layer's plan is the same at
/// every call, and making it was 1.5% of a LeNet-5 step (its layers all take the masked
/// kernels). A handful of entries per model; cleared if a program ever cycles through more.
type PlanCache = Vec<((Direct, usize, usize), std::sync::Arc<Plan>)>;

thread_local! {
    static PLANS: std::cell::RefCell<PlanCache> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Most plans [`PLANS`] keeps per thread.
const PLAN_CACHE: usize = 64;

impl Direct {
    /// The segment plan of the masked kernel that [`Direct::run`] will use on this CPU (made
    /// once per thread and geometry).
    pub(crate) fn plan(&self) -> std::sync::Arc<Plan> {
        if self.padded_rows().is_some() || self.channels() {
            return std::sync::Arc::new(Plan::default());
        }
        let (lanes, nv) = if has_avx512() { (16, NV) } else { (8, 1) };
        let key = (*self, lanes, nv);
        PLANS.with(|cache| {
            let mut cache = cache.borrow_mut();
            if let Some((_, plan)) = cache.iter().find(|(k, _)| *k == key) {
                return std::sync::Arc::clone(plan);
            }
            if cache.len() >= PLAN_CACHE {
                cache.clear();
            }
            let plan = std::sync::Arc::new(Plan::for_lanes(self, lanes, nv));
            cache.push((key, std::sync::Arc::clone(&plan)));
            plan
        })
    }
}

impl Plan {
    /// The plan for vectors of `lanes` pixels, `nv` per tile.
    pub(crate) fn for_lanes(d: &Direct, lanes: usize, nv: usize) -> Plan {
        let (taps, p_end) = (d.taps(), d.oh() * d.ow());
        let tiles = p_end.div_ceil(lanes * nv);
        let mut plan = Plan { counts: vec![[0; SLOTS]; tiles], segs: vec![Seg::default(); tiles * taps * SLOTS * MAX_SEGS] };
        for ti in 0..tiles {
            let p0 = ti * lanes * nv;
            for ki in 0..d.kh {
                for kj in 0..d.kw {
                    let t = ki * d.kw + kj;
                    for v in 0..nv {
                        let (n, s) = segments(d, p0 + v * lanes, p_end, lanes, ki, kj);
                        plan.counts[ti][v] = n;
                        plan.segs[((ti * taps + t) * SLOTS + v) * MAX_SEGS..][..MAX_SEGS].copy_from_slice(&s);
                    }
                }
            }
        }
        plan
    }
}

/// The segments of the pixel vector starting at flat output pixel `p0` (`lanes` wide, ending
/// at `p_end`) for tap `(ki, kj)`: `(count, segs)`.
fn segments(d: &Direct, p0: usize, p_end: usize, lanes: usize, ki: usize, kj: usize) -> (usize, [Seg; MAX_SEGS]) {
    let ow = d.ow();
    let mut segs = [Seg::default(); MAX_SEGS];
    let mut n = 0;
    let mut l = 0;
    while l < lanes && p0 + l < p_end {
        let p = p0 + l;
        let (oy, ox) = (p / ow, p % ow);
        let len = (ow - ox).min(lanes - l).min(p_end - p);
        let iy = (oy + ki) as isize - d.ph as isize;
        // Lanes l + j with 0 <= ox + j + kj - pw < w, i.e. lo <= j < hi.
        let first = (ox + kj) as isize - d.pw as isize;
        let lo = (-first).clamp(0, len as isize) as u32;
        let hi = (d.w as isize - first).clamp(0, len as isize) as u32;
        let mask = if iy >= 0 && (iy as usize) < d.h && lo < hi {
            let bits = |n: u32| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
            (bits(hi) & !bits(lo)) << l
        } else {
            0
        };
        // Lane l + j reads src[iy·w + ox + j + kj - pw]: off = that address minus the lane.
        let off = iy * d.w as isize + (ox + kj) as isize - d.pw as isize - l as isize;
        segs[n] = Seg { mask, off };
        n += 1;
        l += len;
    }
    (n, segs)
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) use x86::{params_paths, run_paths};

/// The weight gradient of a convolution (any kernel, stride and padding; not 1×1 unpadded)
/// without im2col: `dWt[(c·taps + t)·cop + o] (+)= Σ_p x[c, tap t of p] · dy[o, p]`, with
/// the output channels in the vector lanes (16 with AVX-512, 8 with AVX2; padded to a
/// multiple), so every sum stays whole in one lane and no horizontal reduction is needed.
///
/// Per image the input is copied once zero-padded (`xp[c, hp, wp]`, so no tap needs a bounds
/// check) and `dy` transposed pixel-major (`dyt[p, co]`). The micro-kernel holds
/// [`PARAMS_CB`] input channels × 9 taps of accumulators for one vector of output channels
/// (3×3 kernels; other sizes: 24 consecutive `(c, tap)` rows, their offsets from a table);
/// per output pixel it loads one vector of `dyt` and broadcasts 9·CB input values from `xp`.
/// Unlike the window path it wastes no work on padding columns, and stride 2 costs nothing
/// extra (the broadcasts are scalar loads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ParamsDirect {
    pub c: usize,
    pub co: usize,
    /// `co` rounded up to the vector width: the row length of `dyt` and `dwt` (the extra
    /// channels are zero in `dyt` and ignored in `dwt`).
    pub cop: usize,
    pub kh: usize,
    pub kw: usize,
    pub h: usize,
    pub w: usize,
    pub ph: usize,
    pub pw: usize,
    pub sh: usize,
    pub sw: usize,
    pub oh: usize,
    pub ow: usize,
}

/// Input channels per AVX-512 tile of the weight-gradient kernel (27 accumulators).
pub(crate) const PARAMS_CB: usize = 3;

impl ParamsDirect {
    /// Where the kernel applies: a CPU with AVX-512F or AVX2 and FMA, and a kernel other than
    /// 1×1 unpadded (a plain GEMM).
    pub(crate) fn of(g: &Conv2dGeom) -> Option<ParamsDirect> {
        // Vectors of 16 output channels where AVX-512 pads no more of them than AVX2's 8
        // would: LeNet-5's first layer (6 channels) wastes 10 of 16 lanes but 2 of 8, and its
        // weight gradient ran 2.1× faster through the AVX2 kernel on a Zen 4 (docs/results/benchmarks-history.md §10.6).
        let co = g.out_channels;
        let lanes = if has_avx512() && co.next_multiple_of(16) == co.next_multiple_of(8) {
            16
        } else if crate::cpu::simd::has_avx2() {
            8
        } else {
            return None;
        };
        (!g.is_pointwise()).then_some(ParamsDirect {
            c: g.in_channels,
            co: g.out_channels,
            cop: g.out_channels.next_multiple_of(lanes),
            kh: g.kernel_h,
            kw: g.kernel_w,
            h: g.in_h,
            w: g.in_w,
            ph: g.pad_h,
            pw: g.pad_w,
            sh: g.stride_h,
            sw: g.stride_w,
            oh: g.out_h(),
            ow: g.out_w(),
        })
    }

    /// Padded height and row pitch of `xp` (taps of the last output row and column stay
    /// inside it).
    pub(crate) fn padded(&self) -> (usize, usize) {
        let hp = ((self.oh - 1) * self.sh + self.kh).max(self.h + self.ph);
        let wp = ((self.ow - 1) * self.sw + self.kw).max(self.w + self.pw);
        (hp, wp)
    }

    pub(crate) fn xp_len(&self) -> usize {
        let (hp, wp) = self.padded();
        self.c * hp * wp
    }

    pub(crate) fn dyt_len(&self) -> usize {
        self.oh * self.ow * self.cop
    }

    /// Elements of the gradient in the kernel's order, `[c, 9, co]`.
    pub(crate) fn dwt_len(&self) -> usize {
        self.c * self.kh * self.kw * self.cop
    }

    /// Adds (or, with `first`, writes) one image's weight gradient into `dwt`.
    pub(crate) fn accumulate(&self, xp: &[f32], dyt: &[f32], dwt: &mut [f32], first: bool) {
        assert!(xp.len() >= self.xp_len() && dyt.len() >= self.dyt_len() && dwt.len() >= self.dwt_len());
        #[cfg(target_arch = "x86_64")]
        {
            if has_avx512() && self.cop.is_multiple_of(16) {
                // SAFETY: the CPU has AVX-512F; lengths checked above.
                unsafe { x86::params_avx512(self, xp, dyt, dwt, first) };
                return;
            }
            if crate::cpu::simd::has_avx2() {
                // SAFETY: the CPU has AVX2 and FMA; lengths checked above.
                unsafe { x86::params_avx2(self, xp, dyt, dwt, first) };
                return;
            }
        }
        unreachable!("ParamsDirect is only made where a vector unit for it exists")
    }
}
