//! conv2d on every backend (and on a GPU with and without cuDNN): forward against a naive
//! f64 loop, backward (data and params) against central finite differences of that loop in
//! f64, against the CPU on larger shapes; on the CPU also threaded against single-threaded,
//! both GEMM crates, and the im2col fast path.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::Conv2dGeom;
use crate::prelude::*;
use crate::testing::{
    GPU_TOLERANCE, Tolerance, assert_close, assert_close_f32, dot, download, finite_difference, nan_buffer,
    proptest_config, random_vec, to_f64, upload,
};

/// Naive direct convolution in f64.
pub fn conv_ref(g: &Conv2dGeom, x: &[f64], p: &[f64]) -> Vec<f64> {
    let (oh, ow) = (g.out_h(), g.out_w());
    let mut y = vec![0.0; g.output_len()];
    for n in 0..g.batch {
        for co in 0..g.out_channels {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut s = if g.bias { p[g.weight_len() + co] } else { 0.0 };
                    for ci in 0..g.in_channels {
                        for ki in 0..g.kernel_h {
                            for kj in 0..g.kernel_w {
                                let iy = (oy * g.stride_h + ki) as isize - g.pad_h as isize;
                                let ix = (ox * g.stride_w + kj) as isize - g.pad_w as isize;
                                if iy < 0 || ix < 0 || iy >= g.in_h as isize || ix >= g.in_w as isize {
                                    continue;
                                }
                                let xv = x[((n * g.in_channels + ci) * g.in_h + iy as usize) * g.in_w + ix as usize];
                                let wv = p[((co * g.in_channels + ci) * g.kernel_h + ki) * g.kernel_w + kj];
                                s += xv * wv;
                            }
                        }
                    }
                    y[((n * g.out_channels + co) * oh + oy) * ow + ox] = s;
                }
            }
        }
    }
    y
}

fn geom() -> impl Strategy<Value = Conv2dGeom> {
    (1usize..4, 1usize..5, 1usize..9, 1usize..9, 1usize..5, 1usize..4, 1usize..4, 1usize..4, 0usize..3, any::<bool>())
        .prop_map(|(n, ci, h, w, co, kh, kw, s, p, bias)| Conv2dGeom {
            batch: n,
            in_channels: ci,
            in_h: h,
            in_w: w,
            out_channels: co,
            kernel_h: kh,
            kernel_w: kw,
            stride_h: s,
            stride_w: if s > 1 { s - 1 } else { 1 },
            pad_h: p,
            pad_w: p.min(1),
            bias,
        })
        .prop_filter("valid geometry", |g| g.validate().is_ok())
}

/// The three passes on a backend, outputs and workspace poisoned with NaNs first.
pub struct Outputs {
    /// Forward output, `output_len()` values (NCHW).
    pub y: Vec<f32>,
    /// Gradient with respect to the input, `input_len()` values.
    pub dx: Vec<f32>,
    /// Gradient with respect to the parameters (weights, then bias), `params_len()` values.
    pub dp: Vec<f32>,
}

/// Random operands of `g` drawn from `seed`: the input and `dy` within ±1, the parameters
/// within ±0.5.
pub fn operands(g: &Conv2dGeom, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    (random_vec(seed, g.input_len(), 1.0), random_vec(seed ^ 7, g.params_len(), 0.5), random_vec(seed ^ 9, g.output_len(), 1.0))
}

/// Runs forward, backward-data and backward-params of `g` on `be`.
pub fn run<B: Backend>(be: &B, g: &Conv2dGeom, x: &[f32], p: &[f32], dy: &[f32]) -> Outputs {
    let (xb, pb, dyb) = (upload(be, x), upload(be, p), upload(be, dy));
    // Poison outputs and workspace: every op must overwrite what it writes.
    let mut ws = nan_buffer(be, be.conv2d_workspace_len(g));
    let mut y = nan_buffer(be, g.output_len());
    let mut dx = nan_buffer(be, g.input_len());
    let mut dp = nan_buffer(be, g.params_len());
    be.conv2d_forward(g, View::whole(&xb), View::whole(&pb), ViewMut::whole(&mut y), ViewMut::whole(&mut ws)).unwrap();
    be.conv2d_backward_data(g, View::whole(&dyb), View::whole(&pb), ViewMut::whole(&mut dx), ViewMut::whole(&mut ws))
        .unwrap();
    be.conv2d_backward_params(g, View::whole(&xb), View::whole(&dyb), ViewMut::whole(&mut dp), ViewMut::whole(&mut ws))
        .unwrap();
    Outputs { y: download(be, &y), dx: download(be, &dx), dp: download(be, &dp) }
}

/// Forward vs naive f64 (bound 1e-5 rel + 1e-5 abs); backward vs central differences of the
/// f64 reference with h = 1e-3 (bound 2e-3 rel + 2e-4 abs: f32 accumulation against an
/// O(h^2)-exact difference of a linear function); plus the GPU bound off the CPU.
pub fn conv2d_matches_reference_and_finite_differences<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(48), |(g in geom(), seed in any::<u64>())| {
        let (x, p, dy) = operands(&g, seed);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        let out = run(be, &g, &x, &p, &dy);
        assert_close(&out.y, &conv_ref(&g, &xd, &pd), Tolerance::new(1e-5, 1e-5).for_backend::<B>(), &format!("forward {g:?}"));
        let fdx = finite_difference(&xd, 1e-3, |xv| dot(&dyd, &conv_ref(&g, xv, &pd)));
        assert_close(&out.dx, &fdx, Tolerance::GRAD.for_backend::<B>(), &format!("dx {g:?}"));
        let fdp = finite_difference(&pd, 1e-3, |pv| dot(&dyd, &conv_ref(&g, &xd, pv)));
        assert_close(&out.dp, &fdp, Tolerance::GRAD.for_backend::<B>(), &format!("dparams {g:?}"));
    });
}

