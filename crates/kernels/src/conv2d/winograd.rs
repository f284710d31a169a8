//! Winograd F(4×4, 3×3) convolution on the CPU for the wide 3×3 layers (stride 1, padding 1,
//! at least [`MIN_CHANNELS`] channels in and out): the forward pass and, with the kernel
//! transposed and flipped, the backward-data pass (the weight gradient, the transpose of
//! this forward pass: `winograd_params.rs`).
//!
//! Each 4×4 block of output pixels ("tile") is computed from a 6×6 block of input pixels as
//! `A^T [ (G g G^T) ⊙ (B^T d B) ] A` (Lavin & Gray, "Fast algorithms for convolutional neural
//! networks", 2016): summed over the input channels, the element-wise product becomes, for
//! each of the 36 positions `ξ` of the transformed tile, a product of a `co × c` matrix of
//! transformed weights `U[ξ]` and a `c × tiles` matrix of transformed inputs `V[ξ]` — 36
//! multiply-adds per 16 output pixels and input channel instead of 144 (4× fewer), plus the
//! transforms. Those are memory-bound passes over 36/16 of the input and output, so the
//! method pays on wide layers and not on narrow ones: on a Zen 4 (`gemm_conv` bench, batch
//! 32) the CIFAR ResNets' 64- and 32-channel layers ran 1.3-2.1× faster than the direct
//! kernel with AVX-512 and 1.3-1.7× with AVX2, the 16-channel ones 0.8-1.1× (BENCHMARKS
//! §10.8, §10.9).
//!
//! Layout: the images are processed in groups of [`Winograd::lanes`] (16 with AVX-512 at
//! batches of 32 or more, else 8: one vector), one image per lane, so that every transform is
//! plain vector arithmetic over the lanes with no shuffles: a group is first copied,
//! zero-padded, into `xq[c][hp][wp][lane]` (8×8 register transposes), the tiles' transforms
//! are written to `V[ξ][c][tile·lanes + lane]` (planes [`SKEW`] floats apart), the
//! 36 products run on the direct convolution's 1×1 kernel ([`Direct`], whose sum over the
//! input channels runs in order on every path), and the output transform writes
//! `yq[co][h][w][lane]`, transposed back into the images. Tiles are processed in chunks so
//! that `V` and the products stay in L2.
//!
//! It runs where AVX2 or AVX-512 runs, on batches of at least two groups, split over the
//! threads in whole groups (so a thread count above the groups leaves threads idle in these
//! layers). The width is chosen from the batch and the CPU, never the threads; every lane
//! computes the same operations in the same order and a group is computed the same way on
//! any thread, so any number of threads gives the same bits. The result differs from
//! the direct kernel's in rounding (the transforms reassociate the sum: up to 6.5e-5 on
//! outputs of scale ~8 at 64 channels; tested against the f64 definition).

use super::direct::Direct;
use super::Conv2dGeom;

/// Fewest input and output channels for which a 3×3 layer takes this path. Measured on a
/// Zen 4 (`gemm_conv` bench, batch 32, forward and backward-data, 1 and 2 threads): the
/// ResNets' 64-channel layers (8×8) 1.2-1.5× the direct kernel, 32-channel (16×16)
/// 1.1-1.5×, 16-channel (32×32) 0.8-0.95×.
pub(crate) const MIN_CHANNELS: usize = 32;

/// Positions of a transformed tile.
pub(super) const XI: usize = 36;

/// Fewest groups of images (of [`Winograd::lanes`] each) for which a layer takes this path:
/// two, so that a learner of two threads keeps both busy (the groups are the unit of work
/// split over the threads). At batch 16 on two AVX-512 threads (one group) one thread idled
/// and ResNet-32 ran 0.92× the direct kernel's speed.
pub(crate) const MIN_GROUPS: usize = 2;

/// Floats between consecutive positions' planes of `V` and of the products beyond the plane
/// itself: the planes are a multiple of 4 KB apart otherwise, so the 36 streams of a tile's
/// transform fall into the same L1 sets and evict each other.
pub(super) const SKEW: usize = 16;

/// Images per group with AVX-512: one per lane of a vector.
pub(crate) const LANES: usize = 16;

/// Images per group with AVX2: one per lane of a vector.
pub(crate) const AVX2_LANES: usize = 8;

