//! GEMM and conv2d throughput at the layer shapes of LeNet-5 and the CIFAR ResNets, in
//! FLOP/s (criterion's "elements" are FLOPs). `cargo bench -p crossbow-benches --bench gemm_conv`,
//! then `scripts/criterion-table.py peak gemm conv2d`: every shape also as a fraction of the
//! peak (`peak_fma`, the widest FMA unit on 1 thread and on every core) measured in the run.

// Benchmarks: a failing setup or kernel call should abort the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crossbow_kernels::conv2d::Conv2dGeom;
use crossbow_kernels::prelude::*;
use crossbow_kernels::{CpuGemm, GemmConfig};

fn fill(len: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 7919 % 1000) as f32 / 1000.0) - 0.5).collect()
}

/// im2col GEMM shapes at batch 32 (per image): (name, m, n, k).
const GEMM_SHAPES: &[(&str, usize, usize, usize)] = &[
    ("lenet-conv1 6x25x576", 6, 576, 25),
    ("lenet-conv2 16x150x64", 16, 64, 150),
    ("lenet-fc1 32x256x120", 32, 120, 256),
    ("r32-16ch 16x144x1024", 16, 1024, 144),
    ("r32-32ch 32x288x256", 32, 256, 288),
    ("r32-64ch 64x576x64", 64, 64, 576),
    ("square 256", 256, 256, 256),
];

fn gemm(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(20);
    for &(name, m, n, k) in GEMM_SHAPES {
        let cfg = GemmConfig::new(m, n, k);
        let a = fill(m * k);
        let b = fill(k * n);
        g.throughput(Throughput::Elements(cfg.flops() as u64));
        for which in [CpuGemm::MatrixMultiply, CpuGemm::Gemm] {
            let be = CpuBackend::new(0).with_gemm(which);
            let mut out = vec![0.0; m * n];
            g.bench_with_input(BenchmarkId::new(format!("{which:?}"), name), &cfg, |bch, cfg| {
                bch.iter(|| be.gemm(cfg, View::whole(&a), View::whole(&b), ViewMut::whole(&mut out)).unwrap())
            });
        }
    }
    g.finish();
}

/// Conv layers at batch 32: ResNet-32 (CIFAR) and LeNet-5 (MNIST).
fn conv_layers() -> Vec<(&'static str, Conv2dGeom)> {
    vec![
        ("r32-stem 3->16 32px", Conv2dGeom::square(32, 3, (32, 32), 16, 3, 1, 1, false)),
        ("r32 16->16 32px", Conv2dGeom::square(32, 16, (32, 32), 16, 3, 1, 1, false)),
        ("r32 16->32 s2", Conv2dGeom::square(32, 16, (32, 32), 32, 3, 2, 1, false)),
        ("r32 32->32 16px", Conv2dGeom::square(32, 32, (16, 16), 32, 3, 1, 1, false)),
        ("r32 64->64 8px", Conv2dGeom::square(32, 64, (8, 8), 64, 3, 1, 1, false)),
        ("r32 proj 16->32 1x1 s2", Conv2dGeom::square(32, 16, (32, 32), 32, 1, 2, 0, false)),
        ("lenet 1->6 5x5 28px", Conv2dGeom::square(32, 1, (28, 28), 6, 5, 1, 2, true)),
        ("lenet 6->16 5x5 14px", Conv2dGeom::square(32, 6, (14, 14), 16, 5, 1, 0, true)),
    ]
}

fn conv2d(c: &mut Criterion) {
    for pass in ["forward", "backward_data", "backward_params"] {
        let mut g = c.benchmark_group(format!("conv2d_{pass}"));
        g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(20);
        for (name, geom) in conv_layers() {
            g.throughput(Throughput::Elements(geom.forward_flops() as u64));
            for threads in [1, 2] {
                let be = CpuBackend::with_threads(0, threads).expect("threads");
                let x = fill(geom.input_len());
                let p = fill(geom.params_len());
                let dy = fill(geom.output_len());
                let mut y = vec![0.0; geom.output_len()];
                let mut dx = vec![0.0; geom.input_len()];
                let mut dp = vec![0.0; geom.params_len()];
                let mut ws = vec![0.0; be.conv2d_workspace_len(&geom)];
                g.bench_function(BenchmarkId::new(format!("{threads}t"), name), |b| {
                    b.iter(|| {
                        match pass {
                            "forward" => be.conv2d_forward(
                                &geom,
                                View::whole(&x),
                                View::whole(&p),
                                ViewMut::whole(&mut y),
                                ViewMut::whole(&mut ws),
                            ),
                            "backward_data" => be.conv2d_backward_data(
                                &geom,
                                View::whole(&dy),
                                View::whole(&p),
                                ViewMut::whole(&mut dx),
                                ViewMut::whole(&mut ws),
                            ),
                            _ => be.conv2d_backward_params(
                                &geom,
                                View::whole(&x),
                                View::whole(&dy),
                                ViewMut::whole(&mut dp),
                                ViewMut::whole(&mut ws),
                            ),
                        }
                        .unwrap()
                    })
                });
            }
        }
        g.finish();
    }
}

/// The peak these figures are compared with, in the same run: FMA on the widest unit present
/// (AVX-512 where the CPU has it, else AVX2), on 1 thread and on every core.
fn peak(c: &mut Criterion) {
    let Some((unit, flop_per_fma)) = crossbow_benches::widest_fma() else {
        return;
    };
    let mut g = c.benchmark_group("peak_fma");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(20);
    let iters = 1_000_000u64;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut counts = vec![1usize];
    if cores > 1 {
        counts.push(cores);
    }
    for threads in counts {
        g.throughput(Throughput::Elements((iters as f64 * 12.0 * flop_per_fma * threads as f64) as u64));
        g.bench_function(BenchmarkId::new(format!("{threads}t"), format!("{unit}-fma")), |b| {
            b.iter(|| {
                std::thread::scope(|s| {
                    let hs: Vec<_> =
                        (0..threads).map(|_| s.spawn(move || crossbow_benches::peak_fma_loop(iters).1)).collect();
                    hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum::<f32>()
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, peak, gemm, conv2d);
criterion_main!(benches);