/// Real layer shapes, including a strided 3x3 and a 1x1 projection, forward vs reference.
pub fn conv2d_lenet_and_resnet_layer_shapes<B: Backend>(be: &B) {
    let shapes = [
        Conv2dGeom::square(2, 1, (28, 28), 6, 5, 1, 0, true),
        Conv2dGeom::square(2, 16, (32, 32), 32, 3, 2, 1, false),
        Conv2dGeom::square(2, 16, (32, 32), 32, 1, 2, 0, false),
        Conv2dGeom::square(2, 8, (8, 8), 8, 1, 1, 0, true),
    ];
    for g in shapes {
        let x = random_vec(1, g.input_len(), 1.0);
        let p = random_vec(2, g.params_len(), 0.3);
        let dy = random_vec(3, g.output_len(), 1.0);
        let out = run(be, &g, &x, &p, &dy);
        let tol = Tolerance::new(1e-5, 1e-4).for_backend::<B>();
        assert_close(&out.y, &conv_ref(&g, &to_f64(&x), &to_f64(&p)), tol, &format!("{g:?}"));
    }
}

fn large_geom() -> impl Strategy<Value = Conv2dGeom> {
    (
        1usize..5,
        1usize..17,
        1usize..17,
        1usize..17,
        1usize..17,
        prop_oneof![Just(1usize), Just(3), Just(5), 1usize..8],
        1usize..3,
        0usize..3,
        any::<bool>(),
    )
        .prop_map(|(n, ci, h, w, co, k, s, p, bias)| Conv2dGeom {
            batch: n,
            in_channels: ci,
            in_h: h,
            in_w: w,
            out_channels: co,
            kernel_h: k,
            kernel_w: k,
            stride_h: s,
            stride_w: s,
            pad_h: p,
            pad_w: p,
            bias,
        })
        .prop_filter("valid", |g| g.validate().is_ok())
}

/// All three passes within [`GPU_TOLERANCE`] of the CPU, up to 4 images of 16 channels of
/// 16 × 16 and 7 × 7 kernels.
pub fn conv2d_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(24), |(g in large_geom(), seed in any::<u64>())| {
        let x = random_vec(seed, g.input_len(), 1.0);
        let p = random_vec(seed ^ 1, g.params_len(), 0.5);
        let dy = random_vec(seed ^ 2, g.output_len(), 1.0);
        let got = run(be, &g, &x, &p, &dy);
        let want = run(&cpu, &g, &x, &p, &dy);
        assert_close_f32(&got.y, &want.y, GPU_TOLERANCE, &format!("conv2d forward {g:?}"));
        assert_close_f32(&got.dx, &want.dx, GPU_TOLERANCE, &format!("conv2d backward data {g:?}"));
        assert_close_f32(&got.dp, &want.dp, GPU_TOLERANCE, &format!("conv2d backward params {g:?}"));
    });
}

/// A short output or workspace, a kernel larger than the padded input and a zero stride are
/// errors naming the problem, not panics.
pub fn conv2d_bad_shapes_are_errors<B: Backend>(be: &B) {
    let g = Conv2dGeom::square(1, 2, (5, 5), 3, 3, 1, 1, true);
    let x = upload(be, &vec![0.0; g.input_len()]);
    let p = upload(be, &vec![0.0; g.params_len()]);
    let mut y = nan_buffer(be, g.output_len() - 1);
    let mut ws = nan_buffer(be, be.conv2d_workspace_len(&g));
    let e = be
        .conv2d_forward(&g, View::whole(&x), View::whole(&p), ViewMut::whole(&mut y), ViewMut::whole(&mut ws))
        .unwrap_err()
        .to_string();
    assert!(e.contains("conv2d_forward") && e.contains("output"), "{e}");
    let big = Conv2dGeom::square(1, 2, (2, 2), 3, 5, 1, 0, false);
    assert!(big.validate().unwrap_err().to_string().contains("larger than the padded input"));
    let zero = Conv2dGeom { stride_h: 0, ..g };
    assert!(zero.validate().is_err());
    let mut small_ws = nan_buffer(be, 0);
    let g3 = Conv2dGeom::square(1, 2, (5, 5), 3, 3, 1, 1, true);
    let mut y3 = nan_buffer(be, g3.output_len());
    let e = be
        .conv2d_forward(&g3, View::whole(&x), View::whole(&p), ViewMut::whole(&mut y3), ViewMut::whole(&mut small_ws))
        .unwrap_err()
        .to_string();
    assert!(e.contains("workspace"), "{e}");
}

crate::test_backends! {
    conv2d_matches_reference_and_finite_differences: [cpu, emu, cuda, cuda_no_cudnn],
    conv2d_lenet_and_resnet_layer_shapes: [cpu_threads, emu, cuda, cuda_no_cudnn],
    conv2d_matches_cpu: [cpu_threads, emu, cuda, cuda_no_cudnn],
    conv2d_bad_shapes_are_errors,
}

/// The CPU backend with the other GEMM crate.
#[test]
fn conv2d_with_the_gemm_crate_matches_reference_and_finite_differences() {
    conv2d_matches_reference_and_finite_differences(&CpuBackend::new(0).with_gemm(crate::CpuGemm::Gemm));
}