/// The group width for a batch of `batch` images on this CPU: [`LANES`] with AVX-512 where
/// the batch fills [`MIN_GROUPS`] groups of it, else [`AVX2_LANES`] (with AVX2 or AVX-512)
/// where the batch fills as many of those; `None` for smaller batches or without AVX2.
fn lanes_for(batch: usize) -> Option<usize> {
    if crate::cpu::simd::has_avx512() && batch >= MIN_GROUPS * LANES {
        Some(LANES)
    } else if crate::cpu::simd::has_avx2() && batch >= MIN_GROUPS * AVX2_LANES {
        Some(AVX2_LANES)
    } else {
        None
    }
}

/// Floats of `V` and the products per chunk of tiles that the chunking aims at (~384 KB:
/// both stay in a 512 KB L2).
const CHUNK_FLOATS: usize = 96 * 1024;

/// The environment variable that turns this path off (`0` / `off`) for measurements: the
/// layers then take the direct kernel. Unset, `1` or `on`: on.
pub const WINOGRAD_ENV: &str = "CROSSBOW_WINOGRAD";

/// Whether wide 3×3 layers take the Winograd path: [`WINOGRAD_ENV`] parsed (read once; an
/// invalid value is an error, which the command line reports before doing anything).
pub fn winograd_setting() -> Result<bool, String> {
    static ON: std::sync::OnceLock<Result<bool, String>> = std::sync::OnceLock::new();
    ON.get_or_init(|| winograd_setting_with(std::env::var(WINOGRAD_ENV).ok().as_deref())).clone()
}

/// [`winograd_setting`] for the value `setting` (`None`: unset).
pub fn winograd_setting_with(setting: Option<&str>) -> Result<bool, String> {
    match setting.map(|s| s.trim().to_ascii_lowercase()) {
        None => Ok(true),
        Some(s) if matches!(s.as_str(), "1" | "on" | "true" | "") => Ok(true),
        Some(s) if matches!(s.as_str(), "0" | "off" | "false") => Ok(false),
        Some(_) => Err(format!("{WINOGRAD_ENV}={:?} is not a switch (valid: 1, on, 0, off)", setting.unwrap_or(""))),
    }
}

/// One 3×3, stride-1, padding-1 convolution of `c` channels of `h × w` into `co` channels of
/// `h × w`, by F(4×4, 3×3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Winograd {
    pub c: usize,
    pub co: usize,
    pub h: usize,
    pub w: usize,
    /// Images per group, one per vector lane: [`LANES`] or [`AVX2_LANES`].
    pub lanes: usize,
}

/// Lane-wise arithmetic on `G` lanes (LLVM keeps these whole vectors).
#[inline(always)]
pub(super) fn add<const G: usize>(a: [f32; G], b: [f32; G]) -> [f32; G] {
    std::array::from_fn(|l| a[l] + b[l])
}

#[inline(always)]
pub(super) fn sub<const G: usize>(a: [f32; G], b: [f32; G]) -> [f32; G] {
    std::array::from_fn(|l| a[l] - b[l])
}

#[inline(always)]
pub(super) fn scale<const G: usize>(a: [f32; G], k: f32) -> [f32; G] {
    std::array::from_fn(|l| k * a[l])
}

/// B^T d for one column (or row) of 6 lane vectors.
#[inline(always)]
pub(super) fn bt<const G: usize>(d: [[f32; G]; 6]) -> [[f32; G]; 6] {
    let [d0, d1, d2, d3, d4, d5] = d;
    [
        add(sub(scale(d0, 4.0), scale(d2, 5.0)), d4),
        sub(add(d3, d4), scale(add(d1, d2), 4.0)),
        add(sub(scale(d1, 4.0), scale(d2, 4.0)), sub(d4, d3)),
        add(sub(scale(d3, 2.0), scale(d1, 2.0)), sub(d4, d2)),
        add(sub(scale(d1, 2.0), scale(d3, 2.0)), sub(d4, d2)),
        add(sub(scale(d1, 4.0), scale(d3, 5.0)), d5),
    ]
}

/// A^T m for one column (or row) of 6 lane vectors.
#[inline(always)]
fn at<const G: usize>(m: [[f32; G]; 6]) -> [[f32; G]; 4] {
    let [m0, m1, m2, m3, m4, m5] = m;
    let (s12, d12, s34, d34) = (add(m1, m2), sub(m1, m2), add(m3, m4), sub(m3, m4));
    [add(add(m0, s12), s34), add(d12, scale(d34, 2.0)), add(s12, scale(s34, 4.0)), add(add(d12, scale(d34, 8.0)), m5)]
}

