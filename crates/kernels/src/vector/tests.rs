//! Vector ops on every backend: against f64 transcriptions, NaN handling, views, and
//! agreement with the CPU on vectors up to 5000 long.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use crate::prelude::*;
use crate::testing::{
    Tolerance, assert_close, assert_close_f32, download, nan_buffer, proptest_config, random_vec, upload,
};

/// Every vector op against an f64 transcription. Bound 1e-6 rel + 1e-6 abs: the absolute
/// part covers cancellation in `alpha*x + beta*y` with terms up to 6 (f32 rounding of each
/// term is at most 6 * 2^-24 ≈ 4e-7).
pub fn vector_ops<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(256), |(len in 0usize..300, alpha in -3.0f32..3.0, beta in -3.0f32..3.0, seed in any::<u64>())| {
        let a = random_vec(seed, len, 2.0);
        let b = random_vec(seed ^ 1, len, 2.0);
        let (ab, bb) = (upload(be, &a), upload(be, &b));
        let tol = Tolerance::new(1e-6, 1e-6);
        type Ref = fn(f64, f64) -> f64;
        let cases: [(&str, Ref); 3] = [("add", |x, y| x + y), ("sub", |x, y| x - y), ("mul", |x, y| x * y)];
        for (name, f) in cases {
            let mut y = nan_buffer(be, len);
            let (x, z, o) = (View::whole(&ab), View::whole(&bb), ViewMut::whole(&mut y));
            match name {
                "add" => be.add(x, z, o).unwrap(),
                "sub" => be.sub(x, z, o).unwrap(),
                _ => be.mul(x, z, o).unwrap(),
            }
            let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &z)| f(x as f64, z as f64)).collect();
            assert_close(&download(be, &y), &want, tol, name);
        }
        let mut y = upload(be, &b);
        be.axpy(alpha, View::whole(&ab), ViewMut::whole(&mut y)).unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &z)| alpha as f64 * x as f64 + z as f64).collect();
        assert_close(&download(be, &y), &want, tol, "axpy");
        let mut y = upload(be, &b);
        be.axpby(alpha, View::whole(&ab), beta, ViewMut::whole(&mut y)).unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &z)| alpha as f64 * x as f64 + beta as f64 * z as f64).collect();
        assert_close(&download(be, &y), &want, tol, "axpby");
        let mut y = upload(be, &b);
        be.scale(alpha, ViewMut::whole(&mut y)).unwrap();
        let want: Vec<f64> = b.iter().map(|&z| alpha as f64 * z as f64).collect();
        assert_close(&download(be, &y), &want, tol, "scale");
        let mut s = nan_buffer(be, 1);
        be.sum_squares(View::whole(&ab), ViewMut::whole(&mut s)).unwrap();
        let want: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum();
        assert_close(&download(be, &s), &[want], Tolerance::new(1e-6, 1e-6).for_backend::<B>(), "sum_squares");
    });
}

/// `axpby` with `beta = 0` overwrites a NaN-filled `y` rather than propagating NaN.
pub fn axpby_with_zero_beta_ignores_nan<B: Backend>(be: &B) {
    let mut y = nan_buffer(be, 3);
    be.axpby(2.0, View::whole(&upload(be, &[1.0, 2.0, 3.0])), 0.0, ViewMut::whole(&mut y)).unwrap();
    assert_eq!(download(be, &y), vec![2.0, 4.0, 6.0]);
}

/// Views and sub-views address the right region; out-of-range views and mismatched lengths are errors.
pub fn views_select_regions_and_check_bounds<B: Backend>(be: &B) {
    let a = upload(be, &[1.0, 2.0, 3.0, 4.0]);
    let mut y = upload(be, &[0.0; 6]);
    be.copy(View::new(&a, 1..3).unwrap(), ViewMut::new(&mut y, 4..6).unwrap()).unwrap();
    assert_eq!(download(be, &y), vec![0.0, 0.0, 0.0, 0.0, 2.0, 3.0]);
    assert!(View::<B>::new(&a, 2..5).is_err());
    assert!(View::<B>::whole(&a).slice(3..5).is_err());
    let (l, r) = View::<B>::whole(&a).split_at(1).unwrap();
    assert_eq!((l.len(), r.len(), r.offset()), (1, 3, 1));
    let e = be.add(View::whole(&a), View::new(&a, 0..3).unwrap(), ViewMut::new(&mut y, 0..4).unwrap()).unwrap_err();
    assert!(e.to_string().contains("add") && e.to_string().contains("'b'"), "{e}");
    // An empty reduction is 0.
    let z = be.alloc(0).unwrap();
    let mut o = nan_buffer(be, 1);
    be.sum_squares(View::whole(&z), ViewMut::whole(&mut o)).unwrap();
    assert_eq!(download(be, &o), [0.0]);
}