/// The GPU fallback with a tiny im2col budget on the emulator: several chunks per batch, one
/// image per chunk at the limit.
#[test]
fn conv2d_matches_cpu_in_several_chunks_emu() {
    match crate::cuda::emu::emu_backend_with_col_budget(300) {
        Ok(Some(be)) => conv2d_matches_cpu(&be),
        Ok(None) => {
            println!("conv2d_matches_cpu_in_several_chunks_emu: skipped: no C++ compiler for the CUDA kernel emulator")
        }
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Splitting the batch over threads gives the same forward and data gradient bit for bit,
    /// and the same weight gradient up to summation order.
    #[test]
    fn conv2d_threads_agree(g in geom(), threads in 2usize..4, seed in any::<u64>()) {
        let (x, p, dy) = operands(&g, seed);
        let one = run(&CpuBackend::new(0), &g, &x, &p, &dy);
        let many = run(&CpuBackend::with_threads(0, threads).unwrap(), &g, &x, &p, &dy);
        prop_assert_eq!(&one.y, &many.y);
        prop_assert_eq!(&one.dx, &many.dx);
        assert_close(&many.dp, &to_f64(&one.dp), Tolerance::new(1e-5, 1e-5), "dparams");
    }
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// The block-copy im2col/col2im of same-size stride-1 convolutions equal the general
    /// segment-by-segment ones exactly.
    #[test]
    fn same_size_fast_path_equals_the_general_path(c in 1usize..4, h in 1usize..9, w in 1usize..9,
                                                   k in prop_oneof![Just(1usize), Just(3), Just(5)], seed in any::<u64>()) {
        let g = Conv2dGeom { kernel_w: k, pad_w: k / 2, ..Conv2dGeom::square(1, c, (h, w), 2, k, 1, k / 2, false) };
        prop_assume!(g.validate().is_ok() && g.out_h() == h && g.out_w() == w);
        let x = random_vec(seed, g.input_len() , 1.0);
        let n = g.col_rows() * g.col_cols();
        let (mut a, mut b) = (vec![f32::NAN; n], vec![f32::NAN; n]);
        super::cpu::im2col_same(&g, &x, &mut a);
        super::cpu::im2col_general(&g, &x, &mut b);
        prop_assert_eq!(&a, &b);
        let col = random_vec(seed ^ 5, n, 1.0);
        let (mut da, mut db) = (vec![f32::NAN; g.input_len()], vec![0.0; g.input_len()]);
        super::cpu::col2im_same(&g, &mut col.clone(), &mut da);
        super::cpu::col2im_general(&g, &col, &mut db);
        assert_close(&da, &to_f64(&db), Tolerance::new(1e-6, 1e-6), "col2im");
    }
}

/// The weight and bias gradient in f64 straight from the definition (a sum over images and
/// output pixels of `dy * x`), independent of the forward reference.
#[cfg(test)]
fn dparams_ref(g: &Conv2dGeom, x: &[f64], dy: &[f64]) -> Vec<f64> {
    let (oh, ow) = (g.out_h(), g.out_w());
    let mut d = vec![0.0; g.params_len()];
    for n in 0..g.batch {
        for co in 0..g.out_channels {
            for oy in 0..oh {
                for ox in 0..ow {
                    let v = dy[((n * g.out_channels + co) * oh + oy) * ow + ox];
                    if g.bias {
                        d[g.weight_len() + co] += v;
                    }
                    for ci in 0..g.in_channels {
                        for ki in 0..g.kernel_h {
                            for kj in 0..g.kernel_w {
                                let iy = (oy * g.stride_h + ki) as isize - g.pad_h as isize;
                                let ix = (ox * g.stride_w + kj) as isize - g.pad_w as isize;
                                if iy < 0 || ix < 0 || iy >= g.in_h as isize || ix >= g.in_w as isize {
                                    continue;
                                }
                                let xv = x[((n * g.in_channels + ci) * g.in_h + iy as usize) * g.in_w + ix as usize];
                                d[((co * g.in_channels + ci) * g.kernel_h + ki) * g.kernel_w + kj] += v * xv;
                            }
                        }
                    }
                }
            }
        }
    }
    d
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The backward-params window path (no im2col) and the im2col path both match the f64
    /// gradient, on stride-1 shapes with rectangular kernels, unequal padding, odd sizes and
    /// channel counts around the 8-wide transpose blocks, with 1-3 threads and both GEMM
    /// crates.
    #[test]
    fn backward_params_window_matches_the_reference_and_im2col(
        n in 1usize..4, ci in 1usize..20, h in 1usize..20, w in 1usize..20, co in 1usize..20,
        kh in 1usize..6, kw in 1usize..6, ph in 0usize..3, pw in 0usize..3, bias in any::<bool>(),
        threads in 1usize..4, gemm_crate in any::<bool>(), seed in any::<u64>(),
    ) {
        let g = Conv2dGeom {
            batch: n, in_channels: ci, in_h: h, in_w: w, out_channels: co, kernel_h: kh, kernel_w: kw,
            stride_h: 1, stride_w: 1, pad_h: ph, pad_w: pw, bias,
        };
        prop_assume!(g.validate().is_ok() && !g.is_pointwise());
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let be = if gemm_crate { be.with_gemm(crate::CpuGemm::Gemm) } else { be };
        let x = random_vec(seed, g.input_len(), 1.0);
        let dy = random_vec(seed ^ 9, g.output_len(), 1.0);
        let want = dparams_ref(&g, &to_f64(&x), &to_f64(&dy));
        let (window, im2col) = super::cpu::backward_params_both_paths(&be, &g, &x, &dy).unwrap();
        assert_close(&window, &want, Tolerance::new(1e-4, 1e-4), &format!("window {g:?}"));
        assert_close(&im2col, &want, Tolerance::new(1e-4, 1e-4), &format!("im2col {g:?}"));
    }

    /// A negative control for the test above: the f64 gradient of a shifted input (one pixel
    /// to the right) differs from the window path's, so an off-by-one in the window offsets
    /// would be seen.
    #[test]
    fn backward_params_check_sees_a_shifted_input(seed in any::<u64>()) {
        let g = Conv2dGeom::square(2, 3, (9, 9), 4, 3, 1, 1, false);
        let x = random_vec(seed, g.input_len(), 1.0);
        let dy = random_vec(seed ^ 9, g.output_len(), 1.0);
        let mut shifted = to_f64(&x);
        shifted.rotate_right(1);
        let wrong = dparams_ref(&g, &shifted, &to_f64(&dy));
        let (window, _) = super::cpu::backward_params_both_paths(&CpuBackend::new(0), &g, &x, &dy).unwrap();
        let worst = window.iter().zip(&wrong).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max);
        prop_assert!(worst > 1e-2, "a shifted input went unnoticed (max difference {worst})");
    }
}

