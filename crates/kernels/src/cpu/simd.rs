//! Vector code the CPU kernels choose at run time: an AVX path where the CPU has AVX2 and FMA,
//! and the portable path (what the baseline x86-64 target compiles to: SSE2) everywhere else.
//! Both paths give bit-identical results (a transpose only moves data), and both are tested
//! on every machine (the tests call each path directly, not through the dispatch).

/// Defines `fn $name(..)` whose body is compiled twice: for AVX2 + FMA (run when the CPU has
/// them: LLVM vectorises the loops 8 floats wide) and for the baseline target (SSE2, 4
/// wide), and `fn $portable(..)`, the baseline path alone (tests compare the two). Both give
/// bit-identical results: Rust never contracts `a * b + c` into an FMA, and the loops keep
/// their order of operations (reductions keep their explicit lanes).
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident / $portable:ident ($($a:ident : $t:ty),* $(,)?) $(-> $r:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($a: $t),*) $(-> $r)? {
                    $portable($($a),*)
                }
                if $crate::cpu::simd::has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA (checked just now).
                    return unsafe { avx2($($a),*) };
                }
            }
            $portable($($a),*)
        }

        /// The baseline (portable) path of the function of the same name without the suffix.
        #[inline(always)]
        #[allow(dead_code)]
        $vis fn $portable($($a: $t),*) $(-> $r)? $body
    };
}
pub(crate) use multiversion;

/// The widest vector instruction set crossbow's own CPU kernels use (the direct convolutions
/// and the multiversioned loops; the `gemm` crate detects its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CpuIsa {
    /// The baseline target (SSE2 on x86-64).
    Portable,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512F.
    Avx512,
}

impl CpuIsa {
    /// The name `CROSSBOW_CPU_ISA` takes: `portable`, `avx2`, `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            CpuIsa::Portable => "portable",
            CpuIsa::Avx2 => "avx2",
            CpuIsa::Avx512 => "avx512",
        }
    }
}

/// The environment variable that caps the instruction set of crossbow's CPU kernels, so one
/// AVX-512 machine measures and tests the AVX2 path too: `avx2` (no AVX-512), `portable`
/// (neither), `avx512` (no cap). It never enables what the CPU lacks.
pub const CPU_ISA_ENV: &str = "CROSSBOW_CPU_ISA";

/// What the CPU has, capped by `setting` (the value of [`CPU_ISA_ENV`], if set).
pub fn cpu_isa_with(setting: Option<&str>) -> Result<CpuIsa, String> {
    let detected = detected_isa();
    let Some(text) = setting else { return Ok(detected) };
    let cap = match text.trim().to_ascii_lowercase().as_str() {
        "portable" | "scalar" | "sse2" => CpuIsa::Portable,
        "avx2" => CpuIsa::Avx2,
        "avx512" | "avx-512" | "" => CpuIsa::Avx512,
        _ => return Err(format!("{CPU_ISA_ENV}={text:?} is not an instruction set (valid: avx512, avx2, portable)")),
    };
    Ok(detected.min(cap))
}

/// The instruction set crossbow's CPU kernels use: what the CPU has, capped by
/// [`CPU_ISA_ENV`] (read once; an invalid value is an error, which the command line reports
/// before doing anything).
pub fn cpu_isa() -> Result<CpuIsa, String> {
    static ISA: std::sync::OnceLock<Result<CpuIsa, String>> = std::sync::OnceLock::new();
    ISA.get_or_init(|| cpu_isa_with(std::env::var(CPU_ISA_ENV).ok().as_deref())).clone()
}

fn detected_isa() -> CpuIsa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // Every AVX-512 CPU has AVX2 and FMA.
            return CpuIsa::Avx512;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return CpuIsa::Avx2;
        }
    }
    CpuIsa::Portable
}

/// Whether the kernels may use AVX2 and FMA (the CPU has them and [`CPU_ISA_ENV`] allows
/// them; an invalid setting allows only the portable path).
pub(crate) fn has_avx2() -> bool {
    cpu_isa().map(|i| i >= CpuIsa::Avx2).unwrap_or(false)
}

/// Whether the kernels may use AVX-512F.
pub(crate) fn has_avx512() -> bool {
    cpu_isa().map(|i| i >= CpuIsa::Avx512).unwrap_or(false)
}

#[cfg(test)]
mod isa_tests {
    use super::*;

