//! The backend conformance suite: one test body per op, generic over [`Backend`], comparing
//! the backend under test with the CPU reference ([`CpuBackend`]) on random geometries and
//! values (proptest), forward and backward.
//!
//! Bound: every output within [`GPU_TOLERANCE`] of the CPU — `1e-4` relative plus a small
//! absolute part for values near zero (reductions of up to a few thousand f32 terms run in a
//! different order on a GPU). A backend's test binary calls [`check`] once per name in
//! [`OPS`] (one `#[test]` each), or [`check_all`].

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{Tolerance, random_distinct_vec, random_labels, random_vec, random_vec_away_from_zero};
use crate::augment::{CropFlip, CropFlipGeom};
use crate::batch_norm::BatchNormGeom;
use crate::conv2d::Conv2dGeom;
use crate::dropout::DropoutConfig;
use crate::gemm::GemmConfig;
use crate::linear::LinearGeom;
use crate::optim::SgdConfig;
use crate::pool::Pool2dGeom;
use crate::softmax_xent::SoftmaxXentGeom;
use crate::{Backend, CpuBackend, View, ViewMut};

/// The bound between a backend and the CPU reference: 1e-4 relative, 1e-4 absolute.
pub const GPU_TOLERANCE: Tolerance = Tolerance::new(1e-4, 1e-4);

/// Every op the suite checks, by name.
pub const OPS: &[&str] = &[
    "gemm",
    "vector",
    "sgd",
    "relu",
    "conv2d",
    "linear",
    "batch_norm",
    "max_pool",
    "avg_pool",
    "dropout",
    "softmax_xent",
    "crop_flip",
];

/// Runs the named op's check for `cases` random cases; `Err` describes the first failure.
pub fn check<B: Backend>(be: &B, op: &str, cases: u32) -> Result<(), String> {
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let cpu = CpuBackend::new(0);
    let res: Result<(), String> = match op {
        "gemm" => runner.run(&gemm_strategy(), |(cfg, seed)| gemm_case(be, &cpu, cfg, seed)).map_err(|e| e.to_string()),
        "vector" => runner
            .run(&(0usize..5000, -2.0f32..2.0, -2.0f32..2.0, any::<u64>()), |(n, a, b, s)| {
                vector_case(be, &cpu, n, a, b, s)
            })
            .map_err(|e| e.to_string()),
        "sgd" => runner
            .run(&(1usize..5000, any::<bool>(), any::<u64>()), |(n, nes, s)| sgd_case(be, &cpu, n, nes, s))
            .map_err(|e| e.to_string()),
        "relu" => {
            runner.run(&(1usize..5000, any::<u64>()), |(n, s)| relu_case(be, &cpu, n, s)).map_err(|e| e.to_string())
        }
        "conv2d" => {
            runner.run(&(conv_strategy(), any::<u64>()), |(g, s)| conv_case(be, &cpu, g, s)).map_err(|e| e.to_string())
        }
        "linear" => runner
            .run(&(1usize..40, 1usize..300, 1usize..80, any::<bool>(), any::<u64>()), |(n, i, o, b, s)| {
                linear_case(be, &cpu, LinearGeom { batch: n, in_features: i, out_features: o, bias: b }, s)
            })
            .map_err(|e| e.to_string()),
        "batch_norm" => runner
            .run(&(1usize..9, 1usize..17, 1usize..65, any::<u64>()), |(n, c, sp, s)| {
                bn_case(be, &cpu, BatchNormGeom::new(n, c, sp), s)
            })
            .map_err(|e| e.to_string()),
        "max_pool" => runner
            .run(&(pool_strategy(), any::<u64>()), |(g, s)| pool_case(be, &cpu, g, true, s))
            .map_err(|e| e.to_string()),
        "avg_pool" => runner
            .run(&(pool_strategy(), any::<u64>()), |(g, s)| pool_case(be, &cpu, g, false, s))
            .map_err(|e| e.to_string()),
        "dropout" => runner
            .run(&(1usize..10_000, 0.0f32..0.95, any::<u64>()), |(n, p, s)| dropout_case(be, &cpu, n, p, s))
            .map_err(|e| e.to_string()),
        "softmax_xent" => runner
            .run(&(1usize..65, 1usize..120, 0.1f32..30.0, any::<u64>()), |(n, c, sc, s)| {
                xent_case(be, &cpu, SoftmaxXentGeom::mean(n, c), sc, s)
            })
            .map_err(|e| e.to_string()),
        "crop_flip" => runner
            .run(&(crop_flip_strategy(), any::<u64>()), |((g, items), s)| crop_flip_case(be, &cpu, g, &items, s))
            .map_err(|e| e.to_string()),
        other => return Err(format!("unknown op '{other}' (known: {})", OPS.join(", "))),
    };
    res.map_err(|e| format!("{op}: {e}"))
}