/// The input gradient in f64 straight from the definition (`dx[iy, ix] += w · dy[oy, ox]` over
/// every tap that reads `x[iy, ix]`), independent of the forward reference.
#[cfg(test)]
fn dx_ref(g: &Conv2dGeom, p: &[f64], dy: &[f64]) -> Vec<f64> {
    let (oh, ow) = (g.out_h(), g.out_w());
    let mut dx = vec![0.0; g.input_len()];
    for n in 0..g.batch {
        for co in 0..g.out_channels {
            for oy in 0..oh {
                for ox in 0..ow {
                    let v = dy[((n * g.out_channels + co) * oh + oy) * ow + ox];
                    for ci in 0..g.in_channels {
                        for ki in 0..g.kernel_h {
                            for kj in 0..g.kernel_w {
                                let iy = (oy * g.stride_h + ki) as isize - g.pad_h as isize;
                                let ix = (ox * g.stride_w + kj) as isize - g.pad_w as isize;
                                if iy < 0 || ix < 0 || iy >= g.in_h as isize || ix >= g.in_w as isize {
                                    continue;
                                }
                                let wv = p[((co * g.in_channels + ci) * g.kernel_h + ki) * g.kernel_w + kj];
                                dx[((n * g.in_channels + ci) * g.in_h + iy as usize) * g.in_w + ix as usize] += wv * v;
                            }
                        }
                    }
                }
            }
        }
    }
    dx
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The direct (no im2col) forward and backward-data passes match the f64 definitions on
    /// stride-1 shapes whose output rows are 8-40 pixels wide (one, two or three rows per
    /// vector of 16 pixels, ragged last vectors), channel counts around the 8-channel weight
    /// blocks, rectangular kernels and unequal padding, with 1-3 threads; where the CPU has
    /// both vector units, the AVX-512 and AVX2 kernels give the same bits.
    #[test]
    fn direct_passes_match_the_reference_and_agree_across_vector_units(
        n in 1usize..3, ci in 1usize..20, h in 1usize..12, w in 8usize..40, co in 1usize..20,
        kh in 1usize..6, kw in 1usize..6, ph in 0usize..3, pw in 0usize..3, bias in any::<bool>(),
        threads in 1usize..4, seed in any::<u64>(),
    ) {
        // Without a vector unit (`CROSSBOW_CPU_ISA=portable`) there is no direct kernel to test.
        if !super::direct::has_kernel() {
            return Ok(());
        }
        let g = Conv2dGeom {
            batch: n, in_channels: ci, in_h: h, in_w: w, out_channels: co, kernel_h: kh, kernel_w: kw,
            stride_h: 1, stride_w: 1, pad_h: ph, pad_w: pw, bias,
        };
        prop_assume!(g.validate().is_ok());
        let fwd = super::direct::Direct::forward(&g);
        prop_assume!(fwd.is_some());
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let (x, p, dy) = operands(&g, seed);
        let out = run(&be, &g, &x, &p, &dy);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        assert_close(&out.y, &conv_ref(&g, &xd, &pd), Tolerance::new(1e-5, 1e-5), &format!("forward {g:?}"));
        assert_close(&out.dx, &dx_ref(&g, &pd, &dyd), Tolerance::new(1e-5, 1e-5), &format!("dx {g:?}"));
        #[cfg(target_arch = "x86_64")]
        if let Some(d) = fwd {
            let taps = kh * kw;
            let bias = g.bias.then(|| &p[g.weight_len()..]);
            let paths = super::direct::run_paths(&d, &x[..g.input_len() / n], |o, c, t| p[(o * ci + c) * taps + t], bias);
            for (name, y) in &paths {
                prop_assert_eq!(y, &out.y[..g.output_len() / n], "{} path {:?}", name, g);
            }
        }
    }

    /// A negative control for the test above: the reference of a kernel shifted by one tap
    /// differs from the direct forward pass, so an off-by-one in the tap offsets or masks
    /// would be seen.
    #[test]
    fn direct_check_sees_a_shifted_kernel(seed in any::<u64>()) {
        // Without a vector unit (`CROSSBOW_CPU_ISA=portable`) there is no direct kernel to test.
        if !super::direct::has_kernel() {
            return Ok(());
        }
        let g = Conv2dGeom::square(1, 3, (16, 16), 8, 3, 1, 1, false);
        prop_assume!(super::direct::Direct::forward(&g).is_some());
        let x = random_vec(seed, g.input_len(), 1.0);
        let p = random_vec(seed ^ 7, g.params_len(), 0.5);
        let out = run(&CpuBackend::new(0), &g, &x, &p, &random_vec(seed ^ 9, g.output_len(), 1.0));
        let mut shifted = to_f64(&p);
        shifted.rotate_right(1);
        let wrong = conv_ref(&g, &to_f64(&x), &shifted);
        let worst = out.y.iter().zip(&wrong).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max);
        prop_assert!(worst > 1e-2, "a shifted kernel went unnoticed (max difference {worst})");
    }
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// The direct forward pass with stride 2 (over the phase-split padded copy) matches the
    /// f64 definition: output rows of 8-32 pixels, odd and even input sizes, 1-5 × 1-5
    /// kernels, padding 0-2, with 1-3 threads; every padded path the CPU has gives the bits
    /// of the one the backend runs.
    #[test]
    fn direct_stride_two_forward_matches_the_reference(
        n in 1usize..3, ci in 1usize..12, oh in 1usize..6, owv in 1usize..5, co in 1usize..20,
        kh in 1usize..6, kw in 1usize..6, ph in 0usize..3, pw in 0usize..3, ex in 0usize..2, ey in 0usize..2,
        bias in any::<bool>(), threads in 1usize..4, seed in any::<u64>(),
    ) {
        let ow = 8 * owv;
        let (hf, wf) = (2 * (oh - 1) + kh + ey, 2 * (ow - 1) + kw + ex);
        prop_assume!(hf > 2 * ph && wf > 2 * pw);
        let g = Conv2dGeom {
            batch: n, in_channels: ci, in_h: hf - 2 * ph, in_w: wf - 2 * pw, out_channels: co, kernel_h: kh,
            kernel_w: kw, stride_h: 2, stride_w: 2, pad_h: ph, pad_w: pw, bias,
        };
        prop_assume!(g.validate().is_ok());
        prop_assert_eq!((g.out_h(), g.out_w()), (oh, ow));
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let (x, p, dy) = operands(&g, seed);
        let out = run(&be, &g, &x, &p, &dy);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        assert_close(&out.y, &conv_ref(&g, &xd, &pd), Tolerance::new(1e-5, 1e-5), &format!("forward {g:?}"));
        assert_close(&out.dx, &dx_ref(&g, &pd, &dyd), Tolerance::new(1e-5, 1e-5), &format!("dx {g:?}"));
        #[cfg(target_arch = "x86_64")]
        if let Some(d) = super::direct::Direct::forward(&g) {
            let taps = kh * kw;
            let bias = g.bias.then(|| &p[g.weight_len()..]);
            let paths = super::direct::run_paths(&d, &x[..g.input_len() / n], |o, c, t| p[(o * ci + c) * taps + t], bias);
            prop_assert!(!paths.is_empty());
            for (name, y) in &paths {
                prop_assert_eq!(y, &out.y[..g.output_len() / n], "{} path {:?}", name, g);
            }
        }
    }
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// The backward-data pass of stride-2 convolutions by phases (four stride-1 direct
    /// convolutions, one per parity class of the input pixels) matches the f64 definition:
    /// odd and even input sizes, 2-5 × 2-5 kernels, padding 0-2, channel counts around the
    /// weight blocks, with 1-3 threads. The input size is the first from the drawn one
    /// (rows, then columns, up to 31 more each) that phases take on this CPU: on AVX2 nearly
    /// every size, on AVX-512 only those whose phases have 8 or a multiple of 16 columns.
    #[test]
    fn stride_two_backward_data_by_phases_matches_the_reference(
        n in 1usize..3, ci in 1usize..14, h0 in 15usize..36, w0 in 15usize..40, co in 1usize..14,
        kh in 2usize..6, kw in 2usize..6, ph in 0usize..3, pw in 0usize..3,
        threads in 1usize..4, seed in any::<u64>(),
    ) {
        // Without a vector unit (`CROSSBOW_CPU_ISA=portable`) there is no direct kernel to test.
        if !super::direct::has_kernel() {
            return Ok(());
        }
        let geom = |h, w| Conv2dGeom {
            batch: n, in_channels: ci, in_h: h, in_w: w, out_channels: co, kernel_h: kh, kernel_w: kw,
            stride_h: 2, stride_w: 2, pad_h: ph, pad_w: pw, bias: false,
        };
        let taken = (0..32).flat_map(|i| (0..32).map(move |j| (h0 + i, w0 + j))).map(|(h, w)| geom(h, w))
            .find(|g| g.validate().is_ok() && super::phases::Phases::of(g).is_some());
        prop_assume!(taken.is_some());
        let Some(g) = taken else { unreachable!() };
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let (x, p, dy) = operands(&g, seed);
        let out = run(&be, &g, &x, &p, &dy);
        assert_close(&out.dx, &dx_ref(&g, &to_f64(&p), &to_f64(&dy)), Tolerance::new(1e-5, 1e-5), &format!("dx {g:?}"));
    }
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Strided 1×1 convolutions (stride 2 and 3, odd and even sizes, 1-80 output pixels:
    /// whole vectors and tails, channel counts around the 3×3 tiles, with and without bias),
    /// their weight gradient by the product along the subsampled pixels, match the f64
    /// definitions in all three passes, with 1-3 threads.
    #[test]
    fn strided_pointwise_convolutions_match_the_reference(
        n in 1usize..3, ci in 1usize..14, oh in 1usize..5, ow in 1usize..21, co in 1usize..14,
        s in 2usize..4, ey in 0usize..2, ex in 0usize..2, bias in any::<bool>(),
        threads in 1usize..4, seed in any::<u64>(),
    ) {
        // Without a vector unit (`CROSSBOW_CPU_ISA=portable`) there is no direct kernel to test.
        if !super::direct::has_kernel() {
            return Ok(());
        }
        let (h, w) = (s * (oh - 1) + 1 + ey, s * (ow - 1) + 1 + ex);
        let g = Conv2dGeom {
            batch: n, in_channels: ci, in_h: h, in_w: w, out_channels: co, kernel_h: 1, kernel_w: 1,
            stride_h: s, stride_w: s, pad_h: 0, pad_w: 0, bias,
        };
        prop_assert!(g.validate().is_ok());
        prop_assert_eq!((g.out_h(), g.out_w()), (oh, ow));
        prop_assume!(super::projection::Projection::of(&g).is_some());
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let (x, p, dy) = operands(&g, seed);
        let out = run(&be, &g, &x, &p, &dy);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        assert_close(&out.y, &conv_ref(&g, &xd, &pd), Tolerance::new(1e-5, 1e-5), &format!("forward {g:?}"));
        assert_close(&out.dx, &dx_ref(&g, &pd, &dyd), Tolerance::new(1e-5, 1e-5), &format!("dx {g:?}"));
        assert_close(&out.dp, &dparams_ref(&g, &xd, &dyd), Tolerance::new(1e-4, 1e-4), &format!("dparams {g:?}"));
    }
}