/// Row `i` of the transformed weights, `U[6i + j] = Σ_l G[j][l]·T[l]` with `T[l] = Σ_k
/// G[i][k]·g[k][l]` (the separable form: 27 multiply-adds per weight and row instead of 54),
/// each sum in that order, for every output channel `o` at once (`taps[(t·c + ci)·cop + o]`,
/// `t = 3k + l`), into the 1×1 kernel's packed layout, blocks of `MR` output channels:
/// `wps[j·len + (block·c + ci)·MR + lane]` for `o = block·MR + lane`. `MR` is a constant so
/// that a block is a register, not a call to `memcpy`.
#[inline(always)]
fn pack_row<const MR: usize>(i: usize, c: usize, cop: usize, taps: &[f32], wps: &mut [f32], len: usize) {
    let gi = GM[i];
    for b in 0..cop / MR {
        for ci in 0..c {
            let g = |t: usize| <[f32; MR]>::try_from(&taps[(t * c + ci) * cop + b * MR..][..MR]).unwrap_or([0.0; MR]);
            let t: [[f32; MR]; 3] = std::array::from_fn(|l| {
                let (g0, g1, g2) = (g(l), g(3 + l), g(6 + l));
                std::array::from_fn(|o| gi[0] * g0[o] + gi[1] * g1[o] + gi[2] * g2[o])
            });
            for (j, gj) in GM.iter().enumerate() {
                let u: [f32; MR] = std::array::from_fn(|o| gj[0] * t[0][o] + gj[1] * t[1][o] + gj[2] * t[2][o]);
                if let Ok(dst) = <&mut [f32; MR]>::try_from(&mut wps[j * len + (b * c + ci) * MR..][..MR]) {
                    *dst = u;
                }
            }
        }
    }
}

