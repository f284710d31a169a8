//! batch norm on every backend (and on a GPU with and without cuDNN): training forward vs an
//! f64 reference (including the running-statistics update), inference forward, and the
//! backward pass vs central finite differences of the f64 training-mode forward; against
//! the CPU on larger shapes; the fused calls (batch norm + residual + ReLU) bit for bit
//! against the separate calls and against finite differences; argument errors.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::{BatchNormGeom, Epilogue};
use crate::prelude::*;
use crate::testing::{
    GPU_TOLERANCE, Tolerance, assert_close, assert_close_f32, dot, download, finite_difference, nan_buffer,
    proptest_config, random_distinct_vec, random_vec, to_f64, upload,
};

/// Training-mode batch norm in f64: `(y, batch means, biased batch variances)`.
pub fn bn_ref(g: &BatchNormGeom, x: &[f64], p: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
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

/// The three passes on a backend: `(y, saved, running after, dx, dparams, inference y)`.
#[allow(clippy::type_complexity)]
fn passes<B: Backend>(
    be: &B,
    g: &BatchNormGeom,
    x: &[f32],
    p: &[f32],
    running: &[f32],
    dy: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = g.channels;
    let (xb, pb, dyb) = (upload(be, x), upload(be, p), upload(be, dy));
    let (mut y, mut saved, mut run) = (nan_buffer(be, g.len()), nan_buffer(be, 2 * c), upload(be, running));
    be.batch_norm_forward_train(
        g,
        View::whole(&xb),
        View::whole(&pb),
        ViewMut::whole(&mut y),
        ViewMut::whole(&mut saved),
        ViewMut::whole(&mut run),
    )
    .unwrap();
    let (mut dx, mut dp) = (nan_buffer(be, g.len()), nan_buffer(be, 2 * c));
    be.batch_norm_backward(
        g,
        View::whole(&xb),
        View::whole(&dyb),
        View::whole(&pb),
        View::whole(&saved),
        ViewMut::whole(&mut dx),
        ViewMut::whole(&mut dp),
    )
    .unwrap();
    // Inference with the updated running statistics.
    let mut yi = nan_buffer(be, g.len());
    be.batch_norm_forward_infer(g, View::whole(&xb), View::whole(&pb), View::whole(&run), ViewMut::whole(&mut yi))
        .unwrap();
    let d = |b: &B::Buffer| download(be, b);
    (d(&y), d(&saved), d(&run), d(&dx), d(&dp), d(&yi))
}

/// Forward bound 1e-4 rel + 1e-5 abs (normalisation divides by small standard deviations);
/// gradients `Tolerance::GRAD` against central differences with h = 1e-3 (plus the GPU bound
/// off the CPU).
pub fn batch_norm_matches_reference<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(48), |(batch in 1usize..5, channels in 1usize..5, spatial in 1usize..10, seed in any::<u64>())| {
        prop_assume!(batch * spatial > 1);
        let g = BatchNormGeom { batch, channels, spatial, eps: 1e-5, momentum: 0.1 };
        // Values at least 0.1 apart: with two values per channel and close values the
        // normalisation is too curved for h = 1e-3 differences.
        let x = random_distinct_vec(seed, g.len(), 0.1);
        let mut p = random_vec(seed ^ 1, 2 * channels, 1.0);
        for v in &mut p[..channels] { *v += 1.5; }
        let dy = random_vec(seed ^ 2, g.len(), 1.0);
        let running0 = random_vec(seed ^ 3, 2 * channels, 0.5).iter().enumerate()
            .map(|(i, v)| if i >= channels { v.abs() + 0.5 } else { *v }).collect::<Vec<f32>>();
        let (y, _saved, running, dx, dp, yi) = passes(be, &g, &x, &p, &running0, &dy);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        let (yr, means, vars) = bn_ref(&g, &xd, &pd);
        assert_close(&y, &yr, Tolerance::new(1e-4, 1e-5).for_backend::<B>(), "forward");
        let m = g.count() as f64;
        let mut want_running = vec![0.0; 2 * channels];
        for ch in 0..channels {
            want_running[ch] = 0.9 * running0[ch] as f64 + 0.1 * means[ch];
            want_running[channels + ch] = 0.9 * running0[channels + ch] as f64 + 0.1 * vars[ch] * m / (m - 1.0);
        }
        assert_close(&running, &want_running, Tolerance::new(1e-5, 1e-6).for_backend::<B>(), "running statistics");

        let fdx = finite_difference(&xd, 1e-3, |v| dot(&dyd, &bn_ref(&g, v, &pd).0));
        assert_close(&dx, &fdx, Tolerance::new(2e-3, 5e-4).for_backend::<B>(), "dx");
        let fdp = finite_difference(&pd, 1e-3, |v| dot(&dyd, &bn_ref(&g, &xd, v).0));
        assert_close(&dp, &fdp, Tolerance::GRAD.for_backend::<B>(), "dparams");

        // Inference with the updated running statistics.
        let want: Vec<f64> = (0..g.len()).map(|i| {
            let ch = (i / spatial) % channels;
            (xd[i] - running[ch] as f64) / (running[channels + ch] as f64 + 1e-5).sqrt() * pd[ch] + pd[channels + ch]
        }).collect();
        assert_close(&yi, &want, Tolerance::new(1e-5, 1e-5).for_backend::<B>(), "inference");
    });
}