/// All three passes of `g` on 2 threads against the f64 definitions.
#[cfg(test)]
fn check_all_passes_against_the_reference(g: &Conv2dGeom) {
    let be = CpuBackend::with_threads(0, 2).unwrap();
    let x = random_vec(1, g.input_len(), 1.0);
    let p = random_vec(2, g.params_len(), 0.3);
    let dy = random_vec(3, g.output_len(), 1.0);
    let out = run(&be, g, &x, &p, &dy);
    let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
    assert_close(&out.y, &conv_ref(g, &xd, &pd), Tolerance::new(1e-5, 1e-4), &format!("forward {g:?}"));
    assert_close(&out.dx, &dx_ref(g, &pd, &dyd), Tolerance::new(1e-5, 1e-4), &format!("dx {g:?}"));
    assert_close(&out.dp, &dparams_ref(g, &xd, &dyd), Tolerance::new(1e-4, 1e-4), &format!("dparams {g:?}"));
}

/// The strided ResNet layers (3×3 stride 2 into 16 and 8 pixels) run the direct forward
/// kernel and the backward-data pass by phases on both vector units, the 1×1 stride-2
/// projections their pointwise direct passes, and all match the f64 definitions in all
/// three passes.
#[test]
fn strided_resnet_shapes_run_direct_forward_and_match_the_reference() {
    let shapes = [
        Conv2dGeom::square(2, 16, (32, 32), 32, 3, 2, 1, false),
        Conv2dGeom::square(2, 32, (16, 16), 64, 3, 2, 1, false),
        Conv2dGeom::square(2, 16, (32, 32), 32, 1, 2, 0, false),
        Conv2dGeom::square(2, 32, (16, 16), 64, 1, 2, 0, false),
    ];
    for g in shapes {
        if super::direct::has_kernel() {
            let d = super::direct::Direct::forward(&g);
            let phases = super::phases::Phases::of(&g);
            if g.kernel_h == 3 {
                assert!(d.and_then(|d| d.padded_rows()).is_some(), "{g:?}: {d:?}");
                assert!(phases.is_some(), "{g:?}");
            } else {
                assert!(d.is_none() && phases.is_none(), "{g:?}: {d:?} {phases:?}");
                assert!(super::projection::Projection::of(&g).is_some(), "{g:?}");
            }
        }
        check_all_passes_against_the_reference(&g);
    }
}

