//! Synchroniser invariants, as property tests on the real engine (CPU devices).

use crossbow_kernels::CpuBackend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::testing::{Tolerance, assert_close_f32, random_vec};
use crossbow_replica::engine::{CpuDevices, Engine, EngineConfig, TrainBatch};
use crossbow_replica::sync::{HostAllReduce, Independent};
use crossbow_replica::{Graph, ModelKind, Schedule, Synchroniser};
use crossbow_tensor::{Rng, Shape};
use proptest::prelude::*;

use super::*;

struct Batch {
    x: Vec<f32>,
    y: Vec<f32>,
}

impl TrainBatch for Batch {
    fn images(&self) -> &[f32] {
        &self.x
    }
    fn labels(&self) -> &[f32] {
        &self.y
    }
}

const EPOCH: usize = 10_000;

fn small_lenet() -> Graph {
    ModelKind::LeNet5.build(&Shape::new(vec![1, 12, 12]), 4).unwrap()
}

fn small_resnet() -> Graph {
    ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 6, 6]), 4).unwrap()
}

/// Batch `j` of iteration `t`: deterministic random images and labels.
fn batch(g: &Graph, b: usize, seed: u64, t: u64, j: usize) -> Batch {
    let per: usize = g.input_shape().dims().iter().product();
    let s = seed ^ (t << 20) ^ (j as u64 * 7919);
    let mut r = Rng::new(s);
    Batch { x: random_vec(s, b * per, 1.0), y: (0..b).map(|_| r.below(g.classes) as f32).collect() }
}

fn engine(
    g: &Graph,
    b: usize,
    layout: &[usize],
    sync: Box<dyn Synchroniser<CpuBackend>>,
    sgd: SgdConfig,
    schedule: Schedule,
) -> Engine<CpuBackend> {
    let cfg = EngineConfig { batch_size: b, sgd, schedule, seed: 5, eval_batch_size: 8 };
    Engine::new(
        g.clone(),
        cfg,
        Box::new(CpuDevices { count: layout.len(), threads: 1 }),
        sync,
        Box::new(HostAllReduce),
        layout,
    )
    .unwrap()
}

fn sgd() -> SgdConfig {
    SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-3, nesterov: false }
}

fn run(e: &mut Engine<CpuBackend>, g: &Graph, b: usize, seed: u64, iters: u64) {
    for t in 0..iters {
        let k = e.learners();
        let bs = (0..k).map(|j| batch(g, b, seed, t, j)).collect();
        e.step(bs, EPOCH).unwrap();
    }
}

/// Bit-for-bit equality, reporting the first difference (not the whole vector).
#[track_caller]
fn assert_same(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!("{what}: first difference at [{i}]: {} vs {}", a[i], b[i]);
    }
}

