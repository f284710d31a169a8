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
mod x86 {
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
}

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
