//! S-SGD with a global batch ([`Engine::set_global_batch`]): the images of an iteration are
//! fixed and the learners split them, so the learner count (what the auto-tuner chooses for
//! speed) leaves the optimisation as it was: the central model follows the same trajectory,
//! to rounding, at 1, 2 or 4 learners, and when the count changes mid-run. With batch norm
//! that holds when a device's learners normalise together ([`BnGroup::Device`]).

// Test helpers: a failure to build the engine or run a step should fail the test.
#![allow(clippy::unwrap_used)]

use crossbow_kernels::CpuBackend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::testing::random_vec;
use crossbow_replica::engine::{AutoTuner, BnGroup, CpuDevices, Engine, EngineConfig, IterationRecord};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::testing::harness::Batch;
use crossbow_replica::{Graph, ModelKind, Schedule};
use crossbow_sma::SSgd;
use crossbow_tensor::{Rng, Shape};
use crossbow_tuner::TunerConfig;

const GLOBAL: usize = 8;

fn plain() -> Graph {
    let mut b = crossbow_replica::graph::GraphBuilder::new("tiny", Shape::new(vec![1, 6, 6])).unwrap();
    let x = b.input();
    let c = b.conv2d("c", x, 3, 3, 1, 1, true).unwrap();
    let r = b.relu("r", c).unwrap();
    let p = b.max_pool("p", r, 2, 2, 0, false).unwrap();
    let out = b.linear("fc", p, 4, true).unwrap();
    b.finish(out).unwrap()
}

fn with_bn() -> Graph {
    ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 6, 6]), 4).unwrap()
}

/// The `GLOBAL` images of iteration `t` (the same whatever the learner count).
fn images(g: &Graph, t: u64) -> Batch {
    let per: usize = g.input_shape().dims().iter().product();
    let s = 23 ^ (t << 20);
    let mut r = Rng::new(s);
    Batch { x: random_vec(s, GLOBAL * per, 1.0), y: (0..GLOBAL).map(|_| r.below(g.classes) as f32).collect() }
}

/// Iteration `t`'s images in `k` equal parts, in order.
fn split(g: &Graph, t: u64, k: usize) -> Vec<Batch> {
    let per: usize = g.input_shape().dims().iter().product();
    let all = images(g, t);
    let b = GLOBAL / k;
    (0..k)
        .map(|j| Batch { x: all.x[j * b * per..(j + 1) * b * per].to_vec(), y: all.y[j * b..(j + 1) * b].to_vec() })
        .collect()
}

fn engine(g: &Graph, k: usize, global: Option<usize>, bn: BnGroup) -> Engine<CpuBackend> {
    let cfg = EngineConfig {
        batch_size: global.map_or(GLOBAL, |n| n / k),
        sgd: SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-3, nesterov: false },
        schedule: Schedule::Constant,
        seed: 5,
        eval_batch_size: 8,
    };
    let mut e = Engine::new(
        g.clone(),
        cfg,
        Box::new(CpuDevices { count: 1, threads: 2 }),
        Box::new(SSgd::default()),
        Box::new(HostAllReduce),
        &[k],
    )
    .unwrap();
    e.set_bn_group(bn);
    e.set_global_batch(global).unwrap();
    e
}

/// Runs `counts.len()` iterations, the learner count before iteration `t` set to `counts[t]`.
fn train(g: &Graph, counts: &[usize], bn: BnGroup) -> (Vec<f32>, Vec<f64>) {
    let mut e = engine(g, counts[0], Some(GLOBAL), bn);
    let mut losses = vec![];
    for (t, &k) in counts.iter().enumerate() {
        while e.learners() < k {
            e.add_learner(0).unwrap();
        }
        while e.learners() > k {
            e.remove_learner(0).unwrap();
        }
        e.sync_layout().unwrap();
        assert_eq!(e.batch_size(), GLOBAL / k);
        let rec = e.step(split(g, t as u64, k), 1000).unwrap();
        assert_eq!(rec.images, GLOBAL, "every iteration takes the global batch");
        assert_eq!(e.images_per_iteration(), GLOBAL);
        losses.push(rec.loss);
    }
    (e.central_to_host(0).unwrap(), losses)
}

/// Largest difference relative to the largest magnitude.
fn rel(a: &[f32], b: &[f32]) -> f64 {
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs() as f64).fold(0.0, f64::max);
    let m = a.iter().map(|x| x.abs() as f64).fold(1e-12, f64::max);
    d / m
}

#[test]
fn the_learner_count_leaves_the_trajectory_as_it_was() {
    let g = plain();
    let n = 12;
    let (one, l1) = train(&g, &vec![1; n], BnGroup::Learner);
    for counts in [vec![2; n], vec![4; n], vec![1, 1, 2, 2, 4, 4, 8, 8, 2, 1, 4, 2]] {
        let (z, l) = train(&g, &counts, BnGroup::Learner);
        assert!(rel(&one, &z) < 1e-5, "{counts:?}: z differs by {:.2e} of its largest value", rel(&one, &z));
        for (a, b) in l1.iter().zip(&l) {
            assert!((a - b).abs() <= 1e-5 * a.abs().max(1.0), "{counts:?}: losses {l1:?} against {l:?}");
        }
    }
    // The control: the same learners each on a batch of their own (the aggregate grows with
    // them) go elsewhere, so the comparison above can fail.
    let mut e = engine(&g, 2, None, BnGroup::Learner);
    for t in 0..n as u64 {
        let mut bs = split(&g, t, 1);
        bs.extend(split(&g, t + 1000, 1));
        e.step(bs, 1000).unwrap();
    }
    let other = e.central_to_host(0).unwrap();
    assert!(rel(&one, &other) > 1e-3, "the control should differ: {:.2e}", rel(&one, &other));
}