fn all_params(e: &Engine<CpuBackend>) -> Vec<Vec<f32>> {
    let mut out = vec![];
    for (d, &m) in e.layout().iter().enumerate() {
        for j in 0..m {
            out.push(e.learner_params(d, j).unwrap());
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    /// With α = 1/k and μ_z = 0, every iteration moves z to the mean of the replicas as they
    /// were before their local steps (bound 1e-5 rel + 1e-6 abs: a k-term f32 sum).
    #[test]
    fn sma_z_is_the_mean_of_pre_step_replicas(layout in prop_oneof![Just(vec![1]), Just(vec![2]), Just(vec![3]), Just(vec![1, 2]), Just(vec![2, 2])], seed in any::<u64>()) {
        let g = small_resnet();
        let mut e = engine(&g, 4, &layout, Box::new(Sma::new(None, 0.0)), sgd(), Schedule::Constant);
        for t in 0..3 {
            let before = all_params(&e);
            let k = before.len();
            let mean: Vec<f32> = (0..g.param_len).map(|i| before.iter().map(|w| w[i] as f64).sum::<f64>() as f32 / k as f32).collect();
            let bs = (0..k).map(|j| batch(&g, 4, seed, t, j)).collect();
            e.step(bs, EPOCH).unwrap();
            for d in 0..layout.len() {
                assert_close_f32(&e.central_to_host(d).unwrap(), &mean, Tolerance::new(1e-5, 1e-6), &format!("z on device {d}, iteration {t}"));
            }
        }
    }

    /// S-SGD with k learners at batch b equals one learner at batch k·b on the same samples
    /// (LeNet: no batch norm), and after every step all replicas equal z bit for bit.
    /// Bound 1e-4 rel + 1e-6 abs after 4 steps (gradient sums in a different order).
    #[test]
    fn ssgd_k_learners_equal_one_learner_at_k_times_the_batch(k in 1usize..5, split in any::<bool>(), seed in any::<u64>()) {
        let g = small_lenet();
        let b = 3;
        let layout = if split && k % 2 == 0 { vec![k / 2, k / 2] } else { vec![k] };
        let mut many = engine(&g, b, &layout, Box::new(SSgd::default()), sgd(), Schedule::Constant);
        let mut one = engine(&g, k * b, &[1], Box::new(Independent::default()), sgd(), Schedule::Constant);
        for t in 0..4 {
            let parts: Vec<Batch> = (0..k).map(|j| batch(&g, b, seed, t, j)).collect();
            let joined = Batch { x: parts.iter().flat_map(|p| p.x.clone()).collect(), y: parts.iter().flat_map(|p| p.y.clone()).collect() };
            many.step(parts, EPOCH).unwrap();
            one.step(vec![joined], EPOCH).unwrap();
            let z = many.central_to_host(0).unwrap();
            for w in all_params(&many) {
                assert_same(&w, &z, "replica vs z");
            }
            for d in 1..layout.len() {
                assert_same(&many.central_to_host(d).unwrap(), &z, "z copies");
            }
        }
        assert_close_f32(&many.central_to_host(0).unwrap(), &one.central_to_host(0).unwrap(), Tolerance::new(1e-4, 1e-6), "S-SGD vs large batch");
    }

    /// The result does not depend on how learners are spread over devices (D = 1, m = 4 vs
    /// D = 2, m = 2, and D = 4, m = 1), given the same batches: for every synchroniser, z and
    /// every replica agree within f32 summation-order tolerance (1e-5 rel + 1e-6 abs) after two
    /// iterations (so momentum and the central momentum are exercised). Not more: the layouts
    /// add the same numbers in a different order (~1e-7 apart), and after a few steps a ReLU
    /// or max-pool input sitting that close to its kink flips and the runs diverge
    /// chaotically (seen at the third iteration: 1e-7 -> 3e-4) — a property of the model,
    /// not of the synchronisers.
    #[test]
    fn results_do_not_depend_on_the_device_layout(which in 0usize..3, seed in any::<u64>()) {
        let g = small_resnet();
        let make = |w: usize| -> Box<dyn Synchroniser<CpuBackend>> {
            match w {
                0 => Box::new(Sma::new(None, 0.9)),
                1 => Box::new(SSgd::default()),
                _ => Box::new(EaSgd::new(None)),
            }
        };
        let mut runs = vec![];
        for layout in [vec![4], vec![2, 2], vec![1, 1, 1, 1]] {
            let mut e = engine(&g, 4, &layout, make(which), sgd(), Schedule::Constant);
            run(&mut e, &g, 4, seed, 2);
            let mut all = all_params(&e);
            for d in 0..layout.len() {
                all.push(e.central_to_host(d).unwrap());
            }
            runs.push(all);
        }
        for other in &runs[1..] {
            for (a, b) in runs[0].iter().zip(other) {
                assert_close_f32(b, a, Tolerance::new(1e-5, 1e-6), "layouts");
            }
        }
    }

    /// One learner with α = 0 (no pull towards z) and μ_z = 0 follows plain SGD exactly.
    #[test]
    fn sma_one_learner_without_pull_is_plain_sgd(seed in any::<u64>(), nesterov in any::<bool>()) {
        let g = small_resnet();
        let cfg = SgdConfig { nesterov, ..sgd() };
        let mut s = engine(&g, 4, &[1], Box::new(Sma::new(Some(0.0), 0.0)), cfg, Schedule::Constant);
        let mut p = engine(&g, 4, &[1], Box::new(Independent::default()), cfg, Schedule::Constant);
        run(&mut s, &g, 4, seed, 4);
        run(&mut p, &g, 4, seed, 4);
        assert_same(&s.learner_params(0, 0).unwrap(), &p.learner_params(0, 0).unwrap(), "SMA(alpha=0) vs SGD");
    }

    /// With a constant learning rate EA-SGD is SMA without central momentum (same α), bit for bit.
    #[test]
    fn easgd_is_sma_without_central_momentum(k in 1usize..4, seed in any::<u64>()) {
        let g = small_lenet();
        let mut a = engine(&g, 3, &[k], Box::new(EaSgd::new(Some(0.2))), sgd(), Schedule::Constant);
        let mut b = engine(&g, 3, &[k], Box::new(Sma::new(Some(0.2), 0.0)), sgd(), Schedule::Constant);
        run(&mut a, &g, 3, seed, 3);
        run(&mut b, &g, 3, seed, 3);
        assert_same(&a.central_to_host(0).unwrap(), &b.central_to_host(0).unwrap(), "z");
        for (x, y) in all_params(&a).iter().zip(&all_params(&b)) {
            assert_same(x, y, "replicas");
        }
    }
}

/// One learner, α = 1, μ_z = 0: z_{t+1} is the learner before its step, and the learner
/// restarts from the previous z: w_{t+1} = z_t − γ∇ℓ(w_t) — not plain SGD (see crate docs).
#[test]
fn sma_one_learner_with_alpha_one_trails_by_a_step() {
    let g = small_lenet();
    let cfg = SgdConfig { momentum: 0.0, weight_decay: 0.0, ..sgd() };
    let mut e = engine(&g, 3, &[1], Box::new(Sma::new(None, 0.0)), cfg, Schedule::Constant);
    let mut plain = engine(&g, 3, &[1], Box::new(Independent::default()), cfg, Schedule::Constant);
    run(&mut e, &g, 3, 1, 1);
    run(&mut plain, &g, 3, 1, 1);
    // After one step from w = z: same as SGD.
    assert_same(&e.learner_params(0, 0).unwrap(), &plain.learner_params(0, 0).unwrap(), "first step");
    let w1 = e.learner_params(0, 0).unwrap();
    let z1 = e.central_to_host(0).unwrap();
    let bs = vec![batch(&g, 3, 1, 1, 0)];
    e.step(bs, EPOCH).unwrap();
    assert_same(&e.central_to_host(0).unwrap(), &w1, "z_2 = w_1");
    let w2 = e.learner_params(0, 0).unwrap();
    // w_2 = z_1 - lr * grad(w_1): recover the gradient from plain SGD's second step.
    plain.step(vec![batch(&g, 3, 1, 1, 0)], EPOCH).unwrap();
    let p2 = plain.learner_params(0, 0).unwrap();
    let want: Vec<f32> = z1.iter().zip(p2.iter().zip(&w1)).map(|(z, (p, w))| z + (p - w)).collect();
    assert_close_f32(&w2, &want, Tolerance::new(1e-5, 1e-6), "w_2 = z_1 - lr grad(w_1)");
}

/// When the schedule steps the rate down, every replica is reset to z and its momentum zeroed.
#[test]
fn sma_resets_replicas_when_the_learning_rate_drops() {
    let g = small_lenet();
    // 3 learners x batch 3 = 9 samples per iteration; epoch of 18 samples: drop at epoch 1
    // = after 2 iterations.
    let sched = Schedule::MultiStep { milestones: vec![1.0], gamma: 0.1 };
    let mut e = engine(&g, 3, &[3], Box::new(Sma::new(None, 0.9)), sgd(), sched);
    for t in 0..3 {
        let bs = (0..3).map(|j| batch(&g, 3, 9, t, j)).collect();
        let rec = e.step(bs, 18).unwrap();
        let z = e.central_to_host(0).unwrap();
        let reps = all_params(&e);
        if t == 2 {
            assert!((rec.lr - 0.005).abs() < 1e-9, "lr {}", rec.lr);
            for w in &reps {
                assert_same(w, &z, "replica reset to z");
            }
            for j in 0..3 {
                let l = e.learner(0, j).unwrap();
                assert!(l.replica().velocity.iter().all(|&v| v == 0.0), "momentum not zeroed");
            }
        } else {
            assert!(reps.iter().any(|w| w != &z), "replicas should differ from z before the drop");
        }
    }
}

#[test]
fn names_and_flags() {
    assert_eq!(SyncKind::parse("sma", None, 0.9).unwrap(), SyncKind::Sma { alpha: None, central_momentum: 0.9 });
    assert_eq!(SyncKind::parse("S-SGD", None, 0.9).unwrap(), SyncKind::SSgd);
    assert!(SyncKind::parse("hogwild", None, 0.9).unwrap_err().contains("unknown synchroniser 'hogwild'"));
    assert!(SyncKind::parse("sma", Some(f32::NAN), 0.9).unwrap_err().contains("--alpha"));
    assert!(SyncKind::parse("sma", None, 1.0).unwrap_err().contains("--central-momentum"));
}
