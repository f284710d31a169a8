// Fork-join latency through a rayon pool of one worker (the caller runs one job, the worker
// the other), with `gap` µs of serial work between fork-joins. Cargo.toml: rayon = "1.10".
use std::time::{Duration, Instant};
fn spin(d: Duration) { let t = Instant::now(); while t.elapsed() < d { std::hint::spin_loop(); } }
fn main() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    for gap_us in [0u64, 20, 100, 500] {
        for work_us in [50u64, 200, 1000] {
            let n = 2000;
            let mut total = Duration::ZERO;
            for _ in 0..n {
                spin(Duration::from_micros(gap_us));
                let t = Instant::now();
                pool.in_place_scope(|s| {
                    s.spawn(|_| spin(Duration::from_micros(work_us)));
                    spin(Duration::from_micros(work_us));
                });
                total += t.elapsed();
            }
            let per = total.as_secs_f64() / n as f64 * 1e6;
            println!("gap {gap_us:4} us work {work_us:5} us: fork-join {per:8.1} us, overhead {:6.1} us", per - work_us as f64);
        }
    }
}
