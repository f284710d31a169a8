//! One learner's step, piece by piece, per model: what a learner costs on one CPU core.
//!
//! For LeNet-5 (1x28x28) and the CIFAR ResNet-20 and ResNet-32 (3x32x32), 10 classes, at
//! batch 16 and 32, on the CPU backend with 1 thread (so every figure is per learner):
//!
//! * `forward`: the forward pass of a training step, batch statistics and loss included (an
//!   executor in `Mode::Calibrate`: the training program's forward half, without backward).
//! * `forward_eval`: the evaluation forward pass (`Mode::Eval`: running statistics, loss).
//! * `forward_backward`: the whole training program (`Mode::Train`: forward, loss, backward
//!   into the gradient buffer), as `Executor::run` runs it every iteration.
//! * `sgd_step`: the local optimiser step, `Backend::sgd_step` over the model's flat
//!   parameters (momentum 0.9, weight decay 1e-4); independent of the batch size.
//!
//! Throughput is in images for the passes and in bytes of parameters for `sgd_step`. The
//! batch is uploaded once, outside the timing.
//!
//! `cargo bench -p crossbow-benches --bench learner_step` (filter with e.g. `-- resnet32/`)

// Benchmarks: a failing setup or kernel call should abort the run.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::prelude::*;
use crossbow_kernels::{CpuBackend, View, ViewMut};
use crossbow_replica::exec::Executor;
use crossbow_replica::program::Mode;
use crossbow_replica::{Graph, ModelKind, Replica};
use crossbow_tensor::Shape;

const BATCHES: [usize; 2] = [16, 32];

fn models() -> Vec<(ModelKind, Shape)> {
    vec![
        (ModelKind::LeNet5, Shape::new(vec![1, 28, 28])),
        (ModelKind::ResNetCifar(20), Shape::new(vec![3, 32, 32])),
        (ModelKind::ResNetCifar(32), Shape::new(vec![3, 32, 32])),
    ]
}

/// A deterministic batch: images in [-1, 1), labels cycling over the classes.
fn batch(graph: &Graph, n: usize) -> (Vec<f32>, Vec<f32>) {
    let per: usize = graph.input_shape().dims().iter().product();
    let images = (0..n * per).map(|i| ((i * 7919 % 2000) as f32 / 1000.0) - 1.0).collect();
    let labels = (0..n).map(|i| (i % graph.classes) as f32).collect();
    (images, labels)
}

/// An executor for `graph` at `n` in `mode`, with the batch already on the device.
fn executor(be: &CpuBackend, graph: &Graph, n: usize, mode: Mode) -> Executor<CpuBackend> {
    let mut exec = Executor::new(be, graph, n, mode).unwrap_or_else(|e| panic!("{}: {e}", graph.name));
    let (images, labels) = batch(graph, n);
    exec.upload_batch(be, &images, &labels).unwrap_or_else(|e| panic!("{}: {e}", graph.name));
    exec
}

fn learner_step(c: &mut Criterion) {
    let be = CpuBackend::new(0);
    for (kind, input) in models() {
        let graph = kind.build(&input, 10).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let mut replica = Replica::init(&be, &graph, 1).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let mut g = c.benchmark_group(format!("learner_step/{kind}"));
        g.sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));

        for n in BATCHES {
            g.throughput(Throughput::Elements(n as u64));
            for (name, mode) in [("forward", Mode::Calibrate), ("forward_eval", Mode::Eval)] {
                let mut exec = executor(&be, &graph, n, mode);
                g.bench_function(BenchmarkId::new(name, format!("b{n}")), |b| {
                    b.iter(|| {
                        exec.run(&be, &replica.params, None, &mut replica.state, 7).unwrap();
                        black_box(&exec);
                    })
                });
            }
            let mut exec = executor(&be, &graph, n, Mode::Train);
            g.bench_function(BenchmarkId::new("forward_backward", format!("b{n}")), |b| {
                b.iter(|| {
                    exec.run(&be, &replica.params, Some(&mut replica.grads), &mut replica.state, 7).unwrap();
                    black_box(&replica.grads);
                })
            });
        }

        // The local step reads the gradient the last forward_backward left (finite, small).
        let len = graph.param_len;
        let cfg = SgdConfig { lr: 0.01, momentum: 0.9, weight_decay: 1e-4, nesterov: false };
        g.throughput(Throughput::Bytes(4 * len as u64));
        g.bench_function("sgd_step", |b| {
            b.iter(|| {
                be.sgd_step(
                    &cfg,
                    ViewMut::new(&mut replica.params, 0..len).unwrap(),
                    View::new(&replica.grads, 0..len).unwrap(),
                    ViewMut::new(&mut replica.velocity, 0..len).unwrap(),
                )
                .unwrap()
            })
        });
        g.finish();
    }
}

criterion_group!(benches, learner_step);
criterion_main!(benches);