    #[test]
    fn the_setting_caps_and_never_raises() {
        let detected = detected_isa();
        assert_eq!(cpu_isa_with(None).unwrap(), detected);
        assert_eq!(cpu_isa_with(Some("portable")).unwrap(), CpuIsa::Portable);
        assert_eq!(cpu_isa_with(Some("AVX2")).unwrap(), detected.min(CpuIsa::Avx2));
        assert_eq!(cpu_isa_with(Some("avx512")).unwrap(), detected);
        let e = cpu_isa_with(Some("avx1024")).unwrap_err();
        assert!(e.contains("CROSSBOW_CPU_ISA") && e.contains("avx1024") && e.contains("avx2"), "{e}");
        for i in [CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512] {
            assert_eq!(cpu_isa_with(Some(i.name())).unwrap(), detected.min(i));
        }
    }
}

/// `dst[c * rows + r] = src[r * cols + c]`: `dst` (`[cols, rows]`, row-major) is the
/// transpose of `src` (`[rows, cols]`). The AVX path where the CPU has it, else the portable
/// one.
pub(crate) fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    transpose_ld(src, rows, cols, cols, dst)
}

/// [`transpose`] of a `[rows, cols]` block whose rows lie `ld` floats apart in `src`
/// (`ld >= cols`): `dst[c * rows + r] = src[r * ld + c]`.
pub(crate) fn transpose_ld(src: &[f32], rows: usize, cols: usize, ld: usize, dst: &mut [f32]) {
    let need = if rows == 0 || cols == 0 { 0 } else { (rows - 1) * ld + cols };
    assert!(ld >= cols && src.len() >= need && dst.len() >= rows * cols, "transpose: operands too short");
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX (checked just above); `src` holds every element
        // `r * ld + c` for r < rows, c < cols and `dst` holds rows * cols (asserted above).
        unsafe { transpose_avx(src, rows, cols, ld, dst) };
        return;
    }
    transpose_portable(src, rows, cols, ld, dst);
}

/// [`transpose_ld`] in plain Rust, in 16×16 tiles: each tile reads whole cache lines of `src`
/// row by row and writes 16 lines of `dst` that stay in L1 while it fills them. (Reading a
/// tile column by column instead has a stride of `ld` floats, 4 KiB for a 32×32-pixel
/// plane: every load of a tile then falls into the same L1 set.)
pub(crate) fn transpose_portable(src: &[f32], rows: usize, cols: usize, ld: usize, dst: &mut [f32]) {
    const T: usize = 16;
    for r0 in (0..rows).step_by(T) {
        let r1 = (r0 + T).min(rows);
        for c0 in (0..cols).step_by(T) {
            let c1 = (c0 + T).min(cols);
            for r in r0..r1 {
                let srow = &src[r * ld + c0..r * ld + c1];
                for (j, &v) in srow.iter().enumerate() {
                    dst[(c0 + j) * rows + r] = v;
                }
            }
        }
    }
}

/// [`transpose_ld`] with AVX: 8×8 blocks transposed in registers (8 loads, 24 shuffles, 8
/// stores per 64 elements), the ragged edges with the portable loop.
///
/// # Safety
/// The CPU has AVX, `ld >= cols`, `src` holds every element `r * ld + c` (r < rows,
/// c < cols) and `dst` at least `rows * cols` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
pub(crate) unsafe fn transpose_avx(src: &[f32], rows: usize, cols: usize, ld: usize, dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let (r8, c8) = (rows / 8 * 8, cols / 8 * 8);
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    // Column blocks of 32 (four 8×8 blocks) so that a block row's 32 destination lines stay
    // in L1 while successive row blocks fill them.
    for cb in (0..c8).step_by(32) {
        let cend = (cb + 32).min(c8);
        for r0 in (0..r8).step_by(8) {
            for c0 in (cb..cend).step_by(8) {
                // SAFETY: r0 + 8 <= rows and c0 + 8 <= cols, so every load reads
                // src[(r0 + i) * ld + c0 .. + 8] and every store writes
                // dst[(c0 + i) * rows + r0 .. + 8], all within the operands (see # Safety).
                unsafe {
                    let l = |i: usize| _mm256_loadu_ps(s.add((r0 + i) * ld + c0));
                    let st = |i: usize, v: __m256| _mm256_storeu_ps(d.add((c0 + i) * rows + r0), v);
                    for (i, v) in transpose8x8([l(0), l(1), l(2), l(3), l(4), l(5), l(6), l(7)]).into_iter().enumerate()
                    {
                        st(i, v);
                    }
                }
            }
        }
    }
    // The ragged edges: the rows below r8 (every column), and the columns right of c8.
    for r in r8..rows {
        for c in 0..cols {
            dst[c * rows + r] = src[r * ld + c];
        }
    }
    for r in 0..r8 {
        for c in c8..cols {
            dst[c * rows + r] = src[r * ld + c];
        }
    }
}