/// The weight transform's matrix G (6×3).
pub(super) const GM: [[f32; 3]; 6] = [
    [0.25, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// The layers Winograd is for, every pass: 3×3, stride 1, padding 1, at least
/// [`MIN_CHANNELS`] in and out, and [`WINOGRAD_ENV`] not off (the CPU and the batch decide the
/// rest, per pass).
pub(super) fn wide_layer(g: &Conv2dGeom) -> bool {
    let shape = (g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w) == (3, 3, 1, 1, 1, 1);
    shape && g.in_channels >= MIN_CHANNELS && g.out_channels >= MIN_CHANNELS && winograd_setting().unwrap_or(false)
}

impl Winograd {
    /// The forward pass of `g`, where this path applies and is on.
    pub(crate) fn forward(g: &Conv2dGeom) -> Option<Winograd> {
        let lanes = Self::applies(g)?;
        Some(Winograd { c: g.in_channels, co: g.out_channels, h: g.in_h, w: g.in_w, lanes })
    }

    /// The backward-data pass of `g` (the convolution of `dy` with the transposed, flipped
    /// kernel, also 3×3 with padding 1), where this path applies and is on.
    pub(crate) fn backward_data(g: &Conv2dGeom) -> Option<Winograd> {
        let lanes = Self::applies(g)?;
        Some(Winograd { c: g.out_channels, co: g.in_channels, h: g.in_h, w: g.in_w, lanes })
    }

    /// The group width, where the layer takes this path: 3×3, stride 1, padding 1, at least
    /// [`MIN_CHANNELS`] in and out, AVX-512 or AVX2, a batch of at least [`MIN_GROUPS`]
    /// groups of that CPU's width, and [`WINOGRAD_ENV`] not off. Never the thread count: the
    /// path (so the bits) of a layer must not change with the threads a learner gets.
    fn applies(g: &Conv2dGeom) -> Option<usize> {
        if !wide_layer(g) {
            return None;
        }
        lanes_for(g.batch)
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

    /// Height and width of the padded copy: every tile's 6×6 input block inside it.
    fn padded(&self) -> (usize, usize) {
        (4 * self.th() + 2, 4 * self.tw() + 2)
    }

    /// Tiles per chunk: as many as keep `V` and the products within [`CHUNK_FLOATS`],
    /// rounded up so that a chunk's columns are a multiple of 32 (the AVX-512 1×1 kernel's
    /// whole tiles; two vectors of 8 for the AVX2 one), at most the tiles rounded up the
    /// same way.
    fn chunk_tiles(&self) -> usize {
        let step = 32 / self.lanes;
        let fit = (CHUNK_FLOATS / (XI * (self.c + self.co) * self.lanes)).max(1);
        fit.div_ceil(step).min(self.tiles().div_ceil(step)) * step
    }

    /// The 1×1 product of one position over a chunk of tiles.
    fn product(&self) -> Direct {
        let cols = self.chunk_tiles() * self.lanes;
        Direct { c: self.c, h: 1, w: cols, co: self.co, kh: 1, kw: 1, ph: 0, pw: 0, s: 1, eh: 0, ew: 0, pad_to: (0, 0) }
    }

    /// Floats of the transformed, packed weights, and of a tap-major copy of the weights
    /// [`Winograd::pack`] makes first.
    pub(crate) fn packed_len(&self) -> usize {
        let prod = self.product();
        XI * prod.packed_len() + 9 * self.co.div_ceil(prod.block()) * prod.block() * self.c
    }

    /// Scratch floats one thread needs: the padded group, `V`, the products and the
    /// interleaved output.
    pub(crate) fn scratch_len(&self) -> usize {
        let (hp, wp) = self.padded();
        let (cols, g) = (self.chunk_tiles() * self.lanes, self.lanes);
        self.c * hp * wp * g + XI * (self.c * cols + self.co * cols + 2 * SKEW) + self.co * self.h * self.w * g
    }

    /// The workspace: the packed weights plus `groups` scratches.
    pub(crate) fn workspace_len(&self, groups: usize) -> usize {
        self.packed_len() + groups * self.scratch_len()
    }

    /// Transforms `weight(co, c, t)` (t = ki·3 + kj) into `U[ξ][co][c]`, packed for the
    /// 1×1 kernel, one packed block per position: `u[ξ·len ..]`, `U = G g G^T`
    /// ([`pack_row`]). Split over the backend's threads by taps, then by rows of positions.
    pub(crate) fn pack(
        &self,
        ctx: crate::cpu::CpuCtx<'_>,
        weight: impl Fn(usize, usize, usize) -> f32 + Sync,
        u: &mut [f32],
    ) {
        let prod = self.product();
        let (len, mr) = (prod.packed_len(), prod.block());
        let (c, co) = (self.c, self.co);
        let cop = co.div_ceil(mr) * mr;
        let (u, taps) = u[..self.packed_len()].split_at_mut(XI * len);
        // Tap-major copy with the output channels innermost, zero past `co`:
        // taps[(t·c + ci)·cop + o], one tap per thread at a time.
        let planes: Vec<_> = taps[..9 * c * cop].chunks_mut(c * cop).enumerate().collect();
        ctx.for_each(planes, |(t, plane)| {
            for (ci, row) in plane.chunks_exact_mut(cop).enumerate() {
                for (o, v) in row.iter_mut().enumerate() {
                    *v = if o < co { weight(o, ci, t) } else { 0.0 };
                }
            }
        });
        let taps = &*taps;
        // One item per row `i` of positions (`ξ = 6i + j`, six packed blocks in a row).
        let items: Vec<_> = u.chunks_mut(6 * len).enumerate().collect();
        ctx.for_each(items, |(i, wps)| match mr {
            8 => pack_row::<8>(i, c, cop, taps, wps, len),
            6 => pack_row::<6>(i, c, cop, taps, wps, len),
            _ => unreachable!("the 1×1 kernel packs blocks of 8 or 6 output channels"),
        });
    }

    /// The convolution of `n <= self.lanes` images `src[img][c][h][w]` (`src.len() >= n · c·h·w`)
    /// into `dst[img][co][h][w]`, `u` from [`Winograd::pack`], `scratch` of
    /// [`Winograd::scratch_len`] floats (any contents).
    pub(crate) fn run_group(&self, n: usize, src: &[f32], u: &[f32], bias: Option<&[f32]>, dst: &mut [f32], scratch: &mut [f32]) {
        let (in_img, out_img) = (self.c * self.h * self.w, self.co * self.h * self.w);
        assert!((1..=self.lanes).contains(&n), "winograd: {n} images for {} lanes", self.lanes);
        assert!(src.len() >= n * in_img && dst.len() >= n * out_img, "winograd: short operand");
        assert!(u.len() >= self.packed_len() && scratch.len() >= self.scratch_len(), "winograd: short workspace");
        assert!(bias.is_none_or(|b| b.len() >= self.co), "winograd: short bias");
        #[cfg(target_arch = "x86_64")]
        {
            if crate::cpu::simd::has_avx512() {
                // SAFETY: the CPU has AVX-512F; the lengths were checked above.
                unsafe {
                    match self.lanes {
                        LANES => self.run_avx512::<LANES>(n, src, u, bias, dst, scratch),
                        AVX2_LANES => self.run_avx512::<AVX2_LANES>(n, src, u, bias, dst, scratch),
                        l => unreachable!("winograd: groups of {l} lanes"),
                    }
                };
                return;
            }
            if self.lanes == AVX2_LANES && crate::cpu::simd::has_avx2() {
                // SAFETY: the CPU has AVX2 and FMA; the lengths were checked above.
                unsafe { self.run_avx2(n, src, u, bias, dst, scratch) };
                return;
            }
        }
        unreachable!("Winograd is only made where AVX-512 or AVX2 runs, {} lanes", self.lanes)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn run_avx512<const G: usize>(&self, n: usize, src: &[f32], u: &[f32], bias: Option<&[f32]>, dst: &mut [f32], sc: &mut [f32]) {
        self.run_lanes::<G>(n, src, u, bias, dst, sc)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, n: usize, src: &[f32], u: &[f32], bias: Option<&[f32]>, dst: &mut [f32], sc: &mut [f32]) {
        self.run_lanes::<AVX2_LANES>(n, src, u, bias, dst, sc)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn run_lanes<const G: usize>(&self, n: usize, src: &[f32], u: &[f32], bias: Option<&[f32]>, dst: &mut [f32], sc: &mut [f32]) {
        let (hp, wp) = self.padded();
        let (c, co, h, w) = (self.c, self.co, self.h, self.w);
        let nt = self.chunk_tiles();
        let cols = nt * G;
        let (xq, rest) = sc.split_at_mut(c * hp * wp * G);
        let (vs, ms) = (c * cols + SKEW, co * cols + SKEW);
        let (v, rest) = rest.split_at_mut(XI * vs);
        let (m, rest) = rest.split_at_mut(XI * ms);
        let yq = &mut rest[..co * h * w * G];
        self.interleave::<G>(n, src, xq);
        let prod = self.product();
        let len = prod.packed_len();
        let tiles = self.tiles();
        debug_assert!(u.len() >= XI * len);
        for t0 in (0..tiles).step_by(nt) {
            let t1 = (t0 + nt).min(tiles);
            self.input_chunk::<G>(xq, v, vs, t0, t1, cols);
            for xi in 0..XI {
                prod.run_on_copy(&v[xi * vs..][..c * cols], &u[xi * len..][..len], None, &mut m[xi * ms..][..co * cols]);
            }
            self.output_chunk::<G>(m, ms, bias, yq, t0, t1, cols);
        }
        // yq[p][lane] -> dst[lane][p] for the n images present.
        let pixels = co * h * w;
        // SAFETY: AVX runs (both callers enable AVX-512F or AVX2, each implying it); yq holds pixels × G floats (ld = G >= n) and dst
        // at least n · pixels (checked by run_group).
        unsafe { crate::cpu::simd::transpose_avx(yq, pixels, n, G, &mut dst[..n * pixels]) };
    }

    /// Copies `n` images into `xq[c][hp][wp][lane]`, lane `i` holding image `i`, zero around
    /// the images and in the lanes past `n`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn interleave<const G: usize>(&self, n: usize, src: &[f32], xq: &mut [f32]) {
        let (hp, wp) = self.padded();
        let (c, h, w) = (self.c, self.h, self.w);
        let in_img = c * h * w;
        for ci in 0..c {
            let plane = &mut xq[ci * hp * wp * G..][..hp * wp * G];
            let (top, rest) = plane.split_at_mut(wp * G);
            let (body, bottom) = rest.split_at_mut(h * wp * G);
            top.fill(0.0);
            bottom.fill(0.0);
            for (y, prow) in body.chunks_exact_mut(wp * G).enumerate() {
                let (left, rest) = prow.split_at_mut(G);
                let (row, right) = rest.split_at_mut(w * G);
                // Whole vectors of zeros, not a memset call per pixel.
                for px in std::iter::once(left).chain(right.chunks_exact_mut(G)) {
                    if let Ok(px) = <&mut [f32; G]>::try_from(px) {
                        *px = [0.0; G];
                    }
                }
                let off = (ci * h + y) * w;
                if n == G {
                    // SAFETY: AVX runs (both callers enable AVX-512F or AVX2); the source holds G rows of w
                    // floats at stride in_img from off, the destination w · G floats.
                    unsafe { crate::cpu::simd::transpose_avx(&src[off..], G, w, in_img, row) };
                } else {
                    for (x, px) in row.chunks_exact_mut(G).enumerate() {
                        for (lane, p) in px.iter_mut().enumerate() {
                            *p = if lane < n { src[lane * in_img + off + x] } else { 0.0 };
                        }
                    }
                }
            }
        }
    }

    /// The input transform of tiles `t0..t1` into `v[ξ][c][(tile - t0)·G + lane]`.
    #[inline(always)]
    fn input_chunk<const G: usize>(&self, xq: &[f32], v: &mut [f32], vs: usize, t0: usize, t1: usize, cols: usize) {
        let (hp, wp) = self.padded();
        let (c, tw) = (self.c, self.tw());
        // B^T d, row-major, one scratch for every tile: 36 vectors do not fit the registers,
        // and the arrays this was built from per tile (`array::from_fn`, then transposed) were
        // moved with a `memcpy` call per tile (2.3 KB).
        let mut s = [[0.0f32; G]; XI];
        for ci in 0..c {
            let plane = &xq[ci * hp * wp * G..][..hp * wp * G];
            for tile in t0..t1 {
                let (ty, tx) = (tile / tw, tile % tw);
                let ld = |i: usize, j: usize| -> [f32; G] {
                    let at = ((4 * ty + i) * wp + 4 * tx + j) * G;
                    <[f32; G]>::try_from(&plane[at..at + G]).unwrap_or([0.0; G])
                };
                // B^T d: one column j at a time.
                for j in 0..6 {
                    let col = bt([ld(0, j), ld(1, j), ld(2, j), ld(3, j), ld(4, j), ld(5, j)]);
                    for (i, r) in col.iter().enumerate() {
                        s[6 * i + j] = *r;
                    }
                }
                // (B^T d) B: one row i at a time.
                let at_col = (tile - t0) * G;
                for i in 0..6 {
                    let row = bt([s[6 * i], s[6 * i + 1], s[6 * i + 2], s[6 * i + 3], s[6 * i + 4], s[6 * i + 5]]);
                    for (j, r) in row.iter().enumerate() {
                        v[(i * 6 + j) * vs + ci * cols + at_col..][..G].copy_from_slice(r);
                    }
                }
            }
        }
    }

    /// The output transform of tiles `t0..t1` from `m[ξ][co][(tile - t0)·G + lane]` into
    /// `yq[co][h][w][lane]` (plus the bias), dropping the pixels past the image's edge.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn output_chunk<const G: usize>(
        &self,
        m: &[f32],
        ms: usize,
        bias: Option<&[f32]>,
        yq: &mut [f32],
        t0: usize,
        t1: usize,
        cols: usize,
    ) {
        let (co, h, w, tw) = (self.co, self.h, self.w, self.tw());
        let mut s = [[0.0f32; G]; 24];
        for o in 0..co {
            let b = bias.map_or(0.0, |b| b[o]);
            for tile in t0..t1 {
                let (ty, tx) = (tile / tw, tile % tw);
                let at_col = (tile - t0) * G;
                let ld = |xi: usize| -> [f32; G] {
                    let at = xi * ms + o * cols + at_col;
                    <[f32; G]>::try_from(&m[at..at + G]).unwrap_or([0.0; G])
                };
                // A^T m: one column j at a time, into the scratch (arrays built per tile with
                // `array::from_fn` went through an outlined call per tile, as in input_chunk).
                for j in 0..6 {
                    let col = at([ld(j), ld(6 + j), ld(12 + j), ld(18 + j), ld(24 + j), ld(30 + j)]);
                    for (a, r) in col.iter().enumerate() {
                        s[6 * a + j] = *r;
                    }
                }
                // (A^T m) A: one row a at a time.
                for a in 0..4 {
                    let y = 4 * ty + a;
                    if y >= h {
                        break;
                    }
                    let row = at([s[6 * a], s[6 * a + 1], s[6 * a + 2], s[6 * a + 3], s[6 * a + 4], s[6 * a + 5]]);
                    for (bx, r) in row.iter().enumerate() {
                        let x = 4 * tx + bx;
                        if x >= w {
                            break;
                        }
                        let out = &mut yq[((o * h + y) * w + x) * G..][..G];
                        for (d, s) in out.iter_mut().zip(r) {
                            *d = s + b;
                        }
                    }
                }
            }
        }
    }
}
