//! linear on every backend: forward vs naive f64, backward vs central finite differences in
//! f64, against the CPU on larger shapes; length errors.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::LinearGeom;
use crate::prelude::*;
use crate::testing::{
    GPU_TOLERANCE, Tolerance, assert_close, assert_close_f32, dot, download, finite_difference, nan_buffer,
    proptest_config, random_vec, to_f64, upload,
};

/// The naive f64 layer.
pub fn linear_ref(g: &LinearGeom, x: &[f64], p: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0; g.output_len()];
    for n in 0..g.batch {
        for o in 0..g.out_features {
            let mut s = if g.bias { p[g.weight_len() + o] } else { 0.0 };
            for i in 0..g.in_features {
                s += x[n * g.in_features + i] * p[o * g.in_features + i];
            }
            y[n * g.out_features + o] = s;
        }
    }
    y
}

/// The three passes on a backend: `(y, dx, dparams)`.
fn passes<B: Backend>(be: &B, g: &LinearGeom, x: &[f32], p: &[f32], dy: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (xb, pb, dyb) = (upload(be, x), upload(be, p), upload(be, dy));
    let mut y = nan_buffer(be, g.output_len());
    let mut dx = nan_buffer(be, g.input_len());
    let mut dp = nan_buffer(be, g.params_len());
    be.linear_forward(g, View::whole(&xb), View::whole(&pb), ViewMut::whole(&mut y)).unwrap();
    be.linear_backward_data(g, View::whole(&dyb), View::whole(&pb), ViewMut::whole(&mut dx)).unwrap();
    be.linear_backward_params(g, View::whole(&xb), View::whole(&dyb), ViewMut::whole(&mut dp)).unwrap();
    (download(be, &y), download(be, &dx), download(be, &dp))
}

/// Bounds: forward 1e-5 rel + 1e-5 abs; gradients `Tolerance::GRAD` against h = 1e-3
/// central differences of the f64 reference (plus the GPU bound off the CPU).
pub fn linear_matches_reference<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(48), |(batch in 1usize..6, inf in 1usize..20, outf in 1usize..12,
                                                 bias in any::<bool>(), seed in any::<u64>())| {
        let g = LinearGeom { batch, in_features: inf, out_features: outf, bias };
        let x = random_vec(seed, g.input_len(), 1.0);
        let p = random_vec(seed ^ 3, g.params_len(), 0.5);
        let dy = random_vec(seed ^ 5, g.output_len(), 1.0);
        let (y, dx, dp) = passes(be, &g, &x, &p, &dy);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        assert_close(&y, &linear_ref(&g, &xd, &pd), Tolerance::new(1e-5, 1e-5).for_backend::<B>(), "forward");
        let fdx = finite_difference(&xd, 1e-3, |v| dot(&dyd, &linear_ref(&g, v, &pd)));
        assert_close(&dx, &fdx, Tolerance::GRAD.for_backend::<B>(), "dx");
        let fdp = finite_difference(&pd, 1e-3, |v| dot(&dyd, &linear_ref(&g, &xd, v)));
        assert_close(&dp, &fdp, Tolerance::GRAD.for_backend::<B>(), "dparams");
    });
}

/// All three passes within [`GPU_TOLERANCE`] of the CPU, up to 39 × 299 → 79.
pub fn linear_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |(n in 1usize..40, i in 1usize..300, o in 1usize..80, bias in any::<bool>(), seed in any::<u64>())| {
        let g = LinearGeom { batch: n, in_features: i, out_features: o, bias };
        let x = random_vec(seed, g.input_len(), 1.0);
        let p = random_vec(seed ^ 1, g.params_len(), 0.5);
        let dy = random_vec(seed ^ 2, g.output_len(), 1.0);
        let got = passes(be, &g, &x, &p, &dy);
        let want = passes(&cpu, &g, &x, &p, &dy);
        assert_close_f32(&got.0, &want.0, GPU_TOLERANCE, &format!("linear forward {g:?}"));
        assert_close_f32(&got.1, &want.1, GPU_TOLERANCE, &format!("linear backward data {g:?}"));
        assert_close_f32(&got.2, &want.2, GPU_TOLERANCE, &format!("linear backward params {g:?}"));
    });
}

/// A params buffer one short is an error naming `params` and the expected length; batch 0 is invalid.
pub fn linear_bad_lengths_are_errors<B: Backend>(be: &B) {
    let g = LinearGeom { batch: 2, in_features: 3, out_features: 4, bias: true };
    let x = upload(be, &[0.0; 6]);
    let p = upload(be, &vec![0.0; g.params_len() - 1]);
    let mut y = nan_buffer(be, 8);
    let e = be.linear_forward(&g, View::whole(&x), View::whole(&p), ViewMut::whole(&mut y)).unwrap_err().to_string();
    assert!(e.contains("params") && e.contains("16"), "{e}");
    assert!(LinearGeom { batch: 0, ..g }.validate().is_err());
}

crate::test_backends! {
    linear_matches_reference: [cpu, cpu_threads, emu, cuda],
    linear_matches_cpu: [cpu_threads, emu, cuda],
    linear_bad_lengths_are_errors,
}
