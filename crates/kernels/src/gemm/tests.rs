//! GEMM: both CPU crates and every backend against a naive f64 triple loop, every backend
//! against the CPU on larger shapes.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::GemmConfig;
use crate::prelude::*;
use crate::testing::{Tolerance, assert_close, assert_close_f32, download, proptest_config, random_vec, upload};

/// The naive f64 triple loop.
pub fn naive(cfg: &GemmConfig, a: &[f32], b: &[f32], c: &[f32]) -> Vec<f64> {
    let (m, n, k) = (cfg.m, cfg.n, cfg.k);
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                let av = if cfg.trans_a { a[p * m + i] } else { a[i * k + p] } as f64;
                let bv = if cfg.trans_b { b[j * k + p] } else { b[p * n + j] } as f64;
                s += av * bv;
            }
            out[i * n + j] =
                cfg.alpha as f64 * s + if cfg.beta == 0.0 { 0.0 } else { cfg.beta as f64 * c[i * n + j] as f64 };
        }
    }
    out
}

fn gemm_strategy(max_mn: usize, k: std::ops::Range<usize>) -> impl Strategy<Value = (GemmConfig, u64)> {
    (
        1..max_mn,
        1..max_mn,
        k,
        any::<bool>(),
        any::<bool>(),
        -2.0f32..2.0,
        prop_oneof![Just(0.0f32), -1.0f32..1.0],
        any::<u64>(),
    )
        .prop_map(|(m, n, k, ta, tb, alpha, beta, s)| {
            (GemmConfig { trans_a: ta, trans_b: tb, m, n, k, alpha, beta }, s)
        })
}

/// The backend's GEMM against a naive f64 triple loop, all transpose combinations,
/// alpha/beta, random shapes, `k = 0` included. Bound: 1e-4 relative + 1e-5 * sqrt(k)
/// absolute (plus [`crate::testing::GPU_TOLERANCE`] off the CPU).
pub fn gemm_matches_naive<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(64), |((cfg, seed) in gemm_strategy(40, 0..70))| {
        let a = random_vec(seed, cfg.m * cfg.k, 1.0);
        let b = random_vec(seed ^ 1, cfg.k * cfg.n, 1.0);
        let c0 = random_vec(seed ^ 2, cfg.m * cfg.n, 1.0);
        let want = naive(&cfg, &a, &b, &c0);
        let tol = Tolerance::new(1e-4, 1e-5 * (cfg.k.max(1) as f64).sqrt()).for_backend::<B>();
        let mut c = upload(be, &c0);
        be.gemm(&cfg, View::whole(&upload(be, &a)), View::whole(&upload(be, &b)), ViewMut::whole(&mut c)).unwrap();
        assert_close(&download(be, &c), &want, tol, &format!("{cfg:?}"));
    });
}

/// With `beta = 0` the old `C` is not read, NaNs included.
pub fn gemm_beta_zero_ignores_nan_in_c<B: Backend>(be: &B) {
    let cfg = GemmConfig::new(2, 2, 2);
    let (a, b) = (upload(be, &[1.0, 2.0, 3.0, 4.0]), upload(be, &[1.0, 0.0, 0.0, 1.0]));
    let mut c = upload(be, &[f32::NAN; 4]);
    be.gemm(&cfg, View::whole(&a), View::whole(&b), ViewMut::whole(&mut c)).unwrap();
    assert_eq!(download(be, &c), [1.0, 2.0, 3.0, 4.0]);
}

/// The backend against the CPU on shapes up to 130 x 130 x 300 (bound
/// [`crate::testing::GPU_TOLERANCE`]).
pub fn gemm_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |((cfg, seed) in gemm_strategy(130, 1..300))| {
        let cfg = GemmConfig { alpha: 0.7, ..cfg };
        let a = random_vec(seed, cfg.m * cfg.k, 1.0);
        let b = random_vec(seed ^ 1, cfg.k * cfg.n, 1.0);
        let c = random_vec(seed ^ 2, cfg.m * cfg.n, 1.0);
        let mut cb = upload(be, &c);
        let mut cc = c.clone();
        be.gemm(&cfg, View::whole(&upload(be, &a)), View::whole(&upload(be, &b)), ViewMut::whole(&mut cb)).unwrap();
        cpu.gemm(&cfg, View::whole(&a), View::whole(&b), ViewMut::whole(&mut cc)).unwrap();
        assert_close_f32(&download(be, &cb), &cc, crate::testing::GPU_TOLERANCE, &format!("gemm {cfg:?}"));
    });
}

crate::test_backends! {
    gemm_matches_naive,
    gemm_beta_zero_ignores_nan_in_c,
    gemm_matches_cpu: [cpu_threads, emu, cuda],
}

/// Both CPU GEMM crates, directly.
#[cfg(test)]
mod cpu_crates {
    use super::*;
    use crate::CpuGemm;
    use crate::gemm::cpu::gemm_config;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Both CPU GEMM crates against a naive f64 triple loop, all transpose combinations,
        /// alpha/beta, random shapes. Bound: |x - y| <= 1e-4 * max(|x|, |y|) + 1e-5 * sqrt(k).
        #[test]
        fn gemm_matches_naive(m in 1usize..40, n in 1usize..40, k in 0usize..70,
                              ta in any::<bool>(), tb in any::<bool>(),
                              alpha in -2.0f32..2.0, beta in prop_oneof![Just(0.0f32), -1.0f32..1.0],
                              seed in any::<u64>()) {
            let cfg = GemmConfig { trans_a: ta, trans_b: tb, m, n, k, alpha, beta };
            let a = random_vec(seed, m * k, 1.0);
            let b = random_vec(seed ^ 1, k * n, 1.0);
            let c0 = random_vec(seed ^ 2, m * n, 1.0);
            let want = naive(&cfg, &a, &b, &c0);
            let tol = Tolerance::new(1e-4, 1e-5 * (k.max(1) as f64).sqrt());
            for which in [CpuGemm::MatrixMultiply, CpuGemm::Gemm] {
                let mut c = c0.clone();
                gemm_config(which, &cfg, &a, &b, &mut c);
                assert_close(&c, &want, tol, &format!("{which:?} {cfg:?}"));
            }
        }
    }

    #[test]
    fn beta_zero_ignores_nan_in_c() {
        let cfg = GemmConfig::new(2, 2, 2);
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [1.0, 0.0, 0.0, 1.0];
        for which in [CpuGemm::MatrixMultiply, CpuGemm::Gemm] {
            let mut c = [f32::NAN; 4];
            gemm_config(which, &cfg, &a, &b, &mut c);
            assert_eq!(c, [1.0, 2.0, 3.0, 4.0], "{which:?}");
        }
    }
}
