//! Exact resume: an engine (and its auto-tuner) saved to a checkpoint file at any iteration
//! and restored into a fresh engine continues bit for bit like the run that never stopped,
//! with SMA's central momentum, a learning-rate drop and a tuner change on the way.

// Test helpers: a failure to build the engine or run a step should fail the test.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use crossbow_kernels::CpuBackend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::testing::random_vec;
use crossbow_replica::checkpoint::CheckpointFile;
use crossbow_replica::engine::{AutoTuner, CpuDevices, Engine, EngineConfig, EngineSnapshot, IterationRecord};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, ModelKind, Schedule};
use crossbow_sma::Sma;
use crossbow_tensor::{Rng, Shape};
use crossbow_tuner::TunerConfig;

use crossbow_replica::testing::harness::Batch;

const EPOCH: usize = 200;

fn graph() -> Graph {
    // With batch norm: its running statistics are part of the state.
    ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 6, 6]), 4).unwrap()
}

/// Batch `j` of iteration `t` (independent of the layout).
fn batch(g: &Graph, t: u64, j: usize) -> Batch {
    let per: usize = g.input_shape().dims().iter().product();
    let s = 11 ^ (t << 20) ^ (j as u64 * 7919);
    let mut r = Rng::new(s);
    Batch { x: random_vec(s, 4 * per, 1.0), y: (0..4).map(|_| r.below(g.classes) as f32).collect() }
}

fn engine(g: &Graph, layout: &[usize]) -> Engine<CpuBackend> {
    let cfg = EngineConfig {
        batch_size: 4,
        sgd: SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-3, nesterov: false },
        // A drop at epoch 0.5 (iteration 13 with 2 x 2 learners of 4 images, 200 per epoch).
        schedule: "multistep:0.5:0.1".parse::<Schedule>().unwrap(),
        seed: 5,
        eval_batch_size: 8,
    };
    Engine::new(
        g.clone(),
        cfg,
        Box::new(CpuDevices { count: layout.len(), threads: 1 }),
        Box::new(Sma::new(None, 0.9)),
        Box::new(HostAllReduce),
        layout,
    )
    .unwrap()
}

fn step(e: &mut Engine<CpuBackend>, g: &Graph) -> IterationRecord {
    let t = e.iteration();
    let bs = (0..e.learners()).map(|j| batch(g, t, j)).collect();
    e.step(bs, EPOCH).unwrap()
}

