//! The helper threads of one multi-threaded CPU backend: a fork-join team whose helpers spin
//! between ops instead of sleeping.
//!
//! A learner with `threads > 1` splits every op over its threads, one fork-join per op, a
//! hundred or more per training step. Handed through a rayon pool, each fork-join cost 40-110
//! µs on the 2-core VMs this project runs on (a helper that went to sleep after its last op
//! has to be woken by the kernel, through the hypervisor), against 1-9 µs for a helper that
//! spins on an atomic while it waits (measured with one helper, 50 µs-1 ms of work and 0-500
//! µs of serial work between fork-joins). So each helper spins for a short while after its
//! job, yields for a while longer, and only then parks; a fork-join wakes a parked helper.
//!
//! The caller runs job 0 itself; helper `i` runs job `i + 1`. A fork-join returns only when
//! every helper it posted to is done, also when a job panics (the panic is then raised on the
//! caller), so jobs may borrow from the caller's stack. A fork-join asked for while the team is
//! busy (another thread's op on the same backend, or an op inside a job) runs its jobs on the
//! calling thread, one after another.

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long a helper spins (`spin_loop`) after its last job before it starts yielding.
const SPIN: Duration = Duration::from_micros(50);
/// How long a helper keeps yielding before it parks.
const LINGER: Duration = Duration::from_micros(300);

/// A job as the helpers see it: the caller's closure with its lifetime erased (the caller
/// waits for the helpers before the closure goes away).
type Job = &'static (dyn Fn(usize) + Sync);

/// One helper's mailbox.
struct Slot {
    /// Bumped by the caller after it wrote `job`.
    posted: AtomicU64,
    /// Set to `posted` by the helper when the job has run.
    done: AtomicU64,
    job: UnsafeCell<Option<Job>>,
    /// Set by the helper before it parks.
    parked: AtomicBool,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `job` is written by the caller only while the helper is not reading it (before
// `posted` is bumped, after `done` caught up), and read by the helper only between seeing a
// new `posted` and setting `done`; the atomics order those accesses (release/acquire).
unsafe impl Sync for Slot {}

struct Shared {
    slots: Vec<Slot>,
    stop: AtomicBool,
    /// Held by the thread running a fork-join.
    busy: AtomicBool,
}

/// The helper threads (`threads - 1` of them) of one CPU backend.
pub(crate) struct Team {
    shared: Arc<Shared>,
    threads: Vec<Thread>,
    handles: Vec<JoinHandle<()>>,
}

thread_local! {
    /// Set while this thread runs a team's job: a fork-join asked for inside one runs inline.
    static IN_JOB: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Team {
    /// Starts `helpers` threads named `{name}{i}`.
    pub(crate) fn new(helpers: usize, name: &str) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            slots: (0..helpers)
                .map(|_| Slot {
                    posted: AtomicU64::new(0),
                    done: AtomicU64::new(0),
                    job: UnsafeCell::new(None),
                    parked: AtomicBool::new(false),
                    panic: Mutex::new(None),
                })
                .collect(),
            stop: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        });
        let mut team = Team { shared: shared.clone(), threads: Vec::new(), handles: Vec::new() };
        for i in 0..helpers {
            let shared = shared.clone();
            // On failure `team` drops here and stops the helpers already started.
            let h = std::thread::Builder::new().name(format!("{name}{i}")).spawn(move || helper(&shared, i))?;
            team.threads.push(h.thread().clone());
            team.handles.push(h);
        }
        Ok(team)
    }

    /// Runs `job(0)`, ..., `job(jobs - 1)`: jobs `1..=helpers` on the helpers, the others
    /// (job 0, and any beyond the helpers) on the calling thread. Returns when all are done; a
    /// panic in any job is raised here after all are done.
    pub(crate) fn run(&self, jobs: usize, job: &(dyn Fn(usize) + Sync)) {
        let helpers = jobs.saturating_sub(1).min(self.shared.slots.len());
        let claimed = !IN_JOB.with(|f| f.get())
            && self.shared.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok();
        if !claimed || helpers == 0 {
            // Built only when claimed: a `Busy` dropped here releases the team.
            let _busy = claimed.then(|| Busy(&self.shared.busy));
            (0..jobs).for_each(job);
            return;
        }
        let _busy = Busy(&self.shared.busy);
        // SAFETY: the lifetime is erased only for the helpers, and `Joined` below waits until
        // every helper posted to is done with the job before this function returns or unwinds.
        let erased: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(job) };
        let joined = Joined { team: self, helpers };
        for (i, slot) in self.shared.slots[..helpers].iter().enumerate() {
            // SAFETY: the helper finished its previous job (`done == posted`, waited for by the
            // last fork-join), so it does not read `job` now.
            unsafe { *slot.job.get() = Some(erased) };
            slot.posted.fetch_add(1, Ordering::SeqCst);
            if slot.parked.load(Ordering::SeqCst) {
                self.threads[i].unpark();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| std::iter::once(0).chain(helpers + 1..jobs).for_each(job)));
        drop(joined);
        // Every helper's panic is taken (the first is raised): none is left for a later run.
        let mut theirs = None;
        for slot in &self.shared.slots[..helpers] {
            if let Some(p) = lock(&slot.panic).take() {
                theirs.get_or_insert(p);
            }
        }
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if let Some(p) = theirs {
            resume_unwind(p);
        }
    }
}

