//! Dropout on every backend: mask statistics, scaling and the backward product; masks
//! identical to the CPU's; bad probabilities.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::{DropoutConfig, keep};
use crate::prelude::*;
use crate::testing::{Tolerance, assert_close_f32, download, nan_buffer, proptest_config, random_vec, upload};

/// The mask keeps each element with probability 1-p (binomial bound at 5 sigma), kept
/// elements are scaled by 1/(1-p), y = x*mask, and the backward product dy*mask is the
/// exact derivative of the linear map x -> x*mask.
pub fn dropout_mask_statistics_and_scaling<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(256), |(p in 0.0f32..0.9, seed in any::<u64>())| {
        let n = 20_000;
        let cfg = DropoutConfig { p, seed };
        let x = random_vec(seed, n, 1.0);
        let (mut yb, mut mb) = (nan_buffer(be, n), nan_buffer(be, n));
        be.dropout_forward(&cfg, View::whole(&upload(be, &x)), ViewMut::whole(&mut yb), ViewMut::whole(&mut mb)).unwrap();
        let (y, mask) = (download(be, &yb), download(be, &mb));
        let kept = mask.iter().filter(|&&m| m != 0.0).count() as f64;
        let expect = (1.0 - p as f64) * n as f64;
        let sigma = (n as f64 * p as f64 * (1.0 - p as f64)).sqrt();
        prop_assert!((kept - expect).abs() <= 5.0 * sigma + 1.0, "kept {kept}, expected {expect}");
        for i in 0..n {
            let m = if keep(seed, i as u64, p) { 1.0 / (1.0 - p) } else { 0.0 };
            prop_assert_eq!(mask[i], m);
            prop_assert_eq!(y[i], x[i] * m);
        }
        let dy = random_vec(seed ^ 1, n, 1.0);
        let mut dxb = nan_buffer(be, n);
        be.mul(View::whole(&upload(be, &dy)), View::whole(&mb), ViewMut::whole(&mut dxb)).unwrap();
        let dx = download(be, &dxb);
        for i in 0..n {
            prop_assert_eq!(dx[i], dy[i] * mask[i]);
        }
    });
}

/// The mask is drawn from the same counter-based hash: identical to the CPU's, and so is
/// the output.
pub fn dropout_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |(n in 1usize..10_000, p in 0.0f32..0.95, seed in any::<u64>())| {
        let cfg = DropoutConfig { p, seed };
        let x = random_vec(seed, n, 1.0);
        let (mut yb, mut mb) = (nan_buffer(be, n), nan_buffer(be, n));
        let (mut yc, mut mc) = (vec![0.0; n], vec![0.0; n]);
        be.dropout_forward(&cfg, View::whole(&upload(be, &x)), ViewMut::whole(&mut yb), ViewMut::whole(&mut mb)).unwrap();
        cpu.dropout_forward(&cfg, View::whole(&x), ViewMut::whole(&mut yc), ViewMut::whole(&mut mc)).unwrap();
        assert_close_f32(&download(be, &mb), &mc, Tolerance::EXACT, "dropout mask");
        assert_close_f32(&download(be, &yb), &yc, Tolerance::EXACT, "dropout output");
    });
}

/// A drop probability of 1, below 0 or NaN is an error naming the probability.
pub fn bad_probability_is_an_error<B: Backend>(be: &B) {
    let x = upload(be, &[1.0; 4]);
    let (mut y, mut m) = (nan_buffer(be, 4), nan_buffer(be, 4));
    for p in [1.0, -0.1, f32::NAN] {
        let e = be.dropout_forward(
            &DropoutConfig { p, seed: 0 },
            View::whole(&x),
            ViewMut::whole(&mut y),
            ViewMut::whole(&mut m),
        );
        assert!(e.unwrap_err().to_string().contains("probability"));
    }
}

crate::test_backends! {
    dropout_mask_statistics_and_scaling,
    dropout_matches_cpu: [cpu_threads, emu, cuda],
    bad_probability_is_an_error,
}

#[test]
fn masks_depend_on_the_seed_and_are_uniform() {
    use super::uniform;
    let a: Vec<bool> = (0..256).map(|i| keep(1, i, 0.5)).collect();
    let b: Vec<bool> = (0..256).map(|i| keep(2, i, 0.5)).collect();
    assert_ne!(a, b);
    // Mean of 100k draws of the counter-based uniform is 0.5 within 5 standard errors.
    let n = 100_000;
    let mean: f64 = (0..n).map(|i| uniform(42, i) as f64).sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 5.0 * (1.0f64 / 12.0 / n as f64).sqrt(), "{mean}");
    assert!((0..n).all(|i| (0.0..1.0).contains(&uniform(7, i))));
}
