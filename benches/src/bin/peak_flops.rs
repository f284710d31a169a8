//! Measures this machine's peak f32 FLOP/s with AVX2 FMA (32 FLOP per cycle per core when
//! both FMA ports are busy), on 1 and on all cores — the reference the GEMM and conv
//! benchmarks are quoted against. `cargo run --release -p crossbow-benches --bin peak-flops`

use std::time::Instant;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_loop(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    // 12 independent accumulators hide the FMA latency on both ports.
    let mut acc = [_mm256_set1_ps(0.0); 12];
    let a = _mm256_set1_ps(0.999_999);
    let b = _mm256_set1_ps(1e-7);
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut s = 0.0;
    for v in acc {
        let mut o = [0f32; 8];
        // SAFETY: `o` has room for 8 floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
        s += o[0];
    }
    s
}

fn measure(threads: usize) -> f64 {
    let iters = 100_000_000u64;
    let t = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                #[cfg(target_arch = "x86_64")]
                {
                    // SAFETY: main() checked that the CPU has AVX2 and FMA.
                    unsafe { fma_loop(iters) }
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    0.0f32
                }
            })
        })
        .collect();
    let mut sink = 0.0;
    for h in handles {
        sink += h.join().unwrap_or(0.0);
    }
    std::hint::black_box(sink);
    let secs = t.elapsed().as_secs_f64();
    threads as f64 * iters as f64 * 12.0 * 16.0 / secs
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    let ok = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let ok = false;
    if !ok {
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
