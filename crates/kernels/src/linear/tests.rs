//! linear: forward vs naive f64, backward vs central finite differences in f64.

use proptest::prelude::*;

use super::LinearGeom;
use crate::testing::{Tolerance, assert_close, dot, finite_difference, random_vec, to_f64};
use crate::{Backend, CpuBackend, View, ViewMut};

fn linear_ref(g: &LinearGeom, x: &[f64], p: &[f64]) -> Vec<f64> {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Bounds: forward 1e-5 rel + 1e-5 abs; gradients `Tolerance::GRAD` against h = 1e-3
    /// central differences of the f64 reference. Run single- and multi-threaded.
    #[test]
    fn linear_matches_reference(batch in 1usize..6, inf in 1usize..20, outf in 1usize..12,
                                bias in any::<bool>(), threads in 1usize..4, seed in any::<u64>()) {
        let g = LinearGeom { batch, in_features: inf, out_features: outf, bias };
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let x = random_vec(seed, g.input_len(), 1.0);
        let p = random_vec(seed ^ 3, g.params_len(), 0.5);
        let dy = random_vec(seed ^ 5, g.output_len(), 1.0);
        let mut y = vec![f32::NAN; g.output_len()];
        let mut dx = vec![f32::NAN; g.input_len()];
        let mut dp = vec![f32::NAN; g.params_len()];
        be.linear_forward(&g, View::whole(&x), View::whole(&p), ViewMut::whole(&mut y)).unwrap();
        be.linear_backward_data(&g, View::whole(&dy), View::whole(&p), ViewMut::whole(&mut dx)).unwrap();
        be.linear_backward_params(&g, View::whole(&x), View::whole(&dy), ViewMut::whole(&mut dp)).unwrap();
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        assert_close(&y, &linear_ref(&g, &xd, &pd), Tolerance::new(1e-5, 1e-5), "forward");
        let fdx = finite_difference(&xd, 1e-3, |v| dot(&dyd, &linear_ref(&g, v, &pd)));
        assert_close(&dx, &fdx, Tolerance::GRAD, "dx");
        let fdp = finite_difference(&pd, 1e-3, |v| dot(&dyd, &linear_ref(&g, &xd, v)));
        assert_close(&dp, &fdp, Tolerance::GRAD, "dparams");
    }
}

#[test]
fn linear_bad_lengths_are_errors() {
    let be = CpuBackend::new(0);
    let g = LinearGeom { batch: 2, in_features: 3, out_features: 4, bias: true };
    let x = vec![0.0; 6];
    let p = vec![0.0; g.params_len() - 1];
    let mut y = vec![0.0; 8];
    let e = be.linear_forward(&g, View::whole(&x), View::whole(&p), ViewMut::whole(&mut y)).unwrap_err().to_string();
    assert!(e.contains("params") && e.contains("16"), "{e}");
    assert!(LinearGeom { batch: 0, ..g }.validate().is_err());
}
