use proptest::prelude::*;

use crate::testing::{Tolerance, assert_close, dot, finite_difference, random_vec, random_vec_away_from_zero, to_f64};
use crate::{Backend, CpuBackend, View, ViewMut};

proptest! {
    /// Forward exact; backward (out-of-place and in place) against central differences with
    /// h = 1e-3 on inputs at least 1e-2 away from the kink.
    #[test]
    fn relu_forward_and_backward(len in 1usize..200, seed in any::<u64>()) {
        let be = CpuBackend::new(0);
        let x = random_vec_away_from_zero(seed, len, 2.0, 1e-2);
        let dy = random_vec(seed ^ 1, len, 1.0);
        let mut y = vec![f32::NAN; len];
        be.relu_forward(View::whole(&x), ViewMut::whole(&mut y)).unwrap();
        let want: Vec<f64> = x.iter().map(|&v| (v as f64).max(0.0)).collect();
        assert_close(&y, &want, Tolerance::EXACT, "forward");
        let mut y2 = x.clone();
        be.relu_forward_inplace(ViewMut::whole(&mut y2)).unwrap();
        prop_assert_eq!(&y, &y2);
        let mut dx = vec![f32::NAN; len];
        be.relu_backward(View::whole(&y), View::whole(&dy), ViewMut::whole(&mut dx)).unwrap();
        let dyd = to_f64(&dy);
        let fd = finite_difference(&to_f64(&x), 1e-3, |v| dot(&dyd, &v.iter().map(|a| a.max(0.0)).collect::<Vec<_>>()));
        assert_close(&dx, &fd, Tolerance::GRAD, "backward");
        let mut d = dy.clone();
        be.relu_backward_inplace(View::whole(&y), ViewMut::whole(&mut d)).unwrap();
        prop_assert_eq!(&d, &dx);
    }
}

#[test]
fn relu_length_mismatch_is_an_error() {
    let be = CpuBackend::new(0);
    let mut y = vec![0.0; 3];
    assert!(be.relu_forward(View::whole(&[1.0f32, 2.0].to_vec()), ViewMut::whole(&mut y)).is_err());
}