/// Runs every check in [`OPS`].
pub fn check_all<B: Backend>(be: &B, cases: u32) -> Result<(), String> {
    for op in OPS {
        check(be, op, cases)?;
    }
    Ok(())
}

type CaseResult = Result<(), TestCaseError>;

/// An op that reads one view and updates another in place.
type InPlace<'f, B> = dyn Fn(&B, View<'_, B>, ViewMut<'_, B>) -> crate::Result<()> + 'f;

fn up<B: Backend>(be: &B, data: &[f32]) -> Result<B::Buffer, TestCaseError> {
    let mut buf = be.alloc(data.len()).map_err(fail)?;
    be.upload(data, ViewMut::whole(&mut buf)).map_err(fail)?;
    Ok(buf)
}

fn down<B: Backend>(be: &B, buf: &B::Buffer) -> Result<Vec<f32>, TestCaseError> {
    let mut v = vec![0.0; B::buffer_len(buf)];
    be.download(View::whole(buf), &mut v).map_err(fail)?;
    Ok(v)
}

/// A buffer of NaNs: every op must overwrite what it writes.
fn poisoned<B: Backend>(be: &B, len: usize) -> Result<B::Buffer, TestCaseError> {
    up(be, &vec![f32::NAN; len])
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

fn compare(actual: &[f32], expected: &[f32], tol: Tolerance, what: &str) -> CaseResult {
    if actual.len() != expected.len() {
        return Err(TestCaseError::fail(format!("{what}: {} vs {} elements", actual.len(), expected.len())));
    }
    let bad: Vec<String> = actual
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(_, (a, e))| !tol.accepts(**a as f64, **e as f64))
        .take(4)
        .map(|(i, (a, e))| format!("[{i}] backend {a} cpu {e}"))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!("{what} outside {tol:?}: {}", bad.join("; "))))
    }
}

/// Runs the same single-output op on both backends (inputs uploaded, output poisoned) and
/// compares.
#[allow(clippy::too_many_arguments)]
fn same<B: Backend>(
    be: &B,
    cpu: &CpuBackend,
    inputs: &[&[f32]],
    out_len: usize,
    tol: Tolerance,
    what: &str,
    f_be: impl Fn(&B, &[B::Buffer], &mut B::Buffer) -> crate::Result<()>,
    f_cpu: impl Fn(&CpuBackend, &[Vec<f32>], &mut Vec<f32>) -> crate::Result<()>,
) -> CaseResult {
    let ins_be = inputs.iter().map(|d| up(be, d)).collect::<Result<Vec<_>, _>>()?;
    let ins_cpu: Vec<Vec<f32>> = inputs.iter().map(|d| d.to_vec()).collect();
    let mut out_be = poisoned(be, out_len)?;
    let mut out_cpu = vec![f32::NAN; out_len];
    f_be(be, &ins_be, &mut out_be).map_err(fail)?;
    f_cpu(cpu, &ins_cpu, &mut out_cpu).map_err(fail)?;
    compare(&down(be, &out_be)?, &out_cpu, tol, what)
}

fn gemm_strategy() -> impl Strategy<Value = (GemmConfig, u64)> {
    (
        1usize..130,
        1usize..130,
        1usize..300,
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0.0f32), -1.0f32..1.0],
        any::<u64>(),
    )
        .prop_map(|(m, n, k, ta, tb, beta, s)| (GemmConfig { trans_a: ta, trans_b: tb, m, n, k, alpha: 0.7, beta }, s))
}

