//! pooling: forward vs naive f64, backward vs central finite differences (max pooling on
//! inputs with distinct values far apart, so no window's arg-max changes within ±h).

use proptest::prelude::*;

use super::Pool2dGeom;
use crate::testing::{Tolerance, assert_close, dot, finite_difference, random_distinct_vec, random_vec, to_f64};
use crate::{Backend, CpuBackend, View, ViewMut};

fn pool_ref(g: &Pool2dGeom, x: &[f64], max: bool) -> Vec<f64> {
    let (oh, ow) = (g.out_h(), g.out_w());
    let mut y = vec![0.0; g.output_len()];
    for p in 0..g.batch * g.channels {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut vals = vec![];
                for ki in 0..g.kernel_h {
                    for kj in 0..g.kernel_w {
                        let iy = (oy * g.stride_h + ki) as isize - g.pad_h as isize;
                        let ix = (ox * g.stride_w + kj) as isize - g.pad_w as isize;
                        if iy >= 0 && ix >= 0 && (iy as usize) < g.in_h && (ix as usize) < g.in_w {
                            vals.push(x[p * g.in_h * g.in_w + iy as usize * g.in_w + ix as usize]);
                        }
                    }
                }
                y[p * oh * ow + oy * ow + ox] = if max {
                    vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
                } else {
                    vals.iter().sum::<f64>() / vals.len() as f64
                };
            }
        }
    }
    y
}

fn geom() -> impl Strategy<Value = Pool2dGeom> {
    (1usize..3, 1usize..4, 1usize..10, 1usize..10, 1usize..4, 1usize..4, 1usize..3, 0usize..2, any::<bool>())
        .prop_map(|(n, c, h, w, k, s, s2, p, ceil)| Pool2dGeom {
            batch: n,
            channels: c,
            in_h: h,
            in_w: w,
            kernel_h: k,
            kernel_w: k.clamp(1, 2),
            stride_h: s,
            stride_w: s2,
            pad_h: p,
            pad_w: 0,
            ceil_mode: ceil,
        })
        .prop_filter("valid geometry", |g| g.validate().is_ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Forward exact for max, 1e-6 rel for average; gradients `Tolerance::GRAD` (h = 1e-3).
    #[test]
    fn pooling_matches_reference(g in geom(), threads in 1usize..3, seed in any::<u64>()) {
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let x = random_distinct_vec(seed, g.input_len(), 0.01);
        let dy = random_vec(seed ^ 4, g.output_len(), 1.0);
        let xd = to_f64(&x);
        let dyd = to_f64(&dy);
        for max in [true, false] {
            let mut y = vec![f32::NAN; g.output_len()];
            let mut dx = vec![f32::NAN; g.input_len()];
            if max {
                be.max_pool_forward(&g, View::whole(&x), ViewMut::whole(&mut y)).unwrap();
                be.max_pool_backward(&g, View::whole(&x), View::whole(&y), View::whole(&dy), ViewMut::whole(&mut dx)).unwrap();
            } else {
                be.avg_pool_forward(&g, View::whole(&x), ViewMut::whole(&mut y)).unwrap();
                be.avg_pool_backward(&g, View::whole(&dy), ViewMut::whole(&mut dx)).unwrap();
            }
            let tol = if max { Tolerance::EXACT } else { Tolerance::new(1e-6, 1e-7) };
            assert_close(&y, &pool_ref(&g, &xd, max), tol, &format!("forward max={max} {g:?}"));
            let fdx = finite_difference(&xd, 1e-3, |v| dot(&dyd, &pool_ref(&g, v, max)));
            assert_close(&dx, &fdx, Tolerance::GRAD, &format!("dx max={max} {g:?}"));
        }
    }
}

#[test]
fn output_sizes() {
    // LeNet (Caffe ceil mode): 24 -> 12, 8 -> 4; ceil mode with a partial last window.
    let mut g = Pool2dGeom::square(1, 1, (24, 24), 2, 2, 0);
    assert_eq!((g.out_h(), g.out_w()), (12, 12));
    g.ceil_mode = true;
    g.in_h = 7;
    assert_eq!(g.out_h(), 4);
    g.ceil_mode = false;
    assert_eq!(g.out_h(), 3);
    let gl = Pool2dGeom::global(2, 64, (8, 8));
    assert_eq!((gl.out_h(), gl.out_w()), (1, 1));
    // ResNet-50 stem max pool 3x3/2 pad 1: 112 -> 56.
    assert_eq!(Pool2dGeom::square(1, 64, (112, 112), 3, 2, 1).out_h(), 56);
}

#[test]
fn global_average_pool_is_the_mean() {
    let be = CpuBackend::new(0);
    let g = Pool2dGeom::global(1, 2, (2, 2));
    let x = vec![1.0, 2.0, 3.0, 4.0, -1.0, -1.0, 5.0, 1.0];
    let mut y = vec![0.0; 2];
    be.avg_pool_forward(&g, View::whole(&x), ViewMut::whole(&mut y)).unwrap();
    assert_eq!(y, vec![2.5, 1.0]);
}

#[test]
fn pool_bad_geometry_is_an_error() {
    assert!(Pool2dGeom::square(1, 1, (4, 4), 2, 2, 2).validate().is_err());
    assert!(Pool2dGeom::square(1, 1, (4, 4), 0, 2, 0).validate().is_err());
}