/// Through a file's bytes and back, as a resumed process would see it.
fn through_file(snap: &EngineSnapshot, tuner: Option<&AutoTuner>) -> (EngineSnapshot, Option<serde_json::Value>) {
    let mut f = CheckpointFile::new(serde_json::json!({}));
    snap.to_checkpoint(&mut f).unwrap();
    if let Some(t) = tuner {
        f.state.as_object_mut().unwrap().insert("tuner".into(), t.save().unwrap());
    }
    let back = CheckpointFile::from_bytes(Path::new("mem"), &f.to_bytes().unwrap()).unwrap();
    (EngineSnapshot::from_checkpoint(&back, Path::new("mem")).unwrap(), back.state.get("tuner").cloned())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn resumed_at_any_iteration_is_bit_identical() {
    let g = graph();
    let n = 20;
    let mut full = engine(&g, &[2, 2]);
    let losses: Vec<u64> = (0..n).map(|_| step(&mut full, &g).loss.to_bits()).collect();
    let end = full.snapshot().unwrap();
    // Before the first step, mid-way, right before and right after the rate drop, near the end.
    for stop in [0u64, 1, 7, 12, 13, 14, 19] {
        let mut a = engine(&g, &[2, 2]);
        for _ in 0..stop {
            step(&mut a, &g);
        }
        let (snap, _) = through_file(&a.snapshot().unwrap(), None);
        drop(a);
        let mut b = engine(&g, &[2, 2]);
        let notes = b.restore(&snap).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        let rest: Vec<u64> = (stop..n).map(|_| step(&mut b, &g).loss.to_bits()).collect();
        assert_eq!(rest, losses[stop as usize..], "losses after resuming at {stop}");
        let got = b.snapshot().unwrap();
        assert_eq!(got.iteration, end.iteration);
        for (x, y) in got.devices.iter().zip(&end.devices) {
            assert_eq!(bits(&x.z), bits(&y.z), "z after resuming at {stop}");
            for (v, w) in x.sync_state.iter().zip(&y.sync_state) {
                assert_eq!(bits(v), bits(w), "synchroniser state after resuming at {stop}");
            }
            for (l, m) in x.learners.iter().zip(&y.learners) {
                assert_eq!(bits(&l.params), bits(&m.params));
                assert_eq!(bits(&l.velocity), bits(&m.velocity));
                assert_eq!(bits(&l.stats), bits(&m.stats));
            }
        }
    }
}

/// A fake clock: device throughput peaks at 3 learners, so the tuner adds learners, then
/// removes one; the measurements are deterministic.
fn timed(mut rec: IterationRecord) -> IterationRecord {
    let k = rec.learners[0] as f64;
    let per_img = 1.0 + 0.3 * (k - 3.0).powi(2) / k;
    let secs = rec.images as f64 * per_img * 1e-3;
    rec.seconds = secs;
    rec.device_seconds = vec![secs];
    rec
}

fn tuner(e: &Engine<CpuBackend>) -> AutoTuner {
    let tc = TunerConfig { max_learners: 4, warmup_windows: 0, windows_per_count: 2, ..TunerConfig::default() };
    AutoTuner::new(e, tc, true).unwrap()
}

#[test]
fn resumed_right_after_a_tuner_change_is_bit_identical() {
    let g = graph();
    let n = 30u64;
    let mut full = engine(&g, &[1]);
    let mut t = tuner(&full);
    let mut trace = vec![];
    let mut changes = vec![];
    for _ in 0..n {
        let rec = timed(step(&mut full, &g));
        let before = full.layout();
        t.after_step(&mut full, &rec).unwrap();
        if full.layout() != before {
            changes.push(full.iteration());
        }
        trace.push((rec.loss.to_bits(), full.layout()));
    }
    assert!(changes.len() >= 2, "the fake clock should make the tuner add learners: {changes:?}");
    let end = full.snapshot().unwrap();
    for &stop in &changes {
        let mut a = engine(&g, &[1]);
        let mut ta = tuner(&a);
        for _ in 0..stop {
            let rec = timed(step(&mut a, &g));
            ta.after_step(&mut a, &rec).unwrap();
        }
        let (snap, ts) = through_file(&a.snapshot().unwrap(), Some(&ta));
        let mut b = engine(&g, &snap.layout());
        assert!(b.restore(&snap).unwrap().is_empty());
        let mut tb = tuner(&b);
        tb.restore(&ts.unwrap()).unwrap();
        for i in stop..n {
            let rec = timed(step(&mut b, &g));
            tb.after_step(&mut b, &rec).unwrap();
            assert_eq!((rec.loss.to_bits(), b.layout()), trace[i as usize], "iteration {i} after resuming at {stop}");
        }
        assert_eq!(bits(&b.snapshot().unwrap().devices[0].z), bits(&end.devices[0].z));
    }
}

#[test]
fn resuming_onto_another_layout_carries_the_learners_over() {
    let g = graph();
    let mut a = engine(&g, &[2]);
    for _ in 0..5 {
        step(&mut a, &g);
    }
    let snap = a.snapshot().unwrap();
    let mut b = engine(&g, &[2, 1]);
    let notes = b.restore(&snap).unwrap();
    assert!(notes.iter().any(|n| n.contains("had 2 learners") && n.contains("this run has 3")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("1 learner(s) start as a copy")), "{notes:?}");
    assert_eq!(b.iteration(), 5);
    assert_eq!(bits(&b.central_to_host(1).unwrap()), bits(&snap.devices[0].z));
    assert_eq!(bits(&b.learner_params(0, 1).unwrap()), bits(&snap.devices[0].learners[1].params));
    let rec = step(&mut b, &g);
    assert!(rec.loss.is_finite());

    // Fewer learners: the extra one is dropped, and said so.
    let mut c = engine(&g, &[1]);
    let notes = c.restore(&snap).unwrap();
    assert!(notes.iter().any(|n| n.contains("1 learner(s) of the checkpoint are dropped")), "{notes:?}");
}

#[test]
fn another_models_checkpoint_is_refused_with_both_sizes() {
    let g = graph();
    let snap = engine(&g, &[1]).snapshot().unwrap();
    let other = ModelKind::LeNet5.build(&Shape::new(vec![3, 6, 6]), 4);
    let Ok(other) = other else { return };
    let mut e = Engine::new(
        other,
        EngineConfig {
            batch_size: 2,
            sgd: SgdConfig { lr: 0.1, momentum: 0.0, weight_decay: 0.0, nesterov: false },
            schedule: Schedule::Constant,
            seed: 1,
            eval_batch_size: 2,
        },
        Box::new(CpuDevices { count: 1, threads: 1 }),
        Box::new(Sma::new(None, 0.9)),
        Box::new(HostAllReduce),
        &[1],
    )
    .unwrap();
    let err = e.restore(&snap).unwrap_err().to_string();
    assert!(err.contains("resnet") || err.contains("parameters"), "{err}");
    assert!(err.contains(&g.param_len.to_string()), "{err}");
}
