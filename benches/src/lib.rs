//! # crossbow-benches
//!
//! Criterion benchmarks for each crossbow component (`cargo bench -p crossbow-benches`), and
//! the helpers they share. Figures and the commands that produced them are in `BENCHMARKS.md`.

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