/// Every vector op, `copy` and `fill` against the CPU on vectors up to 5000 long (bound
/// 1e-6 rel + 1e-6 abs; 1e-5 rel for the sum of squares, a reduction in another order).
pub fn vector_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |(n in 0usize..5000, alpha in -2.0f32..2.0, beta in -2.0f32..2.0, seed in any::<u64>())| {
        let a = random_vec(seed, n, 2.0);
        let b = random_vec(seed ^ 1, n, 2.0);
        let t = Tolerance::new(1e-6, 1e-6);
        let (ab, bb) = (upload(be, &a), upload(be, &b));
        for op in ["add", "sub", "mul"] {
            let (mut yb, mut yc) = (nan_buffer(be, n), vec![f32::NAN; n]);
            let (x, z, o) = (View::whole(&ab), View::whole(&bb), ViewMut::whole(&mut yb));
            let (xc, zc, oc) = (View::whole(&a), View::whole(&b), ViewMut::whole(&mut yc));
            match op {
                "add" => (be.add(x, z, o).unwrap(), cpu.add(xc, zc, oc).unwrap()),
                "sub" => (be.sub(x, z, o).unwrap(), cpu.sub(xc, zc, oc).unwrap()),
                _ => (be.mul(x, z, o).unwrap(), cpu.mul(xc, zc, oc).unwrap()),
            };
            assert_close_f32(&download(be, &yb), &yc, t, op);
        }
        // In-place ops start from b.
        type InPlace<'f, K> = dyn Fn(&K, View<'_, K>, ViewMut<'_, K>) -> crate::Result<()> + 'f;
        let check = |what: &str, f_be: &InPlace<'_, B>, f_cpu: &InPlace<'_, CpuBackend>| {
            let mut yb = upload(be, &b);
            let mut yc = b.clone();
            f_be(be, View::whole(&ab), ViewMut::whole(&mut yb)).unwrap();
            f_cpu(&cpu, View::whole(&a), ViewMut::whole(&mut yc)).unwrap();
            assert_close_f32(&download(be, &yb), &yc, t, what);
        };
        check("axpy", &|k, x, y| k.axpy(alpha, x, y), &|k, x, y| k.axpy(alpha, x, y));
        check("axpby", &|k, x, y| k.axpby(alpha, x, beta, y), &|k, x, y| k.axpby(alpha, x, beta, y));
        check("axpby beta=0", &|k, x, y| k.axpby(alpha, x, 0.0, y), &|k, x, y| k.axpby(alpha, x, 0.0, y));
        check("scale", &|k, _, y| k.scale(alpha, y), &|k, _, y| k.scale(alpha, y));
        check("copy", &|k, x, y| k.copy(x, y), &|k, x, y| k.copy(x, y));
        check("fill", &|k, _, y| k.fill(y, beta), &|k, _, y| k.fill(y, beta));
        let (mut sb, mut sc) = (nan_buffer(be, 1), vec![f32::NAN]);
        be.sum_squares(View::whole(&ab), ViewMut::whole(&mut sb)).unwrap();
        cpu.sum_squares(View::whole(&a), ViewMut::whole(&mut sc)).unwrap();
        assert_close_f32(&download(be, &sb), &sc, Tolerance::new(1e-5, 1e-6), "sum_squares");
    });
}

/// A started download returns what its view held where it was started in the queue, even
/// when later work overwrites the view before it is finished; downloads finish in any order,
/// and their buffers are reused at any size.
pub fn started_downloads_see_their_point_in_the_queue<B: Backend>(be: &B) {
    for len in [0usize, 2, 5000] {
        let first: Vec<f32> = (0..len).map(|i| i as f32 + 0.5).collect();
        let mut buf = upload(be, &first);
        let a = be.start_download(View::whole(&buf)).unwrap();
        be.fill(ViewMut::whole(&mut buf), 9.0).unwrap();
        let tail = len.min(3);
        let b = be.start_download(View::new(&buf, len - tail..len).unwrap()).unwrap();
        be.fill(ViewMut::whole(&mut buf), -1.0).unwrap();
        assert_eq!(be.finish_download(b).unwrap(), vec![9.0; tail], "len {len}: the later read");
        assert_eq!(be.finish_download(a).unwrap(), first, "len {len}: the earlier read");
        let c = be.start_download(View::whole(&buf)).unwrap();
        assert_eq!(be.finish_download(c).unwrap(), vec![-1.0; len], "len {len}: a reused buffer");
    }
}

crate::test_backends! {
    started_downloads_see_their_point_in_the_queue: [cpu, emu, cuda, cuda_async],
    vector_ops,
    axpby_with_zero_beta_ignores_nan,
    views_select_regions_and_check_bounds,
    vector_matches_cpu: [cpu_threads, emu, cuda],
}
