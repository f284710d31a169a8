//! batch norm: training forward vs an f64 reference (including the running-statistics
//! update), inference forward, and the backward pass vs central finite differences of the
//! f64 training-mode forward.

use proptest::prelude::*;

use super::BatchNormGeom;
use crate::testing::{Tolerance, assert_close, dot, finite_difference, random_distinct_vec, random_vec, to_f64};
use crate::{Backend, CpuBackend, View, ViewMut};

/// Training-mode batch norm in f64: returns y.
fn bn_ref(g: &BatchNormGeom, x: &[f64], p: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (c, s, m) = (g.channels, g.spatial, g.count() as f64);
    let mut y = vec![0.0; g.len()];
    let mut means = vec![0.0; c];
    let mut vars = vec![0.0; c];
    for ch in 0..c {
        let idx = |n: usize, i: usize| (n * c + ch) * s + i;
        let mean = (0..g.batch).flat_map(|n| (0..s).map(move |i| (n, i))).map(|(n, i)| x[idx(n, i)]).sum::<f64>() / m;
        let var = (0..g.batch)
            .flat_map(|n| (0..s).map(move |i| (n, i)))
            .map(|(n, i)| (x[idx(n, i)] - mean).powi(2))
            .sum::<f64>()
            / m;
        for n in 0..g.batch {
            for i in 0..s {
                y[idx(n, i)] = (x[idx(n, i)] - mean) / (var + g.eps as f64).sqrt() * p[ch] + p[c + ch];
            }
        }
        means[ch] = mean;
        vars[ch] = var;
    }
    (y, means, vars)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Forward bound 1e-4 rel + 1e-5 abs (normalisation divides by small standard deviations);
    /// gradients `Tolerance::GRAD` against central differences with h = 1e-3.
    #[test]
    fn batch_norm_matches_reference(batch in 1usize..5, channels in 1usize..5, spatial in 1usize..10,
                                    threads in 1usize..3, seed in any::<u64>()) {
        prop_assume!(batch * spatial > 1);
        let g = BatchNormGeom { batch, channels, spatial, eps: 1e-5, momentum: 0.1 };
        let be = CpuBackend::with_threads(0, threads).unwrap();
        // Values at least 0.1 apart: with two values per channel and close values the
        // normalisation is too curved for h = 1e-3 differences.
        let x = random_distinct_vec(seed, g.len(), 0.1);
        let mut p = random_vec(seed ^ 1, 2 * channels, 1.0);
        for v in &mut p[..channels] { *v += 1.5; }
        let dy = random_vec(seed ^ 2, g.len(), 1.0);
        let running0 = random_vec(seed ^ 3, 2 * channels, 0.5).iter().enumerate()
            .map(|(i, v)| if i >= channels { v.abs() + 0.5 } else { *v }).collect::<Vec<f32>>();
        let mut running = running0.clone();
        let mut y = vec![f32::NAN; g.len()];
        let mut saved = vec![f32::NAN; 2 * channels];
        be.batch_norm_forward_train(&g, View::whole(&x), View::whole(&p), ViewMut::whole(&mut y),
            ViewMut::whole(&mut saved), ViewMut::whole(&mut running)).unwrap();
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        let (yr, means, vars) = bn_ref(&g, &xd, &pd);
        assert_close(&y, &yr, Tolerance::new(1e-4, 1e-5), "forward");
        let m = g.count() as f64;
        let mut want_running = vec![0.0; 2 * channels];
        for ch in 0..channels {
            want_running[ch] = 0.9 * running0[ch] as f64 + 0.1 * means[ch];
            want_running[channels + ch] = 0.9 * running0[channels + ch] as f64 + 0.1 * vars[ch] * m / (m - 1.0);
        }
        assert_close(&running, &want_running, Tolerance::new(1e-5, 1e-6), "running statistics");

        let mut dx = vec![f32::NAN; g.len()];
        let mut dp = vec![f32::NAN; 2 * channels];
        be.batch_norm_backward(&g, View::whole(&x), View::whole(&dy), View::whole(&p), View::whole(&saved),
            ViewMut::whole(&mut dx), ViewMut::whole(&mut dp)).unwrap();
        let fdx = finite_difference(&xd, 1e-3, |v| dot(&dyd, &bn_ref(&g, v, &pd).0));
        assert_close(&dx, &fdx, Tolerance::new(2e-3, 5e-4), "dx");
        let fdp = finite_difference(&pd, 1e-3, |v| dot(&dyd, &bn_ref(&g, &xd, v).0));
        assert_close(&dp, &fdp, Tolerance::GRAD, "dparams");

        // Inference with the updated running statistics.
        let mut yi = vec![f32::NAN; g.len()];
        be.batch_norm_forward_infer(&g, View::whole(&x), View::whole(&p), View::whole(&running), ViewMut::whole(&mut yi)).unwrap();
        let want: Vec<f64> = (0..g.len()).map(|i| {
            let ch = (i / spatial) % channels;
            (xd[i] - running[ch] as f64) / (running[channels + ch] as f64 + 1e-5).sqrt() * pd[ch] + pd[channels + ch]
        }).collect();
        assert_close(&yi, &want, Tolerance::new(1e-5, 1e-5), "inference");
    }
}

#[test]
fn batch_norm_bad_arguments_are_errors() {
    let g = BatchNormGeom::new(2, 3, 4);
    assert!(BatchNormGeom { eps: 0.0, ..g }.validate().is_err());
    assert!(BatchNormGeom { momentum: 1.5, ..g }.validate().is_err());
    let be = CpuBackend::new(0);
    let x = vec![0.0; g.len()];
    let p = vec![1.0; 6];
    let mut y = vec![0.0; g.len()];
    let mut saved = vec![0.0; 5];
    let mut running = vec![0.0; 6];
    let e = be
        .batch_norm_forward_train(
            &g,
            View::whole(&x),
            View::whole(&p),
            ViewMut::whole(&mut y),
            ViewMut::whole(&mut saved),
            ViewMut::whole(&mut running),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("saved"), "{e}");
}
