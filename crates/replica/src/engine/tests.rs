//! Engine tests on CPU devices: learners added and removed directly, layouts of devices x
//! learners, and the errors a caller can cause.

use crossbow_kernels::CpuBackend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::testing::random_vec;
use crossbow_tensor::{Rng, Shape};

use super::*;
use crate::models::ModelKind;
use crate::sync::{HostAllReduce, Independent};

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

fn graph() -> Graph {
    ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 6, 6]), 4).unwrap()
}

fn batches(g: &Graph, b: usize, k: usize, t: u64) -> Vec<Batch> {
    let per: usize = g.input_shape().dims().iter().product();
    (0..k)
        .map(|j| {
            let s = 17 ^ (t << 20) ^ (j as u64 * 7919);
            let mut r = Rng::new(s);
            Batch { x: random_vec(s, b * per, 1.0), y: (0..b).map(|_| r.below(g.classes) as f32).collect() }
        })
        .collect()
}

fn engine(g: &Graph, layout: &[usize]) -> Engine<CpuBackend> {
    let cfg = EngineConfig {
        batch_size: 3,
        sgd: SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-4, nesterov: false },
        schedule: Schedule::Constant,
        seed: 3,
        eval_batch_size: 4,
    };
    Engine::new(
        g.clone(),
        cfg,
        Box::new(CpuDevices { count: layout.len(), threads: 2 }),
        Box::new(Independent::default()),
        Box::new(HostAllReduce),
        layout,
    )
    .unwrap()
}

/// Every layout runs, reports its learners, images and one compute time per device.
#[test]
fn layouts_of_devices_and_learners() {
    let g = graph();
    for layout in [vec![1], vec![3], vec![1, 1], vec![2, 3], vec![1, 1, 1]] {
        let mut e = engine(&g, &layout);
        let k: usize = layout.iter().sum();
        assert_eq!(e.learners(), k);
        for t in 0..2 {
            let rec = e.step(batches(&g, 3, k, t), 1000).unwrap();
            assert_eq!(rec.learners, layout);
            assert_eq!(rec.images, 3 * k);
            assert_eq!(rec.device_seconds.len(), layout.len());
            assert!(rec.device_seconds.iter().all(|s| *s > 0.0 && *s <= rec.seconds));
            assert!(rec.loss.is_finite());
        }
        assert_eq!(e.iteration(), 2);
        assert_eq!(e.samples(), 6 * k as u64);
        // Every device's copy of z is the same.
        let z0 = e.central_to_host(0).unwrap();
        for d in 1..layout.len() {
            assert_eq!(e.central_to_host(d).unwrap(), z0, "z on device {d}");
        }
    }
}

/// A learner added is a copy of its device's z with zero momentum; the newest learner is the
/// one removed; the last learner of a device cannot be removed; the iteration then needs one
/// batch per learner of the new layout.
#[test]
fn learners_added_and_removed_directly() {
    let g = graph();
    let mut e = engine(&g, &[1, 2]);
    e.step(batches(&g, 3, 3, 0), 1000).unwrap();
    e.add_learner(0).unwrap();
    assert_eq!(e.layout(), vec![2, 2]);
    let z = e.central_to_host(0).unwrap();
    assert_eq!(e.learner_params(0, 1).unwrap(), z);
    let newest = e.learner(0, 1).unwrap();
    assert!(newest.replica().velocity.iter().all(|v| *v == 0.0));
    let new_id = newest.id();
    assert!(e.step(batches(&g, 3, 3, 1), 1000).is_err(), "3 batches for 4 learners");
    e.step(batches(&g, 3, 4, 1), 1000).unwrap();
    e.remove_learner(0).unwrap();
    assert_eq!(e.layout(), vec![1, 2]);
    assert!(e.learner(0, 0).unwrap().id() != new_id, "the newest learner goes first");
    let err = e.remove_learner(0).unwrap_err().to_string();
    assert!(err.contains("one learner left"), "{err}");
    assert!(e.remove_learner(7).is_err());
    assert!(e.add_learner(7).is_err());
    e.step(batches(&g, 3, 3, 2), 1000).unwrap();
}

/// Bad engine settings are errors, not panics.
#[test]
fn bad_layouts_are_errors() {
    let g = graph();
    let cfg = EngineConfig {
        batch_size: 3,
        sgd: SgdConfig::plain(0.1),
        schedule: Schedule::Constant,
        seed: 1,
        eval_batch_size: 4,
    };
    let make = |layout: &[usize], count: usize| {
        Engine::<CpuBackend>::new(
            g.clone(),
            cfg.clone(),
            Box::new(CpuDevices { count, threads: 1 }),
            Box::new(Independent::default()),
            Box::new(HostAllReduce),
            layout,
        )
    };
    assert!(make(&[1, 0], 2).is_err());
    assert!(make(&[1], 2).is_err());
    assert!(make(&[1, 1], 0).is_err());
}