/// The team's claim by one fork-join, released when dropped (also on a panic).
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Waits, when dropped, until the first `helpers` helpers are done with their jobs.
struct Joined<'a> {
    team: &'a Team,
    helpers: usize,
}

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        for slot in &self.team.shared.slots[..self.helpers] {
            let want = slot.posted.load(Ordering::Relaxed);
            let start = Instant::now();
            while slot.done.load(Ordering::Acquire) != want {
                if start.elapsed() < SPIN {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in &self.threads {
            t.unpark();
        }
        for h in self.handles.drain(..) {
            // A helper catches its jobs' panics, so joining only fails if the runtime does.
            let _ = h.join();
        }
    }
}

/// A helper's loop: wait for a job (spin, then yield, then park), run it, report done.
fn helper(shared: &Shared, i: usize) {
    let Some(slot) = shared.slots.get(i) else { return };
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let posted = loop {
            let p = slot.posted.load(Ordering::Acquire);
            if p != seen {
                break p;
            }
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            let waited = start.elapsed();
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < LINGER {
                std::thread::yield_now();
            } else {
                slot.parked.store(true, Ordering::SeqCst);
                // Checked again after announcing the park: a job posted before it was seen
                // here; one posted after it finds `parked` set and unparks this thread.
                if slot.posted.load(Ordering::SeqCst) == seen && !shared.stop.load(Ordering::SeqCst) {
                    std::thread::park();
                }
                slot.parked.store(false, Ordering::SeqCst);
            }
        };
        seen = posted;
        // SAFETY: the caller wrote the job before bumping `posted` (acquired above) and keeps
        // it alive until `done` says so.
        let job = unsafe { *slot.job.get() };
        if let Some(job) = job {
            IN_JOB.with(|f| f.set(true));
            let r = catch_unwind(AssertUnwindSafe(|| job(i + 1)));
            IN_JOB.with(|f| f.set(false));
            if let Err(p) = r {
                *lock(&slot.panic) = Some(p);
            }
        }
        slot.done.store(posted, Ordering::Release);
    }
}

/// Locks `m`, also after a panic while it was held (the data here stays consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(e) => e.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_job_runs_once_per_fork_join() {
        let team = Team::new(2, "team-test").unwrap();
        for round in 0..500 {
            let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
            team.run(3, &|j| {
                hits[j].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "round {round}");
            if round % 100 == 0 {
                // Let the helpers park, then wake them.
                std::thread::sleep(LINGER * 2);
            }
        }
    }

    #[test]
    fn jobs_beyond_the_helpers_run_on_the_caller() {
        let team = Team::new(1, "team-test").unwrap();
        let hits: Vec<AtomicUsize> = (0..5).map(|_| AtomicUsize::new(0)).collect();
        team.run(5, &|j| {
            hits[j].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn a_helpers_panic_reaches_the_caller_and_the_team_still_works() {
        let team = Team::new(1, "team-test").unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| team.run(2, &|j| assert!(j != 1, "job 1 fails"))));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| team.run(2, &|j| assert!(j != 0, "job 0 fails"))));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        team.run(2, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn nested_and_concurrent_fork_joins_run_inline() {
        let team = Arc::new(Team::new(1, "team-test").unwrap());
        let n = AtomicUsize::new(0);
        team.run(2, &|_| {
            team.run(2, &|_| {
                n.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(n.load(Ordering::Relaxed), 4);
        let total = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..3)
            .map(|_| {
                let (team, total) = (team.clone(), total.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        team.run(2, &|_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
        assert_eq!(total.load(Ordering::Relaxed), 3 * 200 * 2);
    }
}
