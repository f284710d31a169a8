//! The fused SMA updates on every backend: the same bits as the unfused ops they replace (on
//! that backend), the same bits as the CPU, argument errors.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use crate::optim::SgdConfig;
use crate::prelude::*;
use crate::testing::{download, nan_buffer, proptest_config, random_vec, upload};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The learner step equals `sub`, `scale`, `sgd_step`, `axpy(-1)` on the same backend, bit
/// for bit, over random lengths, rates, momenta (heavy ball and Nesterov) and decays.
pub fn sma_learner_step_matches_the_unfused_ops<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(64), |(len in 1usize..3000, lr in 0.0f32..0.5, mu in 0.0f32..0.99,
                wd in prop_oneof![Just(0.0f32), 0.0f32..0.01], nesterov in any::<bool>(),
                alpha in prop_oneof![Just(0.25f32), 0.0f32..1.0], seed in any::<u64>())| {
        prop_assume!(!nesterov || mu > 0.0);
        let cfg = SgdConfig { lr, momentum: mu, weight_decay: wd, nesterov };
        let (p, g, v, z) = (random_vec(seed, len, 1.0), random_vec(seed ^ 1, len, 1.0),
                            random_vec(seed ^ 2, len, 0.1), random_vec(seed ^ 3, len, 1.0));
        let zb = upload(be, &z);
        let gb = upload(be, &g);
        // Fused.
        let (mut pf, mut vf, mut cf) = (upload(be, &p), upload(be, &v), nan_buffer(be, len));
        be.sma_learner_step(&cfg, alpha, ViewMut::whole(&mut pf), View::whole(&gb), ViewMut::whole(&mut vf),
            View::whole(&zb), ViewMut::whole(&mut cf)).unwrap();
        // Unfused.
        let (mut pu, mut vu, mut cu) = (upload(be, &p), upload(be, &v), nan_buffer(be, len));
        be.sub(View::whole(&pu), View::whole(&zb), ViewMut::whole(&mut cu)).unwrap();
        be.scale(alpha, ViewMut::whole(&mut cu)).unwrap();
        be.sgd_step(&cfg, ViewMut::whole(&mut pu), View::whole(&gb), ViewMut::whole(&mut vu)).unwrap();
        be.axpy(-1.0, View::whole(&cu), ViewMut::whole(&mut pu)).unwrap();
        prop_assert_eq!(bits(&download(be, &pf)), bits(&download(be, &pu)), "parameters");
        prop_assert_eq!(bits(&download(be, &vf)), bits(&download(be, &vu)), "velocity");
        prop_assert_eq!(bits(&download(be, &cf)), bits(&download(be, &cu)), "correction");
    });
}

/// The central step equals the unfused `axpy`s and copies on the same backend, bit for bit,
/// with and without decay and central momentum.
pub fn sma_central_step_matches_the_unfused_ops<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(64), |(len in 1usize..3000, mu in prop_oneof![Just(0.0f32), 0.0f32..0.99],
                decay in prop_oneof![Just(0.0f32), 0.0f32..1e-3], seed in any::<u64>())| {
        let (t, z, zp) = (random_vec(seed, len, 0.1), random_vec(seed ^ 1, len, 1.0), random_vec(seed ^ 2, len, 1.0));
        let (mut tf, mut zf, mut zpf) = (upload(be, &t), upload(be, &z), upload(be, &zp));
        be.sma_central_step(mu, decay, ViewMut::whole(&mut tf), ViewMut::whole(&mut zf), ViewMut::whole(&mut zpf)).unwrap();
        let (mut tu, mut zu, mut zpu) = (upload(be, &t), upload(be, &z), upload(be, &zp));
        if decay != 0.0 {
            be.axpy(-decay, View::whole(&zu), ViewMut::whole(&mut tu)).unwrap();
        }
        if mu != 0.0 {
            be.axpy(mu, View::whole(&zu), ViewMut::whole(&mut tu)).unwrap();
            be.axpy(-mu, View::whole(&zpu), ViewMut::whole(&mut tu)).unwrap();
        }
        be.copy(View::whole(&zu), ViewMut::whole(&mut zpu)).unwrap();
        be.axpy(1.0, View::whole(&tu), ViewMut::whole(&mut zu)).unwrap();
        prop_assert_eq!(bits(&download(be, &tf)), bits(&download(be, &tu)), "total");
        prop_assert_eq!(bits(&download(be, &zf)), bits(&download(be, &zu)), "z");
        prop_assert_eq!(bits(&download(be, &zpf)), bits(&download(be, &zpu)), "z_prev");
    });
}

