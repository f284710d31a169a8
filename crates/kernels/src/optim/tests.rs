//! The SGD step on every backend: against the documented update and PyTorch's form, and
//! against the CPU on long vectors.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::SgdConfig;
use crate::prelude::*;
use crate::testing::{Tolerance, assert_close, assert_close_f32, download, proptest_config, random_vec, upload};

/// Several steps against an f64 transcription of the documented update, and, at a
/// constant learning rate, against PyTorch's form (velocity `u = -v / lr`).
pub fn sgd_matches_the_documented_update<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(256), |(len in 1usize..50, lr in 0.001f32..0.5, mu in 0.0f32..0.99,
                wd in 0.0f32..0.01, nesterov in any::<bool>(), seed in any::<u64>())| {
        prop_assume!(!nesterov || mu > 0.0);
        let cfg = SgdConfig { lr, momentum: mu, weight_decay: wd, nesterov };
        let p0 = random_vec(seed, len, 1.0);
        let mut p = upload(be, &p0);
        let mut v = upload(be, &vec![0.0f32; len]);
        let (mut pr, mut vr): (Vec<f64>, Vec<f64>) = (p0.iter().map(|&x| x as f64).collect(), vec![0.0; len]);
        let mut pt = pr.clone();
        let mut ut = vec![0.0f64; len];
        for step in 0..4 {
            let g = random_vec(seed ^ (step + 1), len, 1.0);
            be.sgd_step(&cfg, ViewMut::whole(&mut p), View::whole(&upload(be, &g)), ViewMut::whole(&mut v)).unwrap();
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
        let p = download(be, &p);
        let tol = Tolerance::new(1e-5, 1e-6).for_backend::<B>();
        assert_close(&p, &pr, tol, "documented update");
        assert_close(&p, &pt, tol, "PyTorch SGD");
    });
}

/// Heavy ball and Nesterov steps on vectors up to 5000 long equal the CPU's (bound 1e-6
/// rel + 1e-7 abs).
pub fn sgd_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |(n in 1usize..5000, nesterov in any::<bool>(), seed in any::<u64>())| {
        let cfg = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov };
        let p = random_vec(seed, n, 1.0);
        let v = random_vec(seed ^ 1, n, 0.1);
        let g = random_vec(seed ^ 2, n, 1.0);
        let (mut pb, mut vb, gb) = (upload(be, &p), upload(be, &v), upload(be, &g));
        let (mut pc, mut vc) = (p.clone(), v.clone());
        be.sgd_step(&cfg, ViewMut::whole(&mut pb), View::whole(&gb), ViewMut::whole(&mut vb)).unwrap();
        cpu.sgd_step(&cfg, ViewMut::whole(&mut pc), View::whole(&g), ViewMut::whole(&mut vc)).unwrap();
        let t = Tolerance::new(1e-6, 1e-7);
        assert_close_f32(&download(be, &pb), &pc, t, "sgd param");
        assert_close_f32(&download(be, &vb), &vc, t, "sgd velocity");
    });
}

/// Bad hyper-parameters are errors on every backend, before anything runs.
pub fn bad_hyper_parameters_are_errors<B: Backend>(be: &B) {
    let g = upload(be, &[1.0; 4]);
    for cfg in [
        SgdConfig { lr: f32::NAN, ..SgdConfig::plain(0.1) },
        SgdConfig { momentum: 1.0, ..SgdConfig::plain(0.1) },
        SgdConfig { weight_decay: -1.0, ..SgdConfig::plain(0.1) },
        SgdConfig { nesterov: true, ..SgdConfig::plain(0.1) },
    ] {
        assert!(cfg.validate().is_err(), "{cfg:?}");
        let (mut p, mut v) = (upload(be, &[1.0; 4]), upload(be, &[0.0; 4]));
        assert!(be.sgd_step(&cfg, ViewMut::whole(&mut p), View::whole(&g), ViewMut::whole(&mut v)).is_err());
        assert_eq!(download(be, &p), [1.0; 4], "{cfg:?}");
    }
}

crate::test_backends! {
    sgd_matches_the_documented_update,
    sgd_matches_cpu: [cpu_threads, emu, cuda],
    bad_hyper_parameters_are_errors,
}
