//! Measures this machine's peak f32 FLOP/s with AVX2 FMA (32 FLOP per cycle per core when
//! both FMA ports are busy), on 1 and on all cores — the reference the GEMM and conv
//! benchmarks are quoted against. `cargo run --release -p crossbow-benches --bin peak-flops`

use std::time::Instant;

use crossbow_benches::{fma_loop_guarded, has_avx2_fma};

fn measure(threads: usize) -> f64 {
    let iters = 100_000_000u64;
    let t = Instant::now();
    let handles: Vec<_> = (0..threads).map(|_| std::thread::spawn(move || fma_loop_guarded(iters))).collect();
    let mut sink = 0.0;
    for h in handles {
        sink += h.join().unwrap_or(0.0);
    }
    std::hint::black_box(sink);
    let secs = t.elapsed().as_secs_f64();
    threads as f64 * iters as f64 * 12.0 * 16.0 / secs
}

fn main() {
    if !has_avx2_fma() {
        eprintln!("peak-flops: this CPU has no AVX2+FMA; nothing to measure");
        std::process::exit(2);
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let one = measure(1);
    println!("peak AVX2 FMA f32, 1 core : {:7.1} GFLOP/s", one / 1e9);
    if cores > 1 {
        let all = measure(cores);
        println!("peak AVX2 FMA f32, {cores} cores: {:7.1} GFLOP/s", all / 1e9);
    }
}