/// Every output of the three passes within [`GPU_TOLERANCE`] of the CPU, up to 8 × 16 × 64.
pub fn batch_norm_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(12), |(n in 1usize..9, c in 1usize..17, sp in 1usize..65, seed in any::<u64>())| {
        let g = BatchNormGeom::new(n, c, sp);
        prop_assume!(g.count() >= 2);
        let x = random_vec(seed, g.len(), 2.0);
        let mut p = random_vec(seed ^ 1, 2 * c, 0.5);
        for v in &mut p[..c] {
            *v += 1.0;
        }
        let running: Vec<f32> = (0..2 * c).map(|i| if i < c { 0.1 } else { 1.0 }).collect();
        let dy = random_vec(seed ^ 2, g.len(), 1.0);
        let got = passes(be, &g, &x, &p, &running, &dy);
        let want = passes(&cpu, &g, &x, &p, &running, &dy);
        let what = format!("{g:?}");
        assert_close_f32(&got.0, &want.0, GPU_TOLERANCE, &format!("bn forward {what}"));
        assert_close_f32(&got.1, &want.1, GPU_TOLERANCE, &format!("bn saved stats {what}"));
        assert_close_f32(&got.2, &want.2, GPU_TOLERANCE, &format!("bn running stats {what}"));
        assert_close_f32(&got.3, &want.3, GPU_TOLERANCE, &format!("bn dx {what}"));
        assert_close_f32(&got.4, &want.4, GPU_TOLERANCE, &format!("bn dparams {what}"));
        assert_close_f32(&got.5, &want.5, GPU_TOLERANCE, &format!("bn inference {what}"));
    });
}

/// The epilogues a fused call can have: `(residual, relu)`.
const EPILOGUES: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

/// The outputs of the fused calls, or of the separate calls they replace:
/// `(y, saved, running, dx, dres, dparams, inference y)`.
type Outputs = [Vec<f32>; 7];

