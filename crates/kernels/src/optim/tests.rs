use proptest::prelude::*;

use super::SgdConfig;
use crate::testing::{Tolerance, assert_close, random_vec};
use crate::{Backend, CpuBackend, View, ViewMut};

proptest! {
    /// Several steps against an f64 transcription of the documented update, and, at a
    /// constant learning rate, against PyTorch's form (velocity `u = -v / lr`).
    #[test]
    fn sgd_matches_the_documented_update(len in 1usize..50, lr in 0.001f32..0.5, mu in 0.0f32..0.99,
                                         wd in 0.0f32..0.01, nesterov in any::<bool>(), seed in any::<u64>()) {
        prop_assume!(!nesterov || mu > 0.0);
        let be = CpuBackend::new(0);
        let cfg = SgdConfig { lr, momentum: mu, weight_decay: wd, nesterov };
        let mut p = random_vec(seed, len, 1.0);
        let mut v = vec![0.0f32; len];
        let (mut pr, mut vr): (Vec<f64>, Vec<f64>) = (p.iter().map(|&x| x as f64).collect(), vec![0.0; len]);
        let mut pt = pr.clone();
        let mut ut = vec![0.0f64; len];
        for step in 0..4 {
            let g = random_vec(seed ^ (step + 1), len, 1.0);
            be.sgd_step(&cfg, ViewMut::whole(&mut p), View::whole(&g), ViewMut::whole(&mut v)).unwrap();
            let (lr, mu, wd) = (lr as f64, mu as f64, wd as f64);
            for i in 0..len {
                let gi = g[i] as f64 + wd * pr[i];
                vr[i] = mu * vr[i] - lr * gi;
                pr[i] += if nesterov { mu * vr[i] - lr * gi } else { vr[i] };
                // PyTorch: u = mu u + g; p -= lr (nesterov ? g + mu u : u)
                let gt = g[i] as f64 + wd * pt[i];
                ut[i] = mu * ut[i] + gt;
                pt[i] -= lr * if nesterov { gt + mu * ut[i] } else { ut[i] };
            }
        }
        assert_close(&p, &pr, Tolerance::new(1e-5, 1e-6), "documented update");
        assert_close(&p, &pt, Tolerance::new(1e-5, 1e-6), "PyTorch SGD");
    }
}

#[test]
fn bad_hyper_parameters_are_errors() {
    for cfg in [
        SgdConfig { lr: f32::NAN, ..SgdConfig::plain(0.1) },
        SgdConfig { momentum: 1.0, ..SgdConfig::plain(0.1) },
        SgdConfig { weight_decay: -1.0, ..SgdConfig::plain(0.1) },
        SgdConfig { nesterov: true, ..SgdConfig::plain(0.1) },
    ] {
        assert!(cfg.validate().is_err(), "{cfg:?}");
    }
}