/// The transpose of an 8×8 block held in eight registers (row `i` in `a[i]`): 24 shuffles,
/// column `i` in the result's `i`. Shared by [`transpose_avx`] and [`transpose_padded_avx`].
///
/// # Safety
/// The CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn transpose8x8(a: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(a[0], a[1]);
    let t1 = _mm256_unpackhi_ps(a[0], a[1]);
    let t2 = _mm256_unpacklo_ps(a[2], a[3]);
    let t3 = _mm256_unpackhi_ps(a[2], a[3]);
    let t4 = _mm256_unpacklo_ps(a[4], a[5]);
    let t5 = _mm256_unpackhi_ps(a[4], a[5]);
    let t6 = _mm256_unpacklo_ps(a[6], a[7]);
    let t7 = _mm256_unpackhi_ps(a[6], a[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// `dst[c * ldd + r] = src[r * cols + c]` for `r < rows`, and `0.0` for `rows <= r < ldd`:
/// the transpose of a `[rows, cols]` block into rows padded to `ldd` (a multiple of 8, at
/// least `rows`) — the `[pixels, channels]` layout of the weight-gradient kernels for channel
/// counts that are not a multiple of the vector width (LeNet-5's six), whose scalar copy
/// was a twentieth of an iteration.
pub(crate) fn transpose_padded(src: &[f32], rows: usize, cols: usize, ldd: usize, dst: &mut [f32]) {
    assert!(
        ldd >= rows && ldd.is_multiple_of(8) && src.len() >= rows * cols && dst.len() >= cols * ldd,
        "transpose_padded: operands too short"
    );
    if ldd == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX (checked just above); the lengths are asserted above.
        unsafe { transpose_padded_avx(src, rows, cols, ldd, dst) };
        return;
    }
    transpose_padded_portable(src, rows, cols, ldd, dst);
}

/// The portable path of [`transpose_padded`].
pub(crate) fn transpose_padded_portable(src: &[f32], rows: usize, cols: usize, ldd: usize, dst: &mut [f32]) {
    if ldd == 0 {
        return;
    }
    for (c, line) in dst.chunks_exact_mut(ldd).take(cols).enumerate() {
        for (r, v) in line.iter_mut().enumerate() {
            *v = if r < rows { src[r * cols + c] } else { 0.0 };
        }
    }
}

/// [`transpose_padded`] by 8×8 blocks in registers, the rows past `rows` read as zeros.
///
/// # Safety
/// The CPU has AVX; the operands are as [`transpose_padded`] asserts.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_padded_avx(src: &[f32], rows: usize, cols: usize, ldd: usize, dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let (r8, c8) = (rows.div_ceil(8) * 8, cols / 8 * 8);
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    for r0 in (0..r8).step_by(8) {
        for c0 in (0..c8).step_by(8) {
            // SAFETY: a row r0 + i < rows is read at src[(r0 + i) * cols + c0 .. + 8] with
            // c0 + 8 <= cols; the stores write dst[(c0 + i) * ldd + r0 .. + 8] with
            // r0 + 8 <= r8 <= ldd and c0 + i < cols.
            unsafe {
                let l = |i: usize| {
                    if r0 + i < rows { _mm256_loadu_ps(s.add((r0 + i) * cols + c0)) } else { _mm256_setzero_ps() }
                };
                let st = |i: usize, v: __m256| _mm256_storeu_ps(d.add((c0 + i) * ldd + r0), v);
                for (i, v) in transpose8x8([l(0), l(1), l(2), l(3), l(4), l(5), l(6), l(7)]).into_iter().enumerate() {
                    st(i, v);
                }
            }
        }
    }
    // The padding rows past the blocks, and the columns right of c8.
    for line in dst.chunks_exact_mut(ldd).take(c8) {
        line[r8..].fill(0.0);
    }
    for c in c8..cols {
        for r in 0..ldd {
            dst[c * ldd + r] = if r < rows { src[r * cols + c] } else { 0.0 };
        }
    }
}

multiversion! {
    /// Splits `src` into its even-indexed elements (`even[i] = src[2i]`, `src.len().div_ceil(2)`
    /// of them) and its odd-indexed ones (`odd[i] = src[2i + 1]`, `src.len() / 2`): the
    /// phase planes of a stride-2 convolution's padded copy. As one loop over pairs, LLVM
    /// splits 8 or 16 pairs per step with shuffles; the `step_by(2)` loops it replaced stayed
    /// scalar.
    ///
    /// # Panics
    /// Where `even` or `odd` is shorter than that.
    pub(crate) fn deinterleave / deinterleave_portable(src: &[f32], even: &mut [f32], odd: &mut [f32]) {
        let pairs = src.len() / 2;
        let (even_pairs, even_rest) = even[..src.len().div_ceil(2)].split_at_mut(pairs);
        for ((p, e), o) in src.chunks_exact(2).zip(even_pairs.iter_mut()).zip(odd[..pairs].iter_mut()) {
            *e = p[0];
            *o = p[1];
        }
        if let (Some(last), Some(e)) = (src.chunks_exact(2).remainder().first(), even_rest.first_mut()) {
            *e = *last;
        }
    }
}