/// The ResNet layer shapes (3×3, padding 1, 16/32/64 channels at 32/16/8 pixels, the 3-channel
/// stem) take the direct path where the CPU has a vector unit for it, and match the f64
/// definitions in all three passes.
#[test]
fn resnet_shapes_run_direct_and_match_the_reference() {
    let shapes = [
        Conv2dGeom::square(2, 3, (32, 32), 16, 3, 1, 1, false),
        Conv2dGeom::square(2, 16, (32, 32), 16, 3, 1, 1, false),
        Conv2dGeom::square(2, 32, (16, 16), 32, 3, 1, 1, false),
        Conv2dGeom::square(2, 64, (8, 8), 64, 3, 1, 1, true),
    ];
    for g in shapes {
        if super::direct::has_kernel() {
            let (fwd, bwd) = (super::direct::Direct::forward(&g), super::direct::Direct::backward_data(&g));
            assert!(fwd.is_some() && bwd.is_some(), "{g:?}");
            assert!(super::direct::ParamsDirect::of(&g).is_some(), "{g:?}");
            // The unmasked kernel over a padded copy, on both vector units (AVX-512: rows of
            // 32 and 16, pairs of rows of 8; AVX2: vectors of 8 pixels of one row).
            use super::direct::Rows;
            let want = if super::direct::has_avx512() { [Rows::Whole, Rows::Pairs] } else { [Rows::Eights; 2] };
            for d in [fwd, bwd] {
                let rows = d.and_then(|d| d.padded_rows());
                assert!(rows.is_some_and(|r| want.contains(&r)), "{g:?}: {rows:?}");
            }
        }
        check_all_passes_against_the_reference(&g);
    }
}

/// LeNet-5's 28-pixel rows (the first layer's forward pass) and 14-pixel rows (the second
/// layer's backward-data pass) take a ragged padded kernel on every CPU with AVX2: vectors of
/// 16 with AVX-512 (rows rounded up to 32 and 16), of 8 without; the second layer's 10-pixel
/// forward rows take the AVX-512 ragged kernel (rounded up to 16) and without AVX-512 the
/// kernel with the 16 output channels in the lanes (8-pixel vectors would waste a third of
/// each row); the first layer's weight gradient takes AVX2's vectors of 8 output channels.
#[test]
fn lenet_rows_take_the_ragged_kernel_on_every_cpu_with_avx2() {
    use super::direct::{Direct, Rows};
    let conv1 = Conv2dGeom::square(2, 1, (28, 28), 6, 5, 1, 2, true);
    let conv2 = Conv2dGeom::square(2, 6, (14, 14), 16, 5, 1, 0, true);
    if crate::cpu::simd::has_avx2() && super::direct::has_kernel() {
        let rows = |d: Option<Direct>| d.and_then(|d| d.padded_rows());
        let ragged = if super::direct::has_avx512() { Rows::Ragged16 } else { Rows::Ragged };
        assert_eq!(rows(Direct::forward(&conv1)), Some(ragged));
        assert_eq!(rows(Direct::backward_data(&conv2)), Some(ragged));
        assert!(Direct::forward(&conv2).is_some());
        let conv2_rows = super::direct::has_avx512().then_some(Rows::Ragged16);
        assert_eq!(rows(Direct::forward(&conv2)), conv2_rows);
        assert_eq!(Direct::forward(&conv2).map(|d| d.channels()), Some(!super::direct::has_avx512()));
        // The first layer's weight gradient in vectors of 8 channels (6 used) on every such
        // CPU, not 16 where AVX-512 is present.
        let cop = |g: &Conv2dGeom| super::direct::ParamsDirect::of(g).map(|p| p.cop);
        assert_eq!(cop(&conv1), Some(8));
        assert_eq!(cop(&conv2), Some(16));
    }
    check_all_passes_against_the_reference(&conv1);
    check_all_passes_against_the_reference(&conv2);
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// The weight gradient without im2col (3×3 kernels a third of the time, 5×5 a third, else
    /// 1-5 × 1-5; stride 1 and 2, padding 0-2, 1-40 output channels: whole and partial
    /// vectors, channel counts that leave 1 or 2 in the last block of 3) matches the f64
    /// definition with 1-3 threads; the AVX-512 and AVX2 kernels, and the general kernel
    /// that their 3×3 and 5×5 tiles replace, give the same bits.
    #[test]
    fn direct_weight_gradient_matches_the_reference_and_agrees_across_vector_units(
        n in 1usize..4, ci in 1usize..9, h in 3usize..14, w in 3usize..14, co in 1usize..40,
        k in prop_oneof![Just((3usize, 3usize)), Just((5usize, 5usize)), (1usize..6, 1usize..6)],
        s in 1usize..3, p in 0usize..3, bias in any::<bool>(), threads in 1usize..4, seed in any::<u64>(),
    ) {
        // Without a vector unit (`CROSSBOW_CPU_ISA=portable`) there is no direct kernel to test.
        if !super::direct::has_kernel() {
            return Ok(());
        }
        let g = Conv2dGeom {
            batch: n, in_channels: ci, in_h: h, in_w: w, out_channels: co, kernel_h: k.0, kernel_w: k.1,
            stride_h: s, stride_w: s, pad_h: p, pad_w: p.min(1), bias,
        };
        prop_assume!(g.validate().is_ok() && !g.is_pointwise());
        let pd = super::direct::ParamsDirect::of(&g);
        prop_assume!(pd.is_some());
        let be = CpuBackend::with_threads(0, threads).unwrap();
        let x = random_vec(seed, g.input_len(), 1.0);
        let prm = random_vec(seed ^ 7, g.params_len(), 0.5);
        let dy = random_vec(seed ^ 9, g.output_len(), 1.0);
        let out = run(&be, &g, &x, &prm, &dy);
        let want = dparams_ref(&g, &to_f64(&x), &to_f64(&dy));
        assert_close(&out.dp, &want, Tolerance::new(1e-4, 1e-4), &format!("dparams {g:?}"));
        #[cfg(target_arch = "x86_64")]
        if let Some(pd) = pd {
            // One image through each vector unit's kernel.
            let (hp, wp) = pd.padded();
            let mut xp = vec![0.0; pd.xp_len()];
            for c in 0..ci {
                for y in 0..h {
                    let d0 = (c * hp + y + g.pad_h) * wp + g.pad_w;
                    xp[d0..d0 + w].copy_from_slice(&x[(c * h + y) * w..(c * h + y + 1) * w]);
                }
            }
            let pixels = g.col_cols();
            let mut dyt = vec![0.0; pd.dyt_len()];
            for o in 0..g.out_channels {
                for q in 0..pixels {
                    dyt[q * pd.cop + o] = dy[o * pixels + q];
                }
            }
            let paths = super::direct::params_paths(&pd, &xp, &dyt);
            prop_assert!(!paths.is_empty());
            for (name, got) in &paths[1..] {
                prop_assert_eq!(got, &paths[0].1, "{} against {} {:?}", name, paths[0].0, g);
            }
        }
    }
}