#[allow(clippy::too_many_arguments)]
fn fused_or_separate<B: Backend>(
    be: &B,
    fused: bool,
    (residual, relu): (bool, bool),
    g: &BatchNormGeom,
    x: &[f32],
    r: &[f32],
    p: &[f32],
    dy: &[f32],
) -> Outputs {
    let c = g.channels;
    let (xb, rb, pb) = (upload(be, x), upload(be, r), upload(be, p));
    let running0: Vec<f32> = (0..2 * c).map(|i| if i < c { 0.1 } else { 1.0 }).collect();
    let (mut y, mut saved, mut run) = (nan_buffer(be, g.len()), nan_buffer(be, 2 * c), upload(be, &running0));
    let ep = Epilogue { residual: residual.then(|| View::whole(&rb)), relu };
    let (mut dx, mut dres, mut dp) = (nan_buffer(be, g.len()), nan_buffer(be, g.len()), nan_buffer(be, 2 * c));
    let mut yi = nan_buffer(be, g.len());
    if fused {
        be.batch_norm_forward_train_fused(
            g,
            View::whole(&xb),
            ep,
            View::whole(&pb),
            ViewMut::whole(&mut y),
            ViewMut::whole(&mut saved),
            ViewMut::whole(&mut run),
        )
        .unwrap();
        let mut d = upload(be, dy);
        be.batch_norm_backward_fused(
            g,
            View::whole(&xb),
            relu.then(|| View::whole(&y)),
            ViewMut::whole(&mut d),
            View::whole(&pb),
            View::whole(&saved),
            ViewMut::whole(&mut dx),
            residual.then(|| ViewMut::whole(&mut dres)),
            ViewMut::whole(&mut dp),
        )
        .unwrap();
        be.batch_norm_forward_infer_fused(g, View::whole(&xb), ep, View::whole(&pb), View::whole(&run), ViewMut::whole(&mut yi))
            .unwrap();
    } else {
        // What the unfused program runs: batch norm, then `add`, then ReLU in place; backward,
        // ReLU's in place, a copy to the residual, batch norm's.
        let epilogue = |be: &B, out: &mut B::Buffer| {
            if residual {
                let mut sum = nan_buffer(be, g.len());
                be.add(View::whole(&*out), View::whole(&rb), ViewMut::whole(&mut sum)).unwrap();
                be.copy(View::whole(&sum), ViewMut::whole(out)).unwrap();
            }
            if relu {
                be.relu_forward_inplace(ViewMut::whole(out)).unwrap();
            }
        };
        be.batch_norm_forward_train(
            g,
            View::whole(&xb),
            View::whole(&pb),
            ViewMut::whole(&mut y),
            ViewMut::whole(&mut saved),
            ViewMut::whole(&mut run),
        )
        .unwrap();
        epilogue(be, &mut y);
        let mut d = upload(be, dy);
        if relu {
            be.relu_backward_inplace(View::whole(&y), ViewMut::whole(&mut d)).unwrap();
        }
        if residual {
            be.copy(View::whole(&d), ViewMut::whole(&mut dres)).unwrap();
        }
        be.batch_norm_backward(
            g,
            View::whole(&xb),
            View::whole(&d),
            View::whole(&pb),
            View::whole(&saved),
            ViewMut::whole(&mut dx),
            ViewMut::whole(&mut dp),
        )
        .unwrap();
        be.batch_norm_forward_infer(g, View::whole(&xb), View::whole(&pb), View::whole(&run), ViewMut::whole(&mut yi))
            .unwrap();
        epilogue(be, &mut yi);
    }
    let d = |b: &B::Buffer| download(be, b);
    let dres = if residual { d(&dres) } else { vec![] };
    [d(&y), d(&saved), d(&run), d(&dx), dres, d(&dp), d(&yi)]
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every fused call gives the same bits as the separate calls it replaces (batch norm, `add`,
/// ReLU; ReLU's backward, a copy, batch norm's backward), on each backend, for each epilogue.
pub fn batch_norm_fused_equals_separate_calls<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(24), |(n in 1usize..6, c in 1usize..9, sp in 1usize..40, seed in any::<u64>())| {
        let g = BatchNormGeom::new(n, c, sp);
        prop_assume!(g.count() >= 2);
        let x = random_vec(seed, g.len(), 2.0);
        let r = random_vec(seed ^ 4, g.len(), 1.0);
        let mut p = random_vec(seed ^ 1, 2 * c, 0.5);
        for v in &mut p[..c] {
            *v += 1.0;
        }
        let dy = random_vec(seed ^ 2, g.len(), 1.0);
        for ep in EPILOGUES {
            let got = fused_or_separate(be, true, ep, &g, &x, &r, &p, &dy);
            let want = fused_or_separate(be, false, ep, &g, &x, &r, &p, &dy);
            for (i, what) in ["y", "saved", "running", "dx", "dres", "dparams", "inference y"].iter().enumerate() {
                prop_assert_eq!(bits(&got[i]), bits(&want[i]), "{} of {:?} with (residual, relu) = {:?}", what, g, ep);
            }
        }
    });
}

/// The fused training call `y = max(bn(x) + r, 0)` in f64.
fn fused_ref(g: &BatchNormGeom, x: &[f64], r: &[f64], p: &[f64]) -> Vec<f64> {
    bn_ref(g, x, p).0.iter().zip(r).map(|(b, r)| (b + r).max(0.0)).collect()
}

