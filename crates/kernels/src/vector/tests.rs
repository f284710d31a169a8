use proptest::prelude::*;

use crate::testing::{Tolerance, assert_close, random_vec};
use crate::{Backend, CpuBackend, View, ViewMut};

proptest! {
    /// Every vector op against an f64 transcription. Bound 1e-6 rel + 1e-6 abs: the absolute
    /// part covers cancellation in `alpha*x + beta*y` with terms up to 6 (f32 rounding of each
    /// term is at most 6 * 2^-24 ≈ 4e-7).
    #[test]
    fn vector_ops(len in 0usize..300, alpha in -3.0f32..3.0, beta in -3.0f32..3.0, seed in any::<u64>()) {
        let be = CpuBackend::new(0);
        let a = random_vec(seed, len, 2.0);
        let b = random_vec(seed ^ 1, len, 2.0);
        let tol = Tolerance::new(1e-6, 1e-6);
        type Ref = fn(f64, f64, f64, f64) -> f64;
        let cases: [(&str, Ref); 3] = [
            ("add", |x, y, _, _| x + y),
            ("sub", |x, y, _, _| x - y),
            ("mul", |x, y, _, _| x * y),
        ];
        for (name, f) in cases {
            let mut y = vec![f32::NAN; len];
            match name {
                "add" => be.add(View::whole(&a), View::whole(&b), ViewMut::whole(&mut y)).unwrap(),
                "sub" => be.sub(View::whole(&a), View::whole(&b), ViewMut::whole(&mut y)).unwrap(),
                _ => be.mul(View::whole(&a), View::whole(&b), ViewMut::whole(&mut y)).unwrap(),
            }
            let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &z)| f(x as f64, z as f64, 0.0, 0.0)).collect();
            assert_close(&y, &want, tol, name);
        }
        let mut y = b.clone();
        be.axpy(alpha, View::whole(&a), ViewMut::whole(&mut y)).unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &z)| alpha as f64 * x as f64 + z as f64).collect();
        assert_close(&y, &want, tol, "axpy");
        let mut y = b.clone();
        be.axpby(alpha, View::whole(&a), beta, ViewMut::whole(&mut y)).unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &z)| alpha as f64 * x as f64 + beta as f64 * z as f64).collect();
        assert_close(&y, &want, tol, "axpby");
        let mut y = b.clone();
        be.scale(alpha, ViewMut::whole(&mut y)).unwrap();
        let want: Vec<f64> = b.iter().map(|&z| alpha as f64 * z as f64).collect();
        assert_close(&y, &want, tol, "scale");
        let mut s = vec![0.0];
        be.sum_squares(View::whole(&a), ViewMut::whole(&mut s)).unwrap();
        let want: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum();
        assert_close(&s, &[want], Tolerance::new(1e-6, 1e-6), "sum_squares");
    }
}

#[test]
fn axpby_with_zero_beta_ignores_nan() {
    let be = CpuBackend::new(0);
    let mut y = vec![f32::NAN; 3];
    be.axpby(2.0, View::whole(&vec![1.0, 2.0, 3.0]), 0.0, ViewMut::whole(&mut y)).unwrap();
    assert_eq!(y, vec![2.0, 4.0, 6.0]);
}

#[test]
fn views_select_regions_and_check_bounds() {
    let be = CpuBackend::new(0);
    let a = vec![1.0, 2.0, 3.0, 4.0];
    let mut y = vec![0.0; 6];
    be.copy(View::new(&a, 1..3).unwrap(), ViewMut::new(&mut y, 4..6).unwrap()).unwrap();
    assert_eq!(y, vec![0.0, 0.0, 0.0, 0.0, 2.0, 3.0]);
    assert!(View::<CpuBackend>::new(&a, 2..5).is_err());
    assert!(View::<CpuBackend>::whole(&a).slice(3..5).is_err());
    let (l, r) = View::<CpuBackend>::whole(&a).split_at(1).unwrap();
    assert_eq!((l.len(), r.len(), r.offset()), (1, 3, 1));
    let e = be.add(View::whole(&a), View::new(&a, 0..3).unwrap(), ViewMut::new(&mut y, 0..4).unwrap()).unwrap_err();
    assert!(e.to_string().contains("add") && e.to_string().contains("'b'"), "{e}");
}