fn gemm_case<B: Backend>(be: &B, cpu: &CpuBackend, cfg: GemmConfig, seed: u64) -> CaseResult {
    let a = random_vec(seed, cfg.m * cfg.k, 1.0);
    let b = random_vec(seed ^ 1, cfg.k * cfg.n, 1.0);
    let c = random_vec(seed ^ 2, cfg.m * cfg.n, 1.0);
    let mut cb = up(be, &c)?;
    let mut cc = c.clone();
    let (ab, bb) = (up(be, &a)?, up(be, &b)?);
    be.gemm(&cfg, View::whole(&ab), View::whole(&bb), ViewMut::whole(&mut cb)).map_err(fail)?;
    cpu.gemm(&cfg, View::whole(&a), View::whole(&b), ViewMut::whole(&mut cc)).map_err(fail)?;
    compare(&down(be, &cb)?, &cc, GPU_TOLERANCE, &format!("gemm {cfg:?}"))
}

fn vector_case<B: Backend>(be: &B, cpu: &CpuBackend, n: usize, alpha: f32, beta: f32, seed: u64) -> CaseResult {
    let a = random_vec(seed, n, 2.0);
    let b = random_vec(seed ^ 1, n, 2.0);
    let t = Tolerance::new(1e-6, 1e-6);
    same(
        be,
        cpu,
        &[&a, &b],
        n,
        t,
        "add",
        |k, i, o| k.add(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.add(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )?;
    same(
        be,
        cpu,
        &[&a, &b],
        n,
        t,
        "sub",
        |k, i, o| k.sub(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.sub(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )?;
    same(
        be,
        cpu,
        &[&a, &b],
        n,
        t,
        "mul",
        |k, i, o| k.mul(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.mul(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )?;
    // In-place ops start from b.
    let check_inplace = |what: &str, f_be: &InPlace<'_, B>, f_cpu: &InPlace<'_, CpuBackend>| -> CaseResult {
        let ab = up(be, &a)?;
        let mut yb = up(be, &b)?;
        let mut yc = b.clone();
        f_be(be, View::whole(&ab), ViewMut::whole(&mut yb)).map_err(fail)?;
        f_cpu(cpu, View::whole(&a), ViewMut::whole(&mut yc)).map_err(fail)?;
        compare(&down(be, &yb)?, &yc, t, what)
    };
    check_inplace("axpy", &|k, x, y| k.axpy(alpha, x, y), &|k, x, y| k.axpy(alpha, x, y))?;
    check_inplace("axpby", &|k, x, y| k.axpby(alpha, x, beta, y), &|k, x, y| k.axpby(alpha, x, beta, y))?;
    check_inplace("axpby beta=0", &|k, x, y| k.axpby(alpha, x, 0.0, y), &|k, x, y| k.axpby(alpha, x, 0.0, y))?;
    check_inplace("scale", &|k, _, y| k.scale(alpha, y), &|k, _, y| k.scale(alpha, y))?;
    check_inplace("copy", &|k, x, y| k.copy(x, y), &|k, x, y| k.copy(x, y))?;
    check_inplace("fill", &|k, _, y| k.fill(y, beta), &|k, _, y| k.fill(y, beta))?;
    same(
        be,
        cpu,
        &[&a],
        1,
        Tolerance::new(1e-5, 1e-6),
        "sum_squares",
        |k, i, o| k.sum_squares(View::whole(&i[0]), ViewMut::whole(o)),
        |k, i, o| k.sum_squares(View::whole(&i[0]), ViewMut::whole(o)),
    )
}

fn sgd_case<B: Backend>(be: &B, cpu: &CpuBackend, n: usize, nesterov: bool, seed: u64) -> CaseResult {
    let cfg = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov };
    let p = random_vec(seed, n, 1.0);
    let v = random_vec(seed ^ 1, n, 0.1);
    let g = random_vec(seed ^ 2, n, 1.0);
    let (mut pb, mut vb, gb) = (up(be, &p)?, up(be, &v)?, up(be, &g)?);
    let (mut pc, mut vc) = (p.clone(), v.clone());
    be.sgd_step(&cfg, ViewMut::whole(&mut pb), View::whole(&gb), ViewMut::whole(&mut vb)).map_err(fail)?;
    cpu.sgd_step(&cfg, ViewMut::whole(&mut pc), View::whole(&g), ViewMut::whole(&mut vc)).map_err(fail)?;
    let t = Tolerance::new(1e-6, 1e-7);
    compare(&down(be, &pb)?, &pc, t, "sgd param")?;
    compare(&down(be, &vb)?, &vc, t, "sgd velocity")
}

fn relu_case<B: Backend>(be: &B, cpu: &CpuBackend, n: usize, seed: u64) -> CaseResult {
    let x = random_vec_away_from_zero(seed, n, 2.0, 1e-3);
    let dy = random_vec(seed ^ 1, n, 1.0);
    let t = Tolerance::EXACT;
    same(
        be,
        cpu,
        &[&x],
        n,
        t,
        "relu forward",
        |k, i, o| k.relu_forward(View::whole(&i[0]), ViewMut::whole(o)),
        |k, i, o| k.relu_forward(View::whole(&i[0]), ViewMut::whole(o)),
    )?;
    same(
        be,
        cpu,
        &[&x, &dy],
        n,
        t,
        "relu backward",
        |k, i, o| k.relu_backward(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.relu_backward(View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )?;
    // In-place variants.
    let mut yb = up(be, &x)?;
    be.relu_forward_inplace(ViewMut::whole(&mut yb)).map_err(fail)?;
    let mut yc = x.clone();
    cpu.relu_forward_inplace(ViewMut::whole(&mut yc)).map_err(fail)?;
    compare(&down(be, &yb)?, &yc, t, "relu forward in place")?;
    let xb = up(be, &x)?;
    let mut db = up(be, &dy)?;
    be.relu_backward_inplace(View::whole(&xb), ViewMut::whole(&mut db)).map_err(fail)?;
    let mut dc = dy.clone();
    cpu.relu_backward_inplace(View::whole(&x), ViewMut::whole(&mut dc)).map_err(fail)?;
    compare(&down(be, &db)?, &dc, t, "relu backward in place")
}

fn conv_strategy() -> impl Strategy<Value = Conv2dGeom> {
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

fn conv_case<B: Backend>(be: &B, cpu: &CpuBackend, g: Conv2dGeom, seed: u64) -> CaseResult {
    let x = random_vec(seed, g.input_len(), 1.0);
    let p = random_vec(seed ^ 1, g.params_len(), 0.5);
    let dy = random_vec(seed ^ 2, g.output_len(), 1.0);
    let ws_be = be.conv2d_workspace_len(&g);
    let ws_cpu = cpu.conv2d_workspace_len(&g);
    let (xb, pb, dyb) = (up(be, &x)?, up(be, &p)?, up(be, &dy)?);
    let mut wsb = be.alloc(ws_be.max(1)).map_err(fail)?;
    let mut wsc = vec![0.0; ws_cpu];
    let what = format!("{g:?}");
    let mut yb = poisoned(be, g.output_len())?;
    let mut yc = vec![0.0; g.output_len()];
    be.conv2d_forward(&g, View::whole(&xb), View::whole(&pb), ViewMut::whole(&mut yb), ViewMut::whole(&mut wsb))
        .map_err(fail)?;
    cpu.conv2d_forward(&g, View::whole(&x), View::whole(&p), ViewMut::whole(&mut yc), ViewMut::whole(&mut wsc))
        .map_err(fail)?;
    compare(&down(be, &yb)?, &yc, GPU_TOLERANCE, &format!("conv2d forward {what}"))?;
    let mut dxb = poisoned(be, g.input_len())?;
    let mut dxc = vec![0.0; g.input_len()];
    be.conv2d_backward_data(
        &g,
        View::whole(&dyb),
        View::whole(&pb),
        ViewMut::whole(&mut dxb),
        ViewMut::whole(&mut wsb),
    )
    .map_err(fail)?;
    cpu.conv2d_backward_data(&g, View::whole(&dy), View::whole(&p), ViewMut::whole(&mut dxc), ViewMut::whole(&mut wsc))
        .map_err(fail)?;
    compare(&down(be, &dxb)?, &dxc, GPU_TOLERANCE, &format!("conv2d backward data {what}"))?;
    let mut dpb = poisoned(be, g.params_len())?;
    let mut dpc = vec![0.0; g.params_len()];
    be.conv2d_backward_params(
        &g,
        View::whole(&xb),
        View::whole(&dyb),
        ViewMut::whole(&mut dpb),
        ViewMut::whole(&mut wsb),
    )
    .map_err(fail)?;
    cpu.conv2d_backward_params(
        &g,
        View::whole(&x),
        View::whole(&dy),
        ViewMut::whole(&mut dpc),
        ViewMut::whole(&mut wsc),
    )
    .map_err(fail)?;
    compare(&down(be, &dpb)?, &dpc, GPU_TOLERANCE, &format!("conv2d backward params {what}"))
}

fn linear_case<B: Backend>(be: &B, cpu: &CpuBackend, g: LinearGeom, seed: u64) -> CaseResult {
    let x = random_vec(seed, g.input_len(), 1.0);
    let p = random_vec(seed ^ 1, g.params_len(), 0.5);
    let dy = random_vec(seed ^ 2, g.output_len(), 1.0);
    let what = format!("{g:?}");
    same(
        be,
        cpu,
        &[&x, &p],
        g.output_len(),
        GPU_TOLERANCE,
        &format!("linear forward {what}"),
        |k, i, o| k.linear_forward(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.linear_forward(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )?;
    same(
        be,
        cpu,
        &[&dy, &p],
        g.input_len(),
        GPU_TOLERANCE,
        &format!("linear backward data {what}"),
        |k, i, o| k.linear_backward_data(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.linear_backward_data(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )?;
    same(
        be,
        cpu,
        &[&x, &dy],
        g.params_len(),
        GPU_TOLERANCE,
        &format!("linear backward params {what}"),
        |k, i, o| k.linear_backward_params(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.linear_backward_params(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )
}

fn bn_case<B: Backend>(be: &B, cpu: &CpuBackend, g: BatchNormGeom, seed: u64) -> CaseResult {
    if g.count() < 2 {
        return Ok(());
    }
    let c = g.channels;
    let x = random_vec(seed, g.len(), 2.0);
    let mut p = random_vec(seed ^ 1, 2 * c, 0.5);
    for v in &mut p[..c] {
        *v += 1.0;
    }
    let running: Vec<f32> = (0..2 * c).map(|i| if i < c { 0.1 } else { 1.0 }).collect();
    let dy = random_vec(seed ^ 2, g.len(), 1.0);
    let (xb, pb, dyb) = (up(be, &x)?, up(be, &p)?, up(be, &dy)?);
    let (mut yb, mut sb, mut rb) = (poisoned(be, g.len())?, poisoned(be, 2 * c)?, up(be, &running)?);
    let (mut yc, mut sc, mut rc) = (vec![0.0; g.len()], vec![0.0; 2 * c], running.clone());
    be.batch_norm_forward_train(
        &g,
        View::whole(&xb),
        View::whole(&pb),
        ViewMut::whole(&mut yb),
        ViewMut::whole(&mut sb),
        ViewMut::whole(&mut rb),
    )
    .map_err(fail)?;
    cpu.batch_norm_forward_train(
        &g,
        View::whole(&x),
        View::whole(&p),
        ViewMut::whole(&mut yc),
        ViewMut::whole(&mut sc),
        ViewMut::whole(&mut rc),
    )
    .map_err(fail)?;
    let what = format!("{g:?}");
    compare(&down(be, &yb)?, &yc, GPU_TOLERANCE, &format!("bn forward {what}"))?;
    compare(&down(be, &sb)?, &sc, GPU_TOLERANCE, &format!("bn saved stats {what}"))?;
    compare(&down(be, &rb)?, &rc, GPU_TOLERANCE, &format!("bn running stats {what}"))?;
    let (mut dxb, mut dpb) = (poisoned(be, g.len())?, poisoned(be, 2 * c)?);
    let (mut dxc, mut dpc) = (vec![0.0; g.len()], vec![0.0; 2 * c]);
    be.batch_norm_backward(
        &g,
        View::whole(&xb),
        View::whole(&dyb),
        View::whole(&pb),
        View::whole(&sb),
        ViewMut::whole(&mut dxb),
        ViewMut::whole(&mut dpb),
    )
    .map_err(fail)?;
    cpu.batch_norm_backward(
        &g,
        View::whole(&x),
        View::whole(&dy),
        View::whole(&p),
        View::whole(&sc),
        ViewMut::whole(&mut dxc),
        ViewMut::whole(&mut dpc),
    )
    .map_err(fail)?;
    compare(&down(be, &dxb)?, &dxc, GPU_TOLERANCE, &format!("bn dx {what}"))?;
    compare(&down(be, &dpb)?, &dpc, GPU_TOLERANCE, &format!("bn dparams {what}"))?;
    let mut yib = poisoned(be, g.len())?;
    let mut yic = vec![0.0; g.len()];
    be.batch_norm_forward_infer(&g, View::whole(&xb), View::whole(&pb), View::whole(&rb), ViewMut::whole(&mut yib))
        .map_err(fail)?;
    cpu.batch_norm_forward_infer(&g, View::whole(&x), View::whole(&p), View::whole(&rc), ViewMut::whole(&mut yic))
        .map_err(fail)?;
    compare(&down(be, &yib)?, &yic, GPU_TOLERANCE, &format!("bn inference {what}"))
}

fn pool_strategy() -> impl Strategy<Value = Pool2dGeom> {
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

fn pool_case<B: Backend>(be: &B, cpu: &CpuBackend, g: Pool2dGeom, max: bool, seed: u64) -> CaseResult {
    let x = random_distinct_vec(seed, g.input_len(), 1e-3);
    let dy = random_vec(seed ^ 1, g.output_len(), 1.0);
    let what = format!("{g:?}");
    let (xb, dyb) = (up(be, &x)?, up(be, &dy)?);
    let mut yb = poisoned(be, g.output_len())?;
    let mut yc = vec![0.0; g.output_len()];
    let mut dxb = poisoned(be, g.input_len())?;
    let mut dxc = vec![0.0; g.input_len()];
    if max {
        be.max_pool_forward(&g, View::whole(&xb), ViewMut::whole(&mut yb)).map_err(fail)?;
        cpu.max_pool_forward(&g, View::whole(&x), ViewMut::whole(&mut yc)).map_err(fail)?;
        be.max_pool_backward(&g, View::whole(&xb), View::whole(&yb), View::whole(&dyb), ViewMut::whole(&mut dxb))
            .map_err(fail)?;
        cpu.max_pool_backward(&g, View::whole(&x), View::whole(&yc), View::whole(&dy), ViewMut::whole(&mut dxc))
            .map_err(fail)?;
    } else {
        be.avg_pool_forward(&g, View::whole(&xb), ViewMut::whole(&mut yb)).map_err(fail)?;
        cpu.avg_pool_forward(&g, View::whole(&x), ViewMut::whole(&mut yc)).map_err(fail)?;
        be.avg_pool_backward(&g, View::whole(&dyb), ViewMut::whole(&mut dxb)).map_err(fail)?;
        cpu.avg_pool_backward(&g, View::whole(&dy), ViewMut::whole(&mut dxc)).map_err(fail)?;
    }
    let kind = if max { "max" } else { "avg" };
    compare(&down(be, &yb)?, &yc, GPU_TOLERANCE, &format!("{kind} pool forward {what}"))?;
    compare(&down(be, &dxb)?, &dxc, GPU_TOLERANCE, &format!("{kind} pool backward {what}"))
}

fn dropout_case<B: Backend>(be: &B, cpu: &CpuBackend, n: usize, p: f32, seed: u64) -> CaseResult {
    let cfg = DropoutConfig { p, seed };
    let x = random_vec(seed, n, 1.0);
    let xb = up(be, &x)?;
    let (mut yb, mut mb) = (poisoned(be, n)?, poisoned(be, n)?);
    let (mut yc, mut mc) = (vec![0.0; n], vec![0.0; n]);
    be.dropout_forward(&cfg, View::whole(&xb), ViewMut::whole(&mut yb), ViewMut::whole(&mut mb)).map_err(fail)?;
    cpu.dropout_forward(&cfg, View::whole(&x), ViewMut::whole(&mut yc), ViewMut::whole(&mut mc)).map_err(fail)?;
    // The mask is drawn from the same counter-based hash: identical on every backend.
    compare(&down(be, &mb)?, &mc, Tolerance::EXACT, "dropout mask")?;
    compare(&down(be, &yb)?, &yc, Tolerance::EXACT, "dropout output")
}

fn xent_case<B: Backend>(be: &B, cpu: &CpuBackend, g: SoftmaxXentGeom, scale: f32, seed: u64) -> CaseResult {
    let logits = random_vec(seed, g.batch * g.classes, scale);
    let labels = random_labels(seed ^ 1, g.batch, g.classes);
    let (lb, yb) = (up(be, &logits)?, up(be, &labels)?);
    let (mut db, mut sb) = (poisoned(be, logits.len())?, poisoned(be, 2)?);
    let (mut dc, mut sc) = (vec![0.0; logits.len()], vec![0.0; 2]);
    be.softmax_xent(&g, View::whole(&lb), View::whole(&yb), Some(ViewMut::whole(&mut db)), ViewMut::whole(&mut sb))
        .map_err(fail)?;
    cpu.softmax_xent(
        &g,
        View::whole(&logits),
        View::whole(&labels),
        Some(ViewMut::whole(&mut dc)),
        ViewMut::whole(&mut sc),
    )
    .map_err(fail)?;
    compare(&down(be, &sb)?, &sc, GPU_TOLERANCE, &format!("softmax_xent stats {g:?}"))?;
    compare(&down(be, &db)?, &dc, Tolerance::new(1e-4, 1e-6), &format!("softmax_xent dlogits {g:?}"))
}

fn crop_flip_strategy() -> impl Strategy<Value = (CropFlipGeom, Vec<CropFlip>)> {
    (1usize..9, 1usize..4, 1usize..20, 1usize..20, 0usize..5).prop_flat_map(|(n, c, h, w, pad)| {
        let g = CropFlipGeom { batch: n, channels: c, height: h, width: w, pad };
        let item = (0..=2 * pad, 0..=2 * pad, any::<bool>()).prop_map(|(dy, dx, flip)| CropFlip { dy, dx, flip });
        (Just(g), proptest::collection::vec(item, n))
    })
}

fn crop_flip_case<B: Backend>(be: &B, cpu: &CpuBackend, g: CropFlipGeom, items: &[CropFlip], seed: u64) -> CaseResult {
    let x = random_vec(seed, g.len(), 1.0);
    let params = CropFlip::pack(items);
    // Copies and zeros only: identical on every backend.
    same(
        be,
        cpu,
        &[&x, &params],
        g.len(),
        Tolerance::EXACT,
        &format!("crop_flip {g:?} {items:?}"),
        |k, i, o| k.crop_flip(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
        |k, i, o| k.crop_flip(&g, View::whole(&i[0]), View::whole(&i[1]), ViewMut::whole(o)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite run on the CPU against itself (a threaded CPU backend, so the comparison is
    /// not trivially between identical code paths) must pass, and an unknown op is an error.
    #[test]
    fn suite_passes_on_the_cpu() {
        let be = CpuBackend::with_threads(0, 2).unwrap();
        check_all(&be, 8).unwrap();
        assert!(check(&be, "nope", 1).unwrap_err().contains("unknown op"));
    }

    #[test]
    fn compare_rejects_differences_and_length_mismatches() {
        assert!(compare(&[1.0, 2.0], &[1.0, 2.0], GPU_TOLERANCE, "same").is_ok());
        assert!(compare(&[1.0, 2.0], &[1.0, 2.001], GPU_TOLERANCE, "diff").is_err());
        assert!(compare(&[1.0], &[1.0, 2.0], GPU_TOLERANCE, "len").is_err());
        assert!(compare(&[f32::NAN], &[1.0], GPU_TOLERANCE, "nan").is_err());
    }
}
