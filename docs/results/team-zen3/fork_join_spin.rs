// Fork-join latency with a helper thread that spins on an atomic generation counter (then
// yields) for its next job, as crates/kernels/src/cpu/team.rs does. Cargo.toml: no dependencies.
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
fn spin(d: Duration) { let t = Instant::now(); while t.elapsed() < d { std::hint::spin_loop(); } }
fn main() {
    // worker spins on `go` (a generation counter) for up to 2 ms, then yields in a loop
    let go = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let work = Arc::new(AtomicU64::new(0));
    {
        let (go, done, work) = (go.clone(), done.clone(), work.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            loop {
                let t = Instant::now();
                let mut g;
                loop {
                    g = go.load(Acquire);
                    if g != seen { break; }
                    if t.elapsed() > Duration::from_millis(2) { std::thread::yield_now(); } else { std::hint::spin_loop(); }
                }
                seen = g;
                spin(Duration::from_micros(work.load(Relaxed)));
                done.store(g, Release);
            }
        });
    }
    let mut gen = 0;
    for gap_us in [0u64, 20, 100, 500] {
        for work_us in [50u64, 200, 1000] {
            let n = 2000;
            let mut total = Duration::ZERO;
            work.store(work_us, Relaxed);
            for _ in 0..n {
                spin(Duration::from_micros(gap_us));
                let t = Instant::now();
                gen += 1;
                go.store(gen, Release);
                spin(Duration::from_micros(work_us));
                while done.load(Acquire) != gen { std::hint::spin_loop(); }
                total += t.elapsed();
            }
            let per = total.as_secs_f64() / n as f64 * 1e6;
            println!("gap {gap_us:4} us work {work_us:5} us: fork-join {per:8.1} us, overhead {:6.1} us", per - work_us as f64);
        }
    }
}