/// The fused backward pass against central differences of the f64 forward: `dx`, `dres` and
/// `dparams`. The residual is chosen so that no sum lies within 0.3 of ReLU's kink.
pub fn batch_norm_fused_matches_finite_differences<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(32), |(batch in 1usize..4, channels in 1usize..4, spatial in 1usize..8, seed in any::<u64>())| {
        prop_assume!(batch * spatial > 1);
        let g = BatchNormGeom { batch, channels, spatial, eps: 1e-5, momentum: 0.1 };
        let x = random_distinct_vec(seed, g.len(), 0.1);
        let mut p = random_vec(seed ^ 1, 2 * channels, 1.0);
        for v in &mut p[..channels] { *v += 1.5; }
        let dy = random_vec(seed ^ 2, g.len(), 1.0);
        let (xd, pd, dyd) = (to_f64(&x), to_f64(&p), to_f64(&dy));
        // r = v - bn(x), so that the sum is v: |v| in [0.3, 1.5], either sign.
        let v = crate::testing::random_vec_away_from_zero(seed ^ 3, g.len(), 1.5, 0.3);
        let b = bn_ref(&g, &xd, &pd).0;
        let r: Vec<f32> = v.iter().zip(&b).map(|(&v, &b)| (v as f64 - b) as f32).collect();
        let rd = to_f64(&r);
        let got = fused_or_separate(be, true, (true, true), &g, &x, &r, &p, &dy);
        assert_close(&got[0], &fused_ref(&g, &xd, &rd, &pd), Tolerance::new(1e-4, 1e-5).for_backend::<B>(), "forward");
        let fdx = finite_difference(&xd, 1e-3, |v| dot(&dyd, &fused_ref(&g, v, &rd, &pd)));
        assert_close(&got[3], &fdx, Tolerance::new(2e-3, 5e-4).for_backend::<B>(), "dx");
        let fdr = finite_difference(&rd, 1e-3, |v| dot(&dyd, &fused_ref(&g, &xd, v, &pd)));
        assert_close(&got[4], &fdr, Tolerance::GRAD.for_backend::<B>(), "dres");
        let fdp = finite_difference(&pd, 1e-3, |v| dot(&dyd, &fused_ref(&g, &xd, &rd, v)));
        assert_close(&got[5], &fdp, Tolerance::GRAD.for_backend::<B>(), "dparams");
    });
}

/// Zero `eps`, out-of-range momentum and a short `saved` buffer are errors, not panics.
pub fn batch_norm_bad_arguments_are_errors<B: Backend>(be: &B) {
    let g = BatchNormGeom::new(2, 3, 4);
    assert!(BatchNormGeom { eps: 0.0, ..g }.validate().is_err());
    assert!(BatchNormGeom { momentum: 1.5, ..g }.validate().is_err());
    let x = upload(be, &vec![0.0; g.len()]);
    let p = upload(be, &[1.0; 6]);
    let mut y = nan_buffer(be, g.len());
    let mut saved = nan_buffer(be, 5);
    let mut running = upload(be, &[0.0; 6]);
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
    // A residual of the wrong length.
    let short = upload(be, &[0.0; 5]);
    let mut saved = nan_buffer(be, 6);
    let e = be
        .batch_norm_forward_train_fused(
            &g,
            View::whole(&x),
            Epilogue::add_relu(View::whole(&short)),
            View::whole(&p),
            ViewMut::whole(&mut y),
            ViewMut::whole(&mut saved),
            ViewMut::whole(&mut running),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("residual"), "{e}");
}

crate::test_backends! {
    batch_norm_matches_reference: [cpu, cpu_threads, emu, cuda, cuda_no_cudnn],
    batch_norm_matches_cpu: [cpu_threads, emu, cuda, cuda_no_cudnn],
    batch_norm_fused_equals_separate_calls: [cpu, cpu_threads, emu, cuda, cuda_no_cudnn],
    batch_norm_fused_matches_finite_differences: [cpu, emu, cuda, cuda_no_cudnn],
    batch_norm_bad_arguments_are_errors,
}
