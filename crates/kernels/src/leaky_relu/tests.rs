//! Leaky ReLU on every backend: forward against a naive f64 reference, backward against
//! central finite differences in f64, agreement with the CPU bit for bit, argument errors.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use crate::prelude::*;
use crate::testing::{
    Tolerance, assert_close, assert_close_f32, dot, download, finite_difference, nan_buffer, proptest_config,
    random_vec, random_vec_away_from_zero, to_f64, upload,
};

/// The definition in f64.
pub fn leaky_relu_ref(slope: f64, x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| if v > 0.0 { v } else { slope * v }).collect()
}

/// Forward against the f64 definition: within one f32 rounding of the product (bound 1e-7
/// relative), exact for positive inputs; NaNs propagate.
pub fn leaky_relu_forward_matches_reference<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(256), |(len in 0usize..300, slope in prop_oneof![Just(0.0f32), Just(0.01f32), 0.0f32..1.0], seed in any::<u64>())| {
        let mut x = random_vec(seed, len, 3.0);
        if len > 2 {
            x[1] = f32::NAN;
            x[2] = 0.0;
        }
        let mut y = nan_buffer(be, len);
        be.leaky_relu_forward(slope, View::whole(&upload(be, &x)), ViewMut::whole(&mut y)).unwrap();
        let want = leaky_relu_ref(slope as f64, &to_f64(&x));
        assert_close(&download(be, &y), &want, Tolerance::new(1e-7, 0.0), "forward");
    });
}

/// Backward (from the forward output) against central differences of the f64 definition,
/// h = 1e-3, on inputs at least 1e-2 away from the kink (`Tolerance::GRAD`).
pub fn leaky_relu_backward_matches_finite_differences<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(256), |(len in 1usize..200, slope in 0.0f32..1.0, seed in any::<u64>())| {
        let x = random_vec_away_from_zero(seed, len, 2.0, 1e-2);
        let dy = random_vec(seed ^ 1, len, 1.0);
        let mut y = nan_buffer(be, len);
        be.leaky_relu_forward(slope, View::whole(&upload(be, &x)), ViewMut::whole(&mut y)).unwrap();
        let mut dx = nan_buffer(be, len);
        be.leaky_relu_backward(slope, View::whole(&y), View::whole(&upload(be, &dy)), ViewMut::whole(&mut dx)).unwrap();
        let dyd = to_f64(&dy);
        let fd = finite_difference(&to_f64(&x), 1e-3, |v| dot(&dyd, &leaky_relu_ref(slope as f64, v)));
        assert_close(&download(be, &dx), &fd, Tolerance::GRAD.for_backend::<B>(), "backward");
    });
}

/// Forward and backward on vectors up to 5000 long (several blocks on a GPU) equal the
/// CPU's bit for bit.
pub fn leaky_relu_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |(n in 1usize..5000, slope in 0.0f32..1.0, seed in any::<u64>())| {
        let x = random_vec(seed, n, 2.0);
        let dy = random_vec(seed ^ 1, n, 1.0);
        let (mut yb, mut yc) = (nan_buffer(be, n), vec![f32::NAN; n]);
        be.leaky_relu_forward(slope, View::whole(&upload(be, &x)), ViewMut::whole(&mut yb)).unwrap();
        cpu.leaky_relu_forward(slope, View::whole(&x), ViewMut::whole(&mut yc)).unwrap();
        assert_close_f32(&download(be, &yb), &yc, Tolerance::EXACT, "leaky_relu forward");
        let (mut dxb, mut dxc) = (nan_buffer(be, n), vec![f32::NAN; n]);
        be.leaky_relu_backward(slope, View::whole(&yb), View::whole(&upload(be, &dy)), ViewMut::whole(&mut dxb)).unwrap();
        cpu.leaky_relu_backward(slope, View::whole(&yc), View::whole(&dy), ViewMut::whole(&mut dxc)).unwrap();
        assert_close_f32(&download(be, &dxb), &dxc, Tolerance::EXACT, "leaky_relu backward");
    });
}

/// A negative or non-finite slope and a length mismatch are the same errors on every
/// backend, and nothing is written.
pub fn leaky_relu_bad_arguments_are_errors<B: Backend>(be: &B) {
    let x = upload(be, &[1.0, -2.0]);
    for slope in [-0.1, f32::NAN, f32::INFINITY] {
        let mut y = upload(be, &[7.0, 7.0]);
        let e = be.leaky_relu_forward(slope, View::whole(&x), ViewMut::whole(&mut y)).unwrap_err();
        assert!(e.to_string().contains("slope"), "{e}");
        let e = be.leaky_relu_backward(slope, View::whole(&x), View::whole(&x), ViewMut::whole(&mut y)).unwrap_err();
        assert!(e.to_string().contains("slope"), "{e}");
        assert_eq!(download(be, &y), [7.0, 7.0]);
    }
    let mut y = nan_buffer(be, 3);
    let e = be.leaky_relu_forward(0.1, View::whole(&x), ViewMut::whole(&mut y)).unwrap_err();
    assert!(
        matches!(e, crate::KernelError::Length { op: "leaky_relu_forward", arg: "y", expected: 2, actual: 3 }),
        "{e}"
    );
}

crate::test_backends! {
    leaky_relu_forward_matches_reference,
    leaky_relu_backward_matches_finite_differences,
    leaky_relu_matches_cpu: [cpu_threads, emu, cuda],
    leaky_relu_bad_arguments_are_errors,
}