/// A layer's segment plan is made once per thread and geometry, then shared: the same plan
/// for the same geometry, another for another (rows of 9 and 17 pixels, 3 output channels, take
/// the masked kernels on every CPU).
#[test]
fn masked_kernel_plans_are_made_once_per_geometry() {
    if !super::direct::has_kernel() {
        return;
    }
    let a = Conv2dGeom::square(2, 6, (13, 13), 3, 5, 1, 0, true);
    let b = Conv2dGeom::square(2, 6, (21, 21), 3, 5, 1, 0, true);
    let (da, db) = (super::direct::Direct::forward(&a).unwrap(), super::direct::Direct::forward(&b).unwrap());
    assert_eq!((da.padded_rows(), db.padded_rows(), da.channels(), db.channels()), (None, None, false, false));
    let (p1, p2, q) = (da.plan(), da.plan(), db.plan());
    assert!(std::sync::Arc::ptr_eq(&p1, &p2));
    assert!(!std::sync::Arc::ptr_eq(&p1, &q));
}

/// The Winograd path's bound against the f64 definition for `c` input channels: its
/// transforms reassociate the sum, so the absolute error grows with the terms summed
/// (measured up to 6.5e-5 on outputs of scale ~8 at 64 channels, this bound 2.9e-4 there;
/// the direct kernel is held to 1e-5).
#[cfg(test)]
fn winograd_tolerance(c: usize) -> Tolerance {
    Tolerance::new(1e-5, 5e-7 * 9.0 * c as f64)
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]
    /// Wide 3×3 layers (at least 32 channels in and out) take the Winograd path where AVX2 or
    /// AVX-512 runs on batches of 16 or more, and its forward and backward-data passes match
    /// the f64 definitions on random sizes (images 1-10 pixels a side, so edge tiles are
    /// partial; batches of 16-60, so groups of 8 and of 16 lanes, the last often partial),
    /// with 2-4 threads (some idle where the groups are fewer); several threads give the bits
    /// of one.
    #[test]
    fn winograd_forward_and_backward_data_match_the_reference(
        n in 16usize..61, c in 32usize..72, co in 32usize..72, h in 1usize..11, w in 1usize..11,
        bias in any::<bool>(), threads in 2usize..5, seed in any::<u64>(),
    ) {
        let g = Conv2dGeom {
            batch: n, in_channels: c, in_h: h, in_w: w, out_channels: co, kernel_h: 3, kernel_w: 3,
            stride_h: 1, stride_w: 1, pad_h: 1, pad_w: 1, bias,
        };
        prop_assume!(g.validate().is_ok());
        if super::winograd::Winograd::forward(&g).is_none() {
            eprintln!("skipped: the Winograd path needs AVX2 (and {} unset or on)", super::winograd::WINOGRAD_ENV);
            return Ok(());
        }
        prop_assert!(super::winograd::Winograd::backward_data(&g).is_some());
        let (x, p, dy) = operands(&g, seed);
        let out = run(&CpuBackend::with_threads(0, threads).unwrap(), &g, &x, &p, &dy);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        assert_close(&out.y, &conv_ref(&g, &xd, &pd), winograd_tolerance(c), &format!("forward {g:?}"));
        assert_close(&out.dx, &dx_ref(&g, &pd, &dyd), winograd_tolerance(co), &format!("dx {g:?}"));
        let one = run(&CpuBackend::new(0), &g, &x, &p, &dy);
        prop_assert_eq!(&one.y, &out.y, "forward, 1 thread against {}", threads);
        prop_assert_eq!(&one.dx, &out.dx, "dx, 1 thread against {}", threads);
    }
}

/// Which 3×3 layers take the Winograd path: the CIFAR ResNets' 64- and 32-channel stages
/// (forward and backward-data) at batches of 16 or more (groups of 16 lanes with AVX-512 from
/// batch 32, of 8 lanes below that and on AVX2), not smaller ones, and their weight gradient
/// at any batch; not the 16-channel stage, not strided or unpadded ones.
#[test]
fn winograd_takes_the_wide_resnet_layers_only() {
    use super::winograd::{AVX2_LANES, LANES, Winograd};
    use super::winograd_params::WinogradParams;
    let on = crate::cpu::simd::has_avx2() && super::winograd::winograd_setting() == Ok(true);
    let wide_lanes = if crate::cpu::simd::has_avx512() { LANES } else { AVX2_LANES };
    let wide = Conv2dGeom::square(32, 64, (8, 8), 64, 3, 1, 1, false);
    let cases = [
        (wide, wide_lanes),
        (Conv2dGeom { batch: 128, ..wide }, wide_lanes),
        (Conv2dGeom::square(32, 32, (16, 16), 32, 3, 1, 1, false), wide_lanes),
        (Conv2dGeom { batch: 31, ..wide }, AVX2_LANES),
        (Conv2dGeom { batch: 16, ..wide }, AVX2_LANES),
    ];
    for (g, lanes) in cases {
        let want = on.then_some(lanes);
        assert_eq!(Winograd::forward(&g).map(|w| w.lanes), want, "{g:?}");
        assert_eq!(Winograd::backward_data(&g).map(|w| w.lanes), want, "{g:?}");
    }
    assert!(Winograd::forward(&Conv2dGeom { batch: 15, ..wide }).is_none(), "a batch of 15");
    // The weight gradient's vectors run over channels: any batch.
    let params_lanes = if crate::cpu::simd::has_avx512() { 16 } else { 8 };
    for g in [wide, Conv2dGeom { batch: 1, ..wide }, Conv2dGeom { batch: 15, ..wide }, cases[2].0] {
        assert_eq!(WinogradParams::of(&g).map(|w| w.vw), on.then_some(params_lanes), "{g:?}");
    }
    for g in [
        Conv2dGeom::square(32, 16, (32, 32), 16, 3, 1, 1, false),
        Conv2dGeom::square(32, 32, (16, 16), 64, 3, 2, 1, false),
        Conv2dGeom::square(32, 64, (8, 8), 64, 3, 1, 0, false),
        Conv2dGeom::square(32, 64, (8, 8), 64, 1, 1, 0, false),
    ] {
        assert!(Winograd::forward(&g).is_none() && Winograd::backward_data(&g).is_none(), "{g:?}");
        assert!(WinogradParams::of(&g).is_none(), "{g:?}");
    }
}

