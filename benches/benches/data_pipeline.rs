//! The input pipeline: CIFAR-shaped (3x32x32) batches of 128, shuffled, augmented (random crop
//! with 4-pixel padding + horizontal flip) and normalised, as the training loop receives them,
//! with 1 and 2 worker threads; and the generation speed of the synthetic datasets on one core.
//!
//! `cargo bench -p crossbow-benches --bench data_pipeline`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use crossbow_data::{Augment, DatasetKind, LoadOptions, Pipeline, PipelineConfig, load};

const BATCH: usize = 128;

fn pipeline(c: &mut Criterion) {
    let opts = LoadOptions { seed: 1, train_size: Some(10_000), test_size: Some(100), ..LoadOptions::default() };
    let (train, _) = match load(DatasetKind::SyntheticShapes, ".", &opts) {
        Ok(d) => d,
        Err(e) => panic!("cannot generate the benchmark dataset: {e}"),
    };
    let train = Arc::new(train);
    let mut group = c.benchmark_group("data_pipeline");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.measurement_time(Duration::from_secs(5));
    for workers in [1, 2] {
        let config =
            PipelineConfig { workers, prefetch: 16, augment: Some(Augment::cifar()), ..PipelineConfig::new(BATCH, 7) };
        let mut p = match Pipeline::new(Arc::clone(&train), config) {
            Ok(p) => p,
            Err(e) => panic!("cannot start the pipeline: {e}"),
        };
        group.bench_function(format!("cifar_crop_flip_norm_b{BATCH}/workers={workers}"), |b| {
            b.iter(|| match p.next_batch() {
                Ok(batch) => black_box(batch.images()[0]),
                Err(e) => panic!("{e}"),
            })
        });
    }
    group.finish();
}

fn synthetic(c: &mut Criterion) {
    let one_core = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let mut group = c.benchmark_group("synthetic_generation_1_thread");
    group.sample_size(10);
    let n = 2_000;
    group.throughput(Throughput::Elements(n as u64));
    for kind in [DatasetKind::SyntheticDigits, DatasetKind::SyntheticShapes] {
        let opts = LoadOptions { seed: 1, train_size: Some(n), test_size: Some(1), ..LoadOptions::default() };
        group.bench_function(kind.name(), |b| {
            b.iter(|| one_core.install(|| black_box(load(kind, ".", &opts).map(|d| d.0.len()))))
        });
    }
    group.finish();
}

criterion_group!(benches, pipeline, synthetic);
criterion_main!(benches);