/// Inputs for the tests comparing a multiversioned function's two paths: lengths with every
/// remainder modulo 8 and 16, values of both signs with zeros.
#[cfg(test)]
pub(crate) fn test_vectors() -> Vec<Vec<f32>> {
    [0usize, 1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 1027]
        .iter()
        .map(|&n| (0..n).map(|i| ((i * 7919 % 211) as f32 - 105.0) / 17.0).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deinterleave_splits_even_and_odd_elements_on_both_paths() {
        for v in test_vectors() {
            let want_even: Vec<f32> = v.iter().step_by(2).copied().collect();
            let want_odd: Vec<f32> = v.iter().skip(1).step_by(2).copied().collect();
            for (name, f) in [
                ("dispatched", deinterleave as fn(&[f32], &mut [f32], &mut [f32])),
                ("portable", deinterleave_portable),
            ] {
                // One spare element each side: nothing is written past the split.
                let mut even = vec![f32::NAN; want_even.len() + 1];
                let mut odd = vec![f32::NAN; want_odd.len() + 1];
                f(&v, &mut even, &mut odd);
                let n = v.len();
                assert_eq!(&even[..want_even.len()], &want_even[..], "{name}: even elements of {n}");
                assert_eq!(&odd[..want_odd.len()], &want_odd[..], "{name}: odd elements of {n}");
                assert!(
                    even[want_even.len()].is_nan() && odd[want_odd.len()].is_nan(),
                    "{name}: wrote past the split of {n}"
                );
            }
        }
    }

    fn reference(src: &[f32], rows: usize, cols: usize, ld: usize) -> Vec<f32> {
        let mut d = vec![f32::NAN; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                d[c * rows + r] = src[r * ld + c];
            }
        }
        d
    }

    /// The leading dimensions each shape is tried with: the packed one and two wider ones.
    fn lds(c: usize) -> [usize; 3] {
        [c, c + 1, c + 9]
    }

    /// Shapes with every remainder of 8 and 16 on both sides, and the conv shapes (K x P).
    fn shapes() -> Vec<(usize, usize)> {
        let mut v = vec![(144, 1024), (16, 1024), (27, 1024), (576, 64), (150, 100), (1, 1), (0, 5), (5, 0)];
        for r in [1, 7, 8, 9, 15, 16, 17, 33] {
            for c in [1, 3, 8, 12, 16, 31, 32, 40] {
                v.push((r, c));
            }
        }
        v
    }

    #[test]
    fn portable_transpose_is_exact() {
        for (r, c) in shapes() {
            for ld in lds(c) {
                let src: Vec<f32> = (0..r * ld).map(|i| i as f32 * 0.5 - 7.0).collect();
                let mut d = vec![f32::NAN; r * c];
                transpose_portable(&src, r, c, ld, &mut d);
                assert_eq!(d, reference(&src, r, c, ld), "{r}x{c} ld {ld}");
            }
        }
    }

    #[test]
    fn padded_transpose_pads_with_zeros_on_both_paths() {
        for (r, c) in shapes() {
            for ldd in [r.div_ceil(8) * 8, r.div_ceil(8) * 8 + 8] {
                let src: Vec<f32> = (0..r * c).map(|i| i as f32 * 0.5 - 7.0).collect();
                let mut want = vec![0.0; c * ldd];
                for (k, v) in reference(&src, r, c, c).into_iter().enumerate() {
                    want[(k / r) * ldd + k % r] = v;
                }
                let (mut a, mut b) = (vec![f32::NAN; c * ldd], vec![f32::NAN; c * ldd]);
                transpose_padded(&src, r, c, ldd, &mut a);
                transpose_padded_portable(&src, r, c, ldd, &mut b);
                assert_eq!((&a, &b), (&want, &want), "{r}x{c} ldd {ldd}");
            }
        }
    }

    #[test]
    fn avx_transpose_is_exact_where_the_cpu_has_it() {
        if !has_avx2() {
            eprintln!("skipped: no AVX2 on this CPU (the portable path is what runs here)");
            return;
        }
        for (r, c) in shapes() {
            for ld in lds(c) {
                let src: Vec<f32> = (0..r * ld).map(|i| i as f32 * 0.5 - 7.0).collect();
                let mut d = vec![f32::NAN; r * c];
                // SAFETY: the CPU has AVX2 (checked above); `src` holds r * ld >= the
                // block's extent and `d` r * c elements.
                unsafe { transpose_avx(&src, r, c, ld, &mut d) };
                assert_eq!(d, reference(&src, r, c, ld), "{r}x{c} ld {ld}");
            }
        }
    }
}