/// Both steps give the CPU's bits on vectors up to 5000 long (several blocks).
pub fn sma_step_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(16), |(n in 1usize..5000, nesterov in any::<bool>(), seed in any::<u64>())| {
        let cfg = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov };
        let (p, g, v, z) = (random_vec(seed, n, 1.0), random_vec(seed ^ 1, n, 1.0),
                            random_vec(seed ^ 2, n, 0.1), random_vec(seed ^ 3, n, 1.0));
        let (mut pb, mut vb, mut cb) = (upload(be, &p), upload(be, &v), nan_buffer(be, n));
        be.sma_learner_step(&cfg, 0.25, ViewMut::whole(&mut pb), View::whole(&upload(be, &g)), ViewMut::whole(&mut vb),
            View::whole(&upload(be, &z)), ViewMut::whole(&mut cb)).unwrap();
        let (mut pc, mut vc, mut cc) = (p.clone(), v.clone(), vec![f32::NAN; n]);
        cpu.sma_learner_step(&cfg, 0.25, ViewMut::whole(&mut pc), View::whole(&g), ViewMut::whole(&mut vc),
            View::whole(&z), ViewMut::whole(&mut cc)).unwrap();
        prop_assert_eq!(bits(&download(be, &pb)), bits(&pc));
        prop_assert_eq!(bits(&download(be, &vb)), bits(&vc));
        prop_assert_eq!(bits(&download(be, &cb)), bits(&cc));
        let (mut tb, mut zb, mut qb) = (upload(be, &g), upload(be, &z), upload(be, &p));
        be.sma_central_step(0.9, 1e-4, ViewMut::whole(&mut tb), ViewMut::whole(&mut zb), ViewMut::whole(&mut qb)).unwrap();
        let (mut tc, mut zc, mut qc) = (g.clone(), z.clone(), p.clone());
        cpu.sma_central_step(0.9, 1e-4, ViewMut::whole(&mut tc), ViewMut::whole(&mut zc), ViewMut::whole(&mut qc)).unwrap();
        prop_assert_eq!(bits(&download(be, &tb)), bits(&tc));
        prop_assert_eq!(bits(&download(be, &zb)), bits(&zc));
        prop_assert_eq!(bits(&download(be, &qb)), bits(&qc));
    });
}

/// Bad constants and lengths are errors naming the op, and nothing is written.
pub fn sma_step_bad_arguments_are_errors<B: Backend>(be: &B) {
    let cfg = SgdConfig::plain(0.1);
    let (mut p, g, mut v, z) = (upload(be, &[1.0, 2.0]), upload(be, &[0.5, 0.5]), upload(be, &[0.0, 0.0]), upload(be, &[0.0, 0.0]));
    let mut c = upload(be, &[7.0, 7.0]);
    for alpha in [f32::NAN, f32::INFINITY] {
        let e = be
            .sma_learner_step(&cfg, alpha, ViewMut::whole(&mut p), View::whole(&g), ViewMut::whole(&mut v), View::whole(&z), ViewMut::whole(&mut c))
            .unwrap_err();
        assert!(e.to_string().contains("alpha"), "{e}");
    }
    let bad = SgdConfig { lr: -1.0, ..cfg };
    assert!(be
        .sma_learner_step(&bad, 0.5, ViewMut::whole(&mut p), View::whole(&g), ViewMut::whole(&mut v), View::whole(&z), ViewMut::whole(&mut c))
        .is_err());
    let short = upload(be, &[0.0]);
    let e = be
        .sma_learner_step(&cfg, 0.5, ViewMut::whole(&mut p), View::whole(&g), ViewMut::whole(&mut v), View::whole(&short), ViewMut::whole(&mut c))
        .unwrap_err();
    assert!(matches!(e, crate::KernelError::Length { op: "sma_learner_step", arg: "z", expected: 2, actual: 1 }), "{e}");
    assert_eq!(download(be, &c), [7.0, 7.0]);
    assert_eq!(download(be, &p), [1.0, 2.0]);
    let (mut t, mut zz) = (upload(be, &[1.0, 1.0]), upload(be, &[2.0, 2.0]));
    let mut q = upload(be, &[3.0]);
    assert!(be.sma_central_step(0.9, 0.0, ViewMut::whole(&mut t), ViewMut::whole(&mut zz), ViewMut::whole(&mut q)).is_err());
    let mut q = upload(be, &[3.0, 3.0]);
    let e = be.sma_central_step(f32::NAN, 0.0, ViewMut::whole(&mut t), ViewMut::whole(&mut zz), ViewMut::whole(&mut q)).unwrap_err();
    assert!(e.to_string().contains("central momentum"), "{e}");
    assert_eq!(download(be, &zz), [2.0, 2.0]);
}

crate::test_backends! {
    sma_learner_step_matches_the_unfused_ops,
    sma_central_step_matches_the_unfused_ops,
    sma_step_matches_cpu: [cpu_threads, emu, cuda],
    sma_step_bad_arguments_are_errors,
}
