//! pooling on every backend: forward vs naive f64, backward vs central finite differences
//! (max pooling on inputs with distinct values far apart, so no window's arg-max changes
//! within ±h), against the CPU on larger shapes.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::Pool2dGeom;
use crate::prelude::*;
use crate::testing::{
    GPU_TOLERANCE, Tolerance, assert_close, assert_close_f32, dot, download, finite_difference, nan_buffer,
    proptest_config, random_distinct_vec, random_vec, to_f64, upload,
};

/// Naive pooling in f64 (`max` or average over in-bounds elements).
pub fn pool_ref(g: &Pool2dGeom, x: &[f64], max: bool) -> Vec<f64> {
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

/// Forward and backward passes of max (`max`) or average pooling: `(y, dx)`.
fn passes<B: Backend>(be: &B, g: &Pool2dGeom, x: &[f32], dy: &[f32], max: bool) -> (Vec<f32>, Vec<f32>) {
    let (xb, dyb) = (upload(be, x), upload(be, dy));
    let mut y = nan_buffer(be, g.output_len());
    let mut dx = nan_buffer(be, g.input_len());
    if max {
        be.max_pool_forward(g, View::whole(&xb), ViewMut::whole(&mut y)).unwrap();
        be.max_pool_backward(g, View::whole(&xb), View::whole(&y), View::whole(&dyb), ViewMut::whole(&mut dx)).unwrap();
    } else {
        be.avg_pool_forward(g, View::whole(&xb), ViewMut::whole(&mut y)).unwrap();
        be.avg_pool_backward(g, View::whole(&dyb), ViewMut::whole(&mut dx)).unwrap();
    }
    (download(be, &y), download(be, &dx))
}

/// Forward exact for max, 1e-6 rel for average; gradients `Tolerance::GRAD` (h = 1e-3).
pub fn pooling_matches_reference<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(64), |(g in geom(), seed in any::<u64>())| {
        let x = random_distinct_vec(seed, g.input_len(), 0.01);
        let dy = random_vec(seed ^ 4, g.output_len(), 1.0);
        let xd = to_f64(&x);
        let dyd = to_f64(&dy);
        for max in [true, false] {
            let (y, dx) = passes(be, &g, &x, &dy, max);
            let tol = if max { Tolerance::EXACT } else { Tolerance::new(1e-6, 1e-7).for_backend::<B>() };
            assert_close(&y, &pool_ref(&g, &xd, max), tol, &format!("forward max={max} {g:?}"));
            let fdx = finite_difference(&xd, 1e-3, |v| dot(&dyd, &pool_ref(&g, v, max)));
            assert_close(&dx, &fdx, Tolerance::GRAD.for_backend::<B>(), &format!("dx max={max} {g:?}"));
        }
    });
}

fn large_geom() -> impl Strategy<Value = Pool2dGeom> {
    (1usize..4, 1usize..9, 1usize..20, 1usize..20, 1usize..5, 1usize..4, 0usize..2, any::<bool>())
        .prop_map(|(n, c, h, w, k, s, p, ceil)| Pool2dGeom {
            batch: n,
            channels: c,
            in_h: h,
            in_w: w,
            kernel_h: k,
            kernel_w: k,
            stride_h: s,
            stride_w: s,
            pad_h: p,
            pad_w: p,
            ceil_mode: ceil,
        })
        .prop_filter("valid", |g| g.validate().is_ok())
}

fn matches_cpu<B: Backend>(be: &B, max: bool) {
    let cpu = CpuBackend::new(0);
    let kind = if max { "max" } else { "avg" };
    proptest!(ProptestConfig::with_cases(24), |(g in large_geom(), seed in any::<u64>())| {
        let x = random_distinct_vec(seed, g.input_len(), 1e-3);
        let dy = random_vec(seed ^ 1, g.output_len(), 1.0);
        let got = passes(be, &g, &x, &dy, max);
        let want = passes(&cpu, &g, &x, &dy, max);
        assert_close_f32(&got.0, &want.0, GPU_TOLERANCE, &format!("{kind} pool forward {g:?}"));
        assert_close_f32(&got.1, &want.1, GPU_TOLERANCE, &format!("{kind} pool backward {g:?}"));
    });
}

/// Max pooling, forward and backward, within [`GPU_TOLERANCE`] of the CPU.
pub fn max_pool_matches_cpu<B: Backend>(be: &B) {
    matches_cpu(be, true);
}

/// Average pooling, forward and backward, within [`GPU_TOLERANCE`] of the CPU.
pub fn avg_pool_matches_cpu<B: Backend>(be: &B) {
    matches_cpu(be, false);
}

/// Global average pooling of a 2 × 2 image per channel yields each channel's mean.
pub fn global_average_pool_is_the_mean<B: Backend>(be: &B) {
    let g = Pool2dGeom::global(1, 2, (2, 2));
    let x = upload(be, &[1.0, 2.0, 3.0, 4.0, -1.0, -1.0, 5.0, 1.0]);
    let mut y = nan_buffer(be, 2);
    be.avg_pool_forward(&g, View::whole(&x), ViewMut::whole(&mut y)).unwrap();
    assert_eq!(download(be, &y), vec![2.5, 1.0]);
}

crate::test_backends! {
    pooling_matches_reference: [cpu, cpu_threads, emu, cuda],
    max_pool_matches_cpu: [cpu_threads, emu, cuda],
    avg_pool_matches_cpu: [cpu_threads, emu, cuda],
    global_average_pool_is_the_mean,
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
fn pool_bad_geometry_is_an_error() {
    assert!(Pool2dGeom::square(1, 1, (4, 4), 2, 2, 2).validate().is_err());
    assert!(Pool2dGeom::square(1, 1, (4, 4), 0, 2, 0).validate().is_err());
}
