//! The auto-tuner's cost per decision: one `observe` (which answers the decision) on a tuner
//! that is already warmed up, with 1 and 8 devices. The engine calls it once per device per
//! measurement window, so it must cost microseconds at most, never milliseconds.
//!
//! * `settled`: the steady state — a settled device watching its sliding median.
//! * `deciding`: the costliest call — the window that completes a count's median and decides
//!   the next probe (the tuner is cloned just before that window, outside the timing).
//! * `round_8_devices`: one window for each of 8 devices, as an engine iteration would.
//!
//! `cargo bench -p crossbow-benches --bench tuner`

// Benchmarks: a failing setup or kernel call should abort the run.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use crossbow_tuner::{Decision, MemoryFigures, Sample, Tuner, TunerConfig};

const GIB: u64 = 1 << 30;

/// Throughput peaking at 4 learners.
fn curve(m: usize) -> f64 {
    [0.0, 400.0, 700.0, 900.0, 1000.0, 980.0, 900.0, 800.0, 700.0].get(m).copied().unwrap_or(500.0)
}

/// ±10% noise, deterministic: a cycle of precomputed multipliers.
fn noise() -> Vec<f64> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            0.9 + 0.2 * ((x >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// A tuner over `devices` devices, driven until every device has settled and its monitor is
/// full. Returns it with the learner count of each device.
fn settled_tuner(devices: usize, noise: &[f64]) -> (Tuner, Vec<usize>) {
    let mut tuner = Tuner::new(TunerConfig::default(), devices).expect("valid config");
    let memory = MemoryFigures::new(3 * GIB, GIB, 40 * GIB);
    let mut learners = vec![tuner.initial_learners(); devices];
    let mut i = 0;
    for window in 0..100_000 {
        for (d, n) in learners.iter_mut().enumerate() {
            let mut sample = Sample::from_rate(*n, curve(*n) * noise[i % noise.len()]);
            i += 1;
            if window == 0 {
                sample = sample.with_memory(memory);
            }
            let report = tuner.observe(d, &sample).expect("device exists");
            match report.decision {
                Decision::AddLearner => *n += 1,
                Decision::RemoveLearner => *n -= 1,
                Decision::Keep | Decision::Settled => {}
            }
        }
        // Settled, and the reference and the monitor window are full.
        if tuner.all_settled() && window > 400 {
            return (tuner, learners);
        }
    }
    panic!("the benchmark tuner did not settle");
}

fn bench(c: &mut Criterion) {
    let noise = noise();
    let mut group = c.benchmark_group("tuner");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));

    for devices in [1usize, 8] {
        let (mut tuner, learners) = settled_tuner(devices, &noise);
        let mut i = 0usize;
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("settled/observe/{devices}_devices"), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let d = i % devices;
                let n = learners[d];
                let sample = Sample::from_rate(n, curve(n) * noise[i % noise.len()]);
                black_box(tuner.observe(black_box(d), black_box(&sample)))
            })
        });
    }

    // The window that completes a count's median and decides: clone the tuner just before it.
    for devices in [1usize, 8] {
        let mut tuner = Tuner::new(TunerConfig::default(), devices).expect("valid config");
        let memory = MemoryFigures::new(3 * GIB, GIB, 40 * GIB);
        // First window (spans start-up), two warm-up windows, four of the five measured.
        for w in 0..7 {
            for d in 0..devices {
                let mut s = Sample::from_rate(1, 400.0 * noise[w + d]);
                if w == 0 {
                    s = s.with_memory(memory);
                }
                tuner.observe(d, &s).expect("device exists");
            }
        }
        let last = Sample::from_rate(1, 400.0);
        assert_eq!(tuner.clone().observe(0, &last).expect("device exists").decision, Decision::AddLearner);
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("deciding/observe/{devices}_devices"), |b| {
            b.iter_batched_ref(|| tuner.clone(), |t| black_box(t.observe(0, black_box(&last))), BatchSize::SmallInput)
        });
    }

    let (mut tuner, learners) = settled_tuner(8, &noise);
    let mut i = 0usize;
    group.throughput(Throughput::Elements(8));
    group.bench_function("settled/round_8_devices", |b| {
        b.iter(|| {
            for (d, &n) in learners.iter().enumerate() {
                i = i.wrapping_add(1);
                let sample = Sample::from_rate(n, curve(n) * noise[i % noise.len()]);
                black_box(tuner.observe(d, black_box(&sample)).ok());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
