use proptest::prelude::*;

use super::cpu::gemm_config;
use super::{CpuGemm, GemmConfig};
use crate::testing::{Tolerance, assert_close, random_vec};

fn naive(cfg: &GemmConfig, a: &[f32], b: &[f32], c: &[f32]) -> Vec<f64> {
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
