use proptest::prelude::*;

use super::{DropoutConfig, keep, uniform};
use crate::testing::random_vec;
use crate::{Backend, CpuBackend, View, ViewMut};

proptest! {
    /// The mask keeps each element with probability 1-p (binomial bound at 5 sigma), kept
    /// elements are scaled by 1/(1-p), y = x*mask, and the backward product dy*mask is the
    /// exact derivative of the linear map x -> x*mask.
    #[test]
    fn dropout_mask_statistics_and_scaling(p in 0.0f32..0.9, seed in any::<u64>()) {
        let n = 20_000;
        let be = CpuBackend::new(0);
        let cfg = DropoutConfig { p, seed };
        let x = random_vec(seed, n, 1.0);
        let mut y = vec![f32::NAN; n];
        let mut mask = vec![f32::NAN; n];
        be.dropout_forward(&cfg, View::whole(&x), ViewMut::whole(&mut y), ViewMut::whole(&mut mask)).unwrap();
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
        let mut dx = vec![0.0; n];
        be.mul(View::whole(&dy), View::whole(&mask), ViewMut::whole(&mut dx)).unwrap();
        for i in 0..n {
            prop_assert_eq!(dx[i], dy[i] * mask[i]);
        }
    }
}

#[test]
fn masks_depend_on_the_seed_and_are_uniform() {
    let a: Vec<bool> = (0..256).map(|i| keep(1, i, 0.5)).collect();
    let b: Vec<bool> = (0..256).map(|i| keep(2, i, 0.5)).collect();
    assert_ne!(a, b);
    // Mean of 100k draws of the counter-based uniform is 0.5 within 5 standard errors.
    let n = 100_000;
    let mean: f64 = (0..n).map(|i| uniform(42, i) as f64).sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 5.0 * (1.0f64 / 12.0 / n as f64).sqrt(), "{mean}");
    assert!((0..n).all(|i| (0.0..1.0).contains(&uniform(7, i))));
}

#[test]
fn bad_probability_is_an_error() {
    let be = CpuBackend::new(0);
    let x = vec![1.0; 4];
    let (mut y, mut m) = (vec![0.0; 4], vec![0.0; 4]);
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
