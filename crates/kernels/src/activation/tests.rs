//! ReLU on every backend: forward exact, backward (out of place and in place) against
//! central finite differences, agreement with the CPU on large vectors, argument errors.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use crate::prelude::*;
use crate::testing::{
    Tolerance, assert_close, assert_close_f32, dot, download, finite_difference, nan_buffer, proptest_config,
    random_vec, random_vec_away_from_zero, to_f64, upload,
};

/// Forward exact; backward (out-of-place and in place) against central differences with
/// h = 1e-3 on inputs at least 1e-2 away from the kink.
pub fn relu_forward_and_backward<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(256), |(len in 1usize..200, seed in any::<u64>())| {
        let x = random_vec_away_from_zero(seed, len, 2.0, 1e-2);
        let dy = random_vec(seed ^ 1, len, 1.0);
        let (xb, dyb) = (upload(be, &x), upload(be, &dy));
        let mut yb = nan_buffer(be, len);
        be.relu_forward(View::whole(&xb), ViewMut::whole(&mut yb)).unwrap();
        let y = download(be, &yb);
        let want: Vec<f64> = x.iter().map(|&v| (v as f64).max(0.0)).collect();
        assert_close(&y, &want, Tolerance::EXACT, "forward");
        let mut y2 = upload(be, &x);
        be.relu_forward_inplace(ViewMut::whole(&mut y2)).unwrap();
        prop_assert_eq!(&y, &download(be, &y2));
        let mut dxb = nan_buffer(be, len);
        be.relu_backward(View::whole(&yb), View::whole(&dyb), ViewMut::whole(&mut dxb)).unwrap();
        let dx = download(be, &dxb);
        let dyd = to_f64(&dy);
        let fd = finite_difference(&to_f64(&x), 1e-3, |v| dot(&dyd, &v.iter().map(|a| a.max(0.0)).collect::<Vec<_>>()));
        assert_close(&dx, &fd, Tolerance::GRAD.for_backend::<B>(), "backward");
        let mut d = upload(be, &dy);
        be.relu_backward_inplace(View::whole(&yb), ViewMut::whole(&mut d)).unwrap();
        prop_assert_eq!(&download(be, &d), &dx);
    });
}

/// Every ReLU call on vectors up to 5000 long (several blocks on a GPU) equals the CPU's
/// bit for bit.
pub fn relu_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |(n in 1usize..5000, seed in any::<u64>())| {
        let x = random_vec_away_from_zero(seed, n, 2.0, 1e-3);
        let dy = random_vec(seed ^ 1, n, 1.0);
        let (xb, dyb) = (upload(be, &x), upload(be, &dy));
        let (mut yb, mut yc) = (nan_buffer(be, n), vec![f32::NAN; n]);
        be.relu_forward(View::whole(&xb), ViewMut::whole(&mut yb)).unwrap();
        cpu.relu_forward(View::whole(&x), ViewMut::whole(&mut yc)).unwrap();
        assert_close_f32(&download(be, &yb), &yc, Tolerance::EXACT, "relu forward");
        let (mut dxb, mut dxc) = (nan_buffer(be, n), vec![f32::NAN; n]);
        be.relu_backward(View::whole(&xb), View::whole(&dyb), ViewMut::whole(&mut dxb)).unwrap();
        cpu.relu_backward(View::whole(&x), View::whole(&dy), ViewMut::whole(&mut dxc)).unwrap();
        assert_close_f32(&download(be, &dxb), &dxc, Tolerance::EXACT, "relu backward");
        let (mut yb, mut yc) = (upload(be, &x), x.clone());
        be.relu_forward_inplace(ViewMut::whole(&mut yb)).unwrap();
        cpu.relu_forward_inplace(ViewMut::whole(&mut yc)).unwrap();
        assert_close_f32(&download(be, &yb), &yc, Tolerance::EXACT, "relu forward in place");
        let (mut db, mut dc) = (upload(be, &dy), dy.clone());
        be.relu_backward_inplace(View::whole(&xb), ViewMut::whole(&mut db)).unwrap();
        cpu.relu_backward_inplace(View::whole(&x), ViewMut::whole(&mut dc)).unwrap();
        assert_close_f32(&download(be, &db), &dc, Tolerance::EXACT, "relu backward in place");
    });
}

/// A length mismatch is the same error on every backend.
pub fn relu_length_mismatch_is_an_error<B: Backend>(be: &B) {
    let x = upload(be, &[1.0, 2.0]);
    let mut y = nan_buffer(be, 3);
    let e = be.relu_forward(View::whole(&x), ViewMut::whole(&mut y)).unwrap_err();
    assert!(matches!(e, crate::KernelError::Length { op: "relu_forward", arg: "y", expected: 2, actual: 3 }), "{e}");
}

crate::test_backends! {
    relu_forward_and_backward,
    relu_matches_cpu: [cpu_threads, emu, cuda],
    relu_length_mismatch_is_an_error,
}