#[test]
fn with_batch_norm_over_the_device_the_count_changes_nothing_either() {
    let g = with_bn();
    let n = 6;
    let (one, _) = train(&g, &vec![1; n], BnGroup::Device);
    let (two, _) = train(&g, &[1, 2, 2, 4, 2, 2], BnGroup::Device);
    assert!(rel(&one, &two) < 1e-4, "z differs by {:.2e}", rel(&one, &two));
    // Each learner normalising its own share is another model: it must differ.
    let (own, _) = train(&g, &[2; 6], BnGroup::Learner);
    assert!(rel(&one, &own) > 1e-3, "batch norm over shares of 4 should differ: {:.2e}", rel(&one, &own));
}

#[test]
fn a_count_that_does_not_divide_the_global_batch_is_an_error_not_a_wrong_step() {
    let g = plain();
    let mut e = engine(&g, 1, Some(GLOBAL), BnGroup::Learner);
    assert!(e.set_global_batch(Some(0)).is_err());
    e.add_learner(0).unwrap();
    e.add_learner(0).unwrap();
    let err = e.step(split(&g, 0, 1), 1000).unwrap_err().to_string();
    assert!(err.contains("global batch of 8 images does not divide into 3 equal learner batches"), "{err}");
    e.remove_learner(0).unwrap();
    e.sync_layout().unwrap();
    assert_eq!(e.batch_size(), 4);
    // Batches of the old share are refused, not trained on.
    assert!(e.step(split(&g, 0, 1), 1000).is_err());
    assert!(e.step(split(&g, 0, 2), 1000).is_ok());
    // More learners than images.
    let mut e = engine(&g, 4, Some(GLOBAL), BnGroup::Learner);
    assert!(e.set_global_batch(Some(2)).unwrap_err().to_string().contains("2 images does not divide into 4"));
}

/// A fake clock: throughput peaks at 4 learners.
fn timed(mut rec: IterationRecord) -> IterationRecord {
    let k = rec.learners[0] as f64;
    let per_img = 1.0 + 0.2 * (k - 4.0).powi(2) / k;
    let secs = rec.images as f64 * per_img * 1e-3;
    rec.seconds = secs;
    rec.device_seconds = vec![secs];
    rec
}

/// The auto-tuner with a global batch tries only counts that divide it (here 1, 2, 4, 8 of
/// 8 images), settles on the fastest, and the trajectory is the one learner's all the same.
#[test]
fn the_tuner_chooses_among_the_counts_that_divide_the_global_batch() {
    let g = plain();
    let n = 60;
    let (one, _) = train(&g, &vec![1; n], BnGroup::Learner);
    let mut e = engine(&g, 1, Some(GLOBAL), BnGroup::Learner);
    let tc = TunerConfig {
        max_learners: 8,
        warmup_windows: 0,
        windows_per_count: 2,
        search_window_seconds: 0.0,
        monitor_window_seconds: 0.0,
        ..TunerConfig::default()
    };
    let mut tuner = AutoTuner::new(&e, tc, true).unwrap();
    assert_eq!(tuner.counts(), Some(&[1usize, 2, 4, 8][..]));
    let (mut seen, mut lines) = (vec![], vec![]);
    for t in 0..n as u64 {
        e.sync_layout().unwrap();
        let k = e.learners();
        seen.push(k);
        let rec = timed(e.step(split(&g, t, k), 1000).unwrap());
        for ev in tuner.after_step(&mut e, &rec).unwrap() {
            lines.push(ev.line());
        }
    }
    assert!(tuner.settled(), "{lines:#?}");
    assert_eq!(e.learners(), 4, "{lines:#?}");
    assert!(seen.iter().all(|k| [1, 2, 4, 8].contains(k)), "{seen:?}");
    assert!(seen.contains(&8), "the climb went past the best: {seen:?}");
    // Lines speak of learners, and of steps where a move spans several.
    assert!(lines.iter().any(|l| l.contains("8 learners")), "{lines:#?}");
    let z = e.central_to_host(0).unwrap();
    assert!(rel(&one, &z) < 1e-5, "z differs by {:.2e}", rel(&one, &z));

    // Several devices: refused, with the reason.
    let mut two = Engine::new(
        g.clone(),
        EngineConfig {
            batch_size: 4,
            sgd: SgdConfig::plain(0.1),
            schedule: Schedule::Constant,
            seed: 1,
            eval_batch_size: 8,
        },
        Box::new(CpuDevices { count: 2, threads: 1 }),
        Box::new(SSgd::default()),
        Box::new(HostAllReduce),
        &[1, 1],
    )
    .unwrap();
    two.set_global_batch(Some(GLOBAL)).unwrap();
    let err = AutoTuner::new(&two, tc, true).err().unwrap().to_string();
    assert!(err.contains("needs one device in one process"), "{err}");
}
