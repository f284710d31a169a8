//! Measures this machine's peak f32 FLOP/s with the widest FMA unit present (AVX-512: 64 FLOP
//! per cycle per core with two FMA ports; AVX2: 32), on 1 core and on all cores, and AVX2 alone
//! for comparison — the reference the GEMM and conv benchmarks are quoted against.
//! `cargo run --release -p crossbow-benches --bin peak-flops`

use std::time::Instant;

use crossbow_benches::{fma_loop_flops, fma_loop_guarded, has_avx2_fma, peak_fma_loop, widest_fma};

/// FLOP/s of `threads` threads each running `work(iters)` (which returns its FLOPs).
fn measure(threads: usize, work: fn(u64) -> f64) -> f64 {
    let iters = 100_000_000u64;
    let t = Instant::now();
    let handles: Vec<_> = (0..threads).map(|_| std::thread::spawn(move || work(iters))).collect();
    let mut flops = 0.0;
    for h in handles {
        flops += h.join().unwrap_or(0.0);
    }
    flops / t.elapsed().as_secs_f64()
}

fn widest(iters: u64) -> f64 {
    let (flops, v) = peak_fma_loop(iters);
    std::hint::black_box(v);
    flops
}

fn avx2(iters: u64) -> f64 {
    std::hint::black_box(fma_loop_guarded(iters));
    fma_loop_flops(iters)
}

fn main() {
    let Some((unit, _)) = widest_fma() else {
        eprintln!("peak-flops: this CPU has no AVX2+FMA; nothing to measure");
        std::process::exit(2);
    };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let one = measure(1, widest);
    println!("peak {unit} FMA f32, 1 core : {:7.1} GFLOP/s", one / 1e9);
    if cores > 1 {
        let all = measure(cores, widest);
        println!("peak {unit} FMA f32, {cores} cores: {:7.1} GFLOP/s ({:.2}x one core)", all / 1e9, all / one);
    }
    if unit != "AVX2" && has_avx2_fma() {
        println!("(AVX2 FMA f32, 1 core: {:7.1} GFLOP/s)", measure(1, avx2) / 1e9);
    }
}