/// `CROSSBOW_WINOGRAD` takes 1/on/0/off (any case, unset is on) and names itself when wrong.
#[test]
fn winograd_switch_parses_and_names_a_bad_value() {
    use super::winograd::winograd_setting_with as parse;
    assert_eq!(parse(None), Ok(true));
    for (v, want) in [("1", true), ("on", true), ("ON", true), ("0", false), ("off", false), (" Off ", false)] {
        assert_eq!(parse(Some(v)), Ok(want), "{v:?}");
    }
    let e = parse(Some("maybe")).unwrap_err();
    assert!(e.contains("CROSSBOW_WINOGRAD") && e.contains("maybe"), "{e}");
}

/// The Winograd weight gradient's bound against the f64 definition for a sum over `terms`
/// pixels (images × pixels of each): the transforms reassociate the sum (and `A`'s
/// coefficients reach 8), so the absolute error grows with the terms summed, about as their
/// square root, as the gradient's own scale does (`sqrt(terms)/3` for these operands).
/// Measured up to 5.0e-6·sqrt(terms) (4×4 images, whole tiles); this bound is 3× that.
#[cfg(test)]
fn winograd_params_tolerance(terms: usize) -> Tolerance {
    Tolerance::new(1e-5, 1.5e-5 * (terms as f64).sqrt())
}

#[cfg(test)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Wide 3×3 layers take the Winograd weight gradient where AVX2 or AVX-512 runs, at any
    /// batch, and it matches the f64 definition on random sizes (images 1-10 pixels a side,
    /// so edge tiles are partial; channel counts around the vector widths; 1-40 images, so
    /// one chunk and several), with 1-3 threads; the bias gradient too.
    #[test]
    fn winograd_weight_gradient_matches_the_reference(
        n in 1usize..41, c in 32usize..72, co in 32usize..72, h in 1usize..11, w in 1usize..11,
        bias in any::<bool>(), threads in 1usize..4, seed in any::<u64>(),
    ) {
        let g = Conv2dGeom {
            batch: n, in_channels: c, in_h: h, in_w: w, out_channels: co, kernel_h: 3, kernel_w: 3,
            stride_h: 1, stride_w: 1, pad_h: 1, pad_w: 1, bias,
        };
        prop_assume!(g.validate().is_ok());
        if super::winograd_params::WinogradParams::of(&g).is_none() {
            eprintln!("skipped: the Winograd path needs AVX2 (and {} unset or on)", super::winograd::WINOGRAD_ENV);
            return Ok(());
        }
        let (x, p, dy) = operands(&g, seed);
        let out = run(&CpuBackend::with_threads(0, threads).unwrap(), &g, &x, &p, &dy);
        let want = dparams_ref(&g, &to_f64(&x), &to_f64(&dy));
        let worst = out.dp.iter().zip(&want).map(|(a, e)| (*a as f64 - e).abs()).fold(0.0, f64::max);
        eprintln!("winograd dparams n {n} {h}x{w} c {c} co {co}: worst {worst:.3e}, per sqrt(terms) {:.3e}", worst / ((n * h * w) as f64).sqrt());
        assert_close(&out.dp, &want, winograd_params_tolerance(n * h * w), &format!("dparams {g:?}"));
    }
}

/// The kernel rows the padded kernels skip are exactly those that read only padding: for
/// LeNet-5's second backward-data pass (10 rows of `dy` padded by 4, a 5×5 kernel, 14 output
/// rows) one kernel row at the first and last output rows, all five in the middle; for a
/// stride-2 layer the rows step by two.
#[test]
fn live_kernel_rows_are_those_that_read_the_image() {
    let conv2 = Conv2dGeom::square(2, 6, (14, 14), 16, 5, 1, 0, true);
    if let Some(d) = super::direct::Direct::backward_data(&conv2) {
        assert_eq!((d.oh(), d.ph, d.h), (14, 4, 10));
        assert_eq!(d.live_rows(0, 0), (4, 5));
        assert_eq!(d.live_rows(13, 13), (0, 1));
        assert_eq!(d.live_rows(5, 8), (0, 5));
        assert_eq!(d.live_rows(0, 13), (0, 5));
        // Brute force: a kernel row is live for an output row iff it reads an image row.
        for oy in 0..d.oh() {
            let (lo, hi) = d.live_rows(oy, oy);
            for ki in 0..d.kh {
                let reads_image = (d.ph..d.ph + d.h).contains(&(oy + ki));
                assert_eq!((lo..hi).contains(&ki), reads_image, "oy {oy} ki {ki}");
            }
        }
    }
    let d = super::direct::Direct { c: 4, h: 16, w: 16, co: 8, kh: 5, kw: 5, ph: 2, pw: 2, s: 2, eh: 0, ew: 0, pad_to: (0, 0) };
    assert_eq!(d.live_rows(0, 0), (2, 5));
    assert_eq!(d.live_rows(1, 1), (0, 5));
    assert_eq!(d.oh(), 8);
    assert_eq!(d.live_rows(7, 7), (0, 4));
}
