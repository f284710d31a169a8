//! # crossbow-tuner
//!
//! Picks how many learners (model replicas) each device should run, from measured throughput
//! and memory figures. Crossbow trains several small-batch learners per device; too few leave
//! the device idle, too many fight over it or run out of memory. The best count depends on the
//! model, the batch size and the device, so it is found at run time.
//!
//! The crate depends on no other crossbow crate (only `serde` and `thiserror`), so any system
//! that runs several workers per device can embed it: it sees numbers, never tensors.
//!
//! ## Using it
//!
//! One [`Tuner`] manages the devices of a run, each through its own [`DeviceTuner`] (its own
//! search, table, memory figures and monitoring; devices never wait for each other). After each
//! measurement window (one iteration, or a few) the engine reports, per device, a [`Sample`]:
//! the learners that ran, the images they processed and the elapsed seconds, plus the device's
//! [`MemoryFigures`] when they are known or change (bytes per learner from the memory plan,
//! fixed bytes, the budget and/or free bytes). The answer is a [`Report`]:
//!
//! * [`Decision::AddLearner`] / [`Decision::RemoveLearner`]: change the device by **one**
//!   learner at the next iteration boundary. Each step is asked for once; while it is in flight
//!   the reports say [`Decision::Keep`] with [`Report::target`] still ahead.
//! * [`Decision::Keep`]: tuning is in progress (warming up or measuring).
//! * [`Decision::Settled`]: tuning is over; the tuner keeps watching.
//!
//! Every report carries a [`Reason`] with the figures behind it — the learner counts compared,
//! their median throughputs, the relative change and the change that was needed
//! ([`Comparison`]), or the memory arithmetic ("memory budget: 3 learners need X bytes, budget
//! Y") — and implements `Display` for logs and `Serialize` for JSON metrics files. The table
//! of median throughput per learner count is in [`DeviceTuner::table`] and
//! [`DeviceTuner::status`].
//!
//! If the engine cannot apply a step (creating the learner failed), it calls
//! [`Tuner::change_failed`]; a step never seen applied within one count's measuring time is
//! treated the same way.
//!
//! ## The algorithm, step by step
//!
//! 1. **Start** at `initial_learners` (default 1), or at whatever count the first sample
//!    reports.
//! 2. **Warm up.** Consecutive windows are pooled until they span `search_window_seconds`
//!    (default 0.05 s): on a 3 ms step one window is one scheduler slice, and five of them
//!    measure the host's jitter, not the count. After every change of the learner count (and
//!    at the start) the first window is discarded, because it may span the change, and then
//!    `warmup_windows` more pooled windows (default 2): new learners are slow for a while
//!    (allocation, caches, kernel selection). Windows reported at the old count while a step
//!    is in flight are discarded too.
//! 3. **Measure.** The throughput of a count is the **median** of `windows_per_count` valid
//!    windows (default 5), and its noise the median's relative standard error, estimated
//!    robustly from their spread (median absolute deviation). If more than a quarter of them
//!    lie further than `outlier_band` (default 25%) from that median, the windows disagree
//!    (three outliers out of five can pull a median anywhere) and more are measured, up to
//!    `extra_windows` more (default 10). Missing samples — no learners, no images, elapsed
//!    time zero, negative, NaN or infinite — are ignored: they neither count as a window nor
//!    read as a drop.
//! 4. **Climb.** From the best count `b` so far, probe `b + 1`. A probe `k` learners above `b`
//!    beats it only if its median is higher by more than `(1 + threshold)^k - 1`
//!    (`threshold` default 5%) **plus** `significance` (default 1.5) standard errors of the
//!    difference of the two medians: every added learner must pay its way, and a lead inside
//!    the measurement noise is no lead, so a lucky median two learners past a peak, or on a
//!    host whose windows swing by ±20%, is not a gain (a learner kept for nothing changes
//!    what training does: under S-SGD, the aggregate batch). While a probe clears the
//!    threshold but not the noise, more of its windows are measured (up to `extra_windows`)
//!    before it is called a tie, which the smaller count wins. A probe that beats `b` becomes the best; one that
//!    does not is a miss, and after `patience + 1` consecutive misses (default `patience` 1,
//!    so one unlucky median cannot end the climb) the climb ends. It also ends where the next
//!    learner would exceed `max_learners`, the memory budget, the free memory, or a count the
//!    engine failed to reach.
//! 5. **Descend first when starting high.** A round that starts above `min_learners` (a
//!    configured start, a re-tune, a change made outside the tuner) first probes downwards:
//!    fewer learners become the best while the learners removed gained at most the threshold
//!    each, with the same patience. Then it climbs from the best count found, re-measuring the
//!    counts above, so one unlucky median on the way down cannot strand the device low.
//! 6. **Measure a close call again.** When the search ends, the comparison with the best
//!    count that came closest to the other answer — its change within `confirm_band`
//!    (default 0.25) of the threshold's change — is the close call: the device runs its two
//!    counts once more, the nearer one first, and each count's figure becomes the mean of its
//!    two medians; the same rule (threshold plus noise) on those means names the best count
//!    ([`Reason::CloseCall`], then [`Reason::Confirmed`]). A shared host's load comes and goes
//!    for seconds at a time, so all of one count's windows can fall in a busy stretch and the
//!    next count's in a calm one; a median over consecutive windows cannot see that, a second
//!    visit in the order best, rival, rival, best (or the reverse) does. On simulated devices
//!    whose load drops to 60% for stretches of about 30 windows, it settles outside the
//!    tolerance about a quarter less often (concave curves: 123 against 163 in 1000), at the
//!    cost of about 14 windows; on a steady device it changes nothing but the time.
//!
//! On simulated devices whose windows swing by ±20% and whose throughput is flat past a knee,
//! the noise margin of step 4 cuts settling on learners past the knee from 24% of devices to
//! 6% (1000 seeds each), while settling outside the tolerance (not within one learner nor 5%
//! of the best) goes from 0.1% to 1.4%. On the 2-vCPU Zen 3 host where this was found, one
//! epoch of LeNet-5 on Fashion-MNIST settled on 5, 1, 2, 2, 4, 1 learners without it (seeds
//! 1-6) and on 2, 1, 1, 1, 1, 2 with it.
//! 7. **Settle.** The tuner steers back to the best count (one learner per decision), answers
//!    [`Decision::Settled`], and measures a reference median over `monitor_windows` windows
//!    (default 10).
//! 8. **Monitor and re-tune.** Once settled it watches the sliding median of the last
//!    `monitor_windows` windows, each pooled from consecutive samples until it spans
//!    `monitor_window_seconds` (default 0.05 s; also for the settled reference), so that on a
//!    2 ms step one stall of the host cannot fill the monitor. When those windows agree (as
//!    in step 3) on a median more than `retune_drop` (default 20%) below the reference, and
//!    the next `monitor_windows` fresh windows do again (a burst of load that passes within
//!    one monitor span re-opens nothing), tuning re-opens: a new round with a
//!    fresh table from the current count, descending first and then climbing (step 5), since a
//!    drop can call for fewer learners as well as more. [`DeviceTuner::retune`] re-opens on
//!    request; a learner count changed outside the tuner starts a new round from that count.
//! 9. **Memory, always.** `AddLearner` is never answered unless `fixed + (n + 1) × per learner`
//!    fits the budget (the smaller of the reported one and `memory_budget_bytes`) and the
//!    next learner fits the free memory when that is reported. Without figures no learner is
//!    added (`require_memory_figures`, default on). If the running learners stop fitting (the
//!    figures changed), the tuner removes learners down to the largest count that fits. It
//!    never steers below `min_learners` or above `max_learners`.
//!
//! ## What it fixes in the original Crossbow tuner
//!
//! | Original flaw | Here |
//! |---|---|
//! | While the previous sample was 0, every sync added a learner | Counts are compared only once both have a full median; nothing is decided before |
//! | A sync with no new monitor sample read 0 throughput, so tuning stopped early | Missing samples are ignored, never a drop (step 3) |
//! | The work per clock was not updated after a change | Every sample names the learner count that ran it; windows spanning a change and at the old count are discarded (step 2) |
//! | No GPU-memory check: growing aborted on out-of-memory | Memory budget and free-memory checks before every addition; over-budget devices shrink (step 9) |
//! | One noisy sample decided | Pooled windows, medians of several, longer measuring when windows disagree, a per-learner threshold plus a margin for the measured noise, and patience (steps 2–4) |
//! | Irreversible after the first non-improvement | Patience, a descent-then-climb search, a second look at the close call, monitoring and re-tuning (steps 4–8) |
//! | One decision for all GPUs, from MB/s of input read | Per-device decisions from each device's images/s |
//!
//! ## Cost
//!
//! A decision sorts at most a few dozen numbers and allocates nothing in the steady state:
//! it costs well under a microsecond (see `benches/benches/tuner.rs` in the workspace).
//! Calibration over many seeds of the simulated devices used by the tests is an ignored test:
//! `cargo test -p crossbow-tuner --test calibration -- --ignored --nocapture`.
//!
//! ## Example
//!
//! A simulated device whose throughput peaks at 4 learners, with 3 GiB per learner and room
//! for 6:
//!
//! ```
//! use crossbow_tuner::{Decision, MemoryFigures, Sample, Tuner, TunerConfig};
//!
//! let gib = 1u64 << 30;
//! let throughput = |m: usize| [0.0, 400.0, 700.0, 900.0, 1000.0, 980.0, 900.0][m];
//! let memory = MemoryFigures::new(3 * gib, gib, 20 * gib);
//!
//! let mut tuner = Tuner::new(TunerConfig::default(), 1)?;
//! let mut learners = tuner.initial_learners();
//! let mut iteration = 0;
//! while !tuner.all_settled() {
//!     // One iteration: every learner processes one batch of 32 images.
//!     let images = 32 * learners as u64;
//!     let seconds = images as f64 / throughput(learners);
//!     let mut sample = Sample::new(learners, images, seconds);
//!     if iteration == 0 {
//!         sample = sample.with_memory(memory);
//!     }
//!     let report = tuner.observe(0, &sample)?;
//!     if report.decision != Decision::Keep {
//!         println!("iteration {iteration}: {report}");
//!     }
//!     match report.decision {
//!         Decision::AddLearner => learners += 1,
//!         Decision::RemoveLearner => learners -= 1,
//!         Decision::Keep | Decision::Settled => {}
//!     }
//!     iteration += 1;
//!     assert!(iteration < 1000);
//! }
//! assert_eq!(learners, 4);
//! let table = tuner.device(0)?.table();
//! assert_eq!(table.iter().map(|e| e.learners).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
//! # Ok::<(), crossbow_tuner::TunerError>(())
//! ```

mod config;
mod device;
mod report;
mod sample;
mod stats;
mod tuner;

pub use config::{ConfigError, TunerConfig};
pub use device::DeviceTuner;
pub use report::{Comparison, Decision, DeviceStatus, Phase, Reason, Report, SampleUse, TableEntry};
pub use sample::{MemoryFigures, Sample};
pub use tuner::{Tuner, TunerError};
