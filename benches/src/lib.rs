//! # crossbow-benches
//!
//! Criterion benchmarks for each crossbow component (`cargo bench -p crossbow-benches`), and
//! the helpers they share. Figures and the commands that produced them are in `BENCHMARKS.md`.
//! [`scaling`] is the cost model behind the `scaling-model` binary (BENCHMARKS.md section 12).

pub mod scaling;

/// True when the CPU has AVX2 and FMA.
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// True when the CPU has AVX-512F (16-wide f32 FMA) and `CROSSBOW_CPU_ISA` does not cap the
/// kernels below it (so that `peak-flops` under `CROSSBOW_CPU_ISA=avx2` gives the AVX2 peak,
/// the reference of the AVX2 kernels' figures).
pub fn has_avx512f() -> bool {
    crossbow_kernels::cpu_isa().map(|i| i >= crossbow_kernels::CpuIsa::Avx512).unwrap_or(false)
}

/// The widest FMA unit present: `(name, FLOP per FMA instruction)` — `("AVX-512", 32)`,
/// `("AVX2", 16)`, or `None`.
pub fn widest_fma() -> Option<(&'static str, f64)> {
    if has_avx512f() {
        Some(("AVX-512", 32.0))
    } else if has_avx2_fma() {
        Some(("AVX2", 16.0))
    } else {
        None
    }
}

/// `iters` rounds of 12 independent FMAs on the widest unit present (16-wide with AVX-512,
/// else 8-wide with AVX2): the core's peak f32 rate. Returns the FLOPs done (0 without
/// AVX2+FMA) and a value to keep the loop alive.
pub fn peak_fma_loop(iters: u64) -> (f64, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx512f() {
            // SAFETY: the CPU has AVX-512F (checked just above).
            let v = unsafe { fma512_loop(iters) };
            return (iters as f64 * 12.0 * 32.0, v);
        }
    }
    if has_avx2_fma() { (fma_loop_flops(iters), fma_loop_guarded(iters)) } else { (0.0, 0.0) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma512_loop(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    // 12 independent accumulators hide the FMA latency on both ports.
    let mut acc = [_mm512_set1_ps(0.0); 12];
    let a = _mm512_set1_ps(0.999_999);
    let b = _mm512_set1_ps(1e-7);
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_ps(*v, a, b);
        }
    }
    acc.iter().map(|v| _mm512_reduce_add_ps(*v)).sum()
}

/// `iters` rounds of 12 independent 8-wide FMAs (192 FLOP per round): the machine's peak
/// f32 rate on one core. Returns 0 without AVX2+FMA.
pub fn fma_loop_guarded(iters: u64) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { fma_loop(iters) };
        }
    }
    let _ = iters;
    0.0
}

/// FLOPs done by `fma_loop_guarded(iters)`.
pub fn fma_loop_flops(iters: u64) -> f64 {
    iters as f64 * 12.0 * 16.0
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_loop(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    // 12 independent accumulators hide the FMA latency on both ports.
    let mut acc = [_mm256_set1_ps(0.0); 12];
    let a = _mm256_set1_ps(0.999_999);
    let b = _mm256_set1_ps(1e-7);
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut s = 0.0;
    for v in acc {
        let mut o = [0f32; 8];
        // SAFETY: `o` has room for 8 floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
        s += o[0];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_loop_uses_the_widest_unit_and_counts_its_flops() {
        let (flops, v) = peak_fma_loop(1000);
        match widest_fma() {
            Some(("AVX-512", f)) => assert_eq!((f, flops), (32.0, 1000.0 * 12.0 * 32.0)),
            Some((_, f)) => assert_eq!((f, flops), (16.0, fma_loop_flops(1000))),
            None => assert_eq!(flops, 0.0),
        }
        assert!(v.is_finite());
        if flops > 0.0 {
            // 12 accumulators of x -> 0.999999 x + 1e-7 from 0, summed over every lane.
            let lanes = if has_avx512f() { 16.0 } else { 1.0 };
            let one = (0..1000).fold(0.0f64, |x, _| 0.999_999 * x + 1e-7);
            let want = if has_avx512f() { 12.0 * lanes * one } else { 12.0 * one };
            assert!((f64::from(v) - want).abs() < 1e-3 * want, "{v} vs {want}");
        }
    }
}
