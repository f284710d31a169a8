//! The memory planner and the lowering it plans, on the training programs (batch 32) of
//! LeNet-5 (1x28x28), the CIFAR ResNet-32 (3x32x32) and ResNet-50 (3x224x224, 1000 classes):
//!
//! * `lower`: `program::lower(graph, 32, Mode::Train)`, graph to straight-line program.
//! * `plan`: `plan::plan(&program)`, tensors onto reused slots, on an already lowered program.
//!
//! Both run once per learner model when an engine starts (several learners of one model
//! share one plan). Throughput is in program instructions.
//!
//! `cargo bench -p crossbow-benches --bench memory_plan`

// Benchmarks: a failing setup or kernel call should abort the run.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crossbow_replica::ModelKind;
use crossbow_replica::plan::plan;
use crossbow_replica::program::{Mode, lower};
use crossbow_tensor::Shape;

const BATCH: usize = 32;

fn memory_plan(c: &mut Criterion) {
    let models = [
        (ModelKind::LeNet5, vec![1, 28, 28], 10),
        (ModelKind::ResNetCifar(32), vec![3, 32, 32], 10),
        (ModelKind::ResNet50, vec![3, 224, 224], 1000),
    ];
    let mut g = c.benchmark_group("memory_plan");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for (kind, input, classes) in models {
        let graph = kind.build(&Shape::new(input), classes).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let program = lower(&graph, BATCH, Mode::Train).unwrap_or_else(|e| panic!("{kind}: {e}"));
        g.throughput(Throughput::Elements(program.instrs.len() as u64));
        g.bench_function(BenchmarkId::new("lower", format!("{kind}/b{BATCH}")), |b| {
            b.iter(|| lower(black_box(&graph), BATCH, Mode::Train).unwrap())
        });
        g.bench_function(BenchmarkId::new("plan", format!("{kind}/b{BATCH}")), |b| {
            b.iter(|| plan(black_box(&program)))
        });
    }
    g.finish();
}

criterion_group!(benches, memory_plan);
criterion_main!(benches);
