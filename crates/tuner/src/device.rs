//! The per-device state machine.

use serde::{Deserialize, Serialize};

use crate::report::{Comparison, DeviceStatus, Phase, Reason, Report, SampleUse, TableEntry};
use crate::sample::{Fit, fit};
use crate::stats::{agreed_median, median_standard_error};
use crate::{ConfigError, Decision, MemoryFigures, Sample, TunerConfig};

/// Which way the current round's search is moving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Direction {
    Up,
    Down,
}

/// The search of one round.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Search {
    /// The best count so far: the one every probe is compared with.
    best: usize,
    direction: Direction,
    /// Consecutive probes in this direction that did not move `best`.
    misses: usize,
    /// The close call being measured again, once the search is over.
    #[serde(default)]
    confirm: Option<Confirm>,
    /// Whether this round's close call was measured again (or had none): the next end of
    /// the search settles.
    #[serde(default)]
    confirmed: bool,
}

impl Search {
    /// A round from `start`: downwards first when fewer learners are allowed.
    fn at(start: usize, min: usize) -> Self {
        Search {
            best: start,
            direction: if start > min { Direction::Down } else { Direction::Up },
            misses: 0,
            confirm: None,
            confirmed: false,
        }
    }
}

/// A close call measured again: the search's comparison of the smaller count (`from`) with
/// the larger (`to`), one of them the best count, and the medians of their second visits.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Confirm {
    call: Comparison,
    from_again: Option<f64>,
    to_again: Option<f64>,
    /// The relative standard errors of the first visits (the table's) and the second ones.
    #[serde(default)]
    spreads: [f64; 4],
}

/// Tunes the learner count of **one** device. [`Tuner`](crate::Tuner) holds one per device;
/// use this type directly when devices are managed separately.
///
/// Feed it one [`Sample`] per measurement window with [`observe`](Self::observe) and apply the
/// [`Decision`] of the returned [`Report`]. No call panics on caller input and the steady state
/// allocates nothing. It serialises (serde) with everything it has measured, so a run that
/// resumes from a checkpoint continues the same search.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceTuner {
    config: TunerConfig,
    /// Learner count of the last valid sample.
    current: Option<usize>,
    /// The count the tuner steers to.
    target: usize,
    /// The count of the step asked for and not yet seen applied (`current ± 1`).
    in_flight: Option<usize>,
    /// Valid windows seen at the old count while a step is in flight.
    awaiting: usize,
    phase: Phase,
    search: Search,
    /// Windows still to discard at the current count.
    discard: usize,
    /// Valid windows at the current count (a ring of `monitor_windows` when settled).
    windows: Vec<f64>,
    /// Next ring slot to overwrite when settled.
    ring_next: usize,
    scratch: Vec<f64>,
    /// Median throughput per count measured in this round, sorted by count.
    table: Vec<TableEntry>,
    /// Median throughput measured after settling.
    reference: Option<f64>,
    /// Images and seconds of the windows pooled so far, once the search is over (see
    /// [`TunerConfig::monitor_window_seconds`]).
    #[serde(default)]
    pooled: (f64, f64),
    /// Once settled: the last full monitor showed a drop; the next one decides (see
    /// [`TunerConfig::retune_drop`]).
    #[serde(default)]
    drop_seen: bool,
    memory: Option<MemoryFigures>,
    /// Highest count reachable after the engine failed to add a learner.
    ceiling: Option<usize>,
    /// Why the standing decision holds.
    reason: Reason,
    round: u32,
    last: Report,
}

impl DeviceTuner {
    /// A tuner for one device, or the reason the configuration is invalid.
    pub fn new(config: TunerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let n = config.windows_per_count.max(config.monitor_windows).saturating_add(config.extra_windows).min(64);
        let start = config.initial_learners;
        Ok(DeviceTuner {
            config,
            current: None,
            target: start,
            in_flight: None,
            awaiting: 0,
            phase: Phase::Searching,
            search: Search::at(start, config.min_learners),
            discard: 0,
            windows: Vec::with_capacity(n),
            ring_next: 0,
            scratch: Vec::with_capacity(n),
            table: Vec::new(),
            reference: None,
            pooled: (0.0, 0.0),
            drop_seen: false,
            memory: None,
            ceiling: None,
            reason: Reason::Starting,
            round: 0,
            last: Report {
                decision: Decision::Keep,
                learners: None,
                target: start,
                reason: Reason::Starting,
                sample: SampleUse::None,
                round: 0,
            },
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &TunerConfig {
        &self.config
    }

    /// Replaces the configuration, keeping what was measured and where the search stands (a
    /// run resumed with another threshold, noise margin or re-tune rule continues under the
    /// new one from its next window); the limits apply at once. Rejected, it changes nothing.
    pub fn set_config(&mut self, config: TunerConfig) -> Result<(), ConfigError> {
        config.validate()?;
        self.apply_config(config);
        Ok(())
    }

    /// [`DeviceTuner::set_config`] with `config` already validated. (The window buffers grow
    /// as they are filled, once, if the new configuration keeps more windows.)
    pub(crate) fn apply_config(&mut self, config: TunerConfig) {
        self.config = config;
        if self.phase == Phase::Settled && self.windows.len() > config.monitor_windows {
            // The ring shrank: start the sliding median again.
            self.windows.clear();
            self.ring_next = 0;
        }
        self.ring_next %= config.monitor_windows;
    }

    /// Takes one measurement window and answers what the device should do next.
    ///
    /// Memory figures in the sample replace the previous ones first. A missing sample (see
    /// [`Sample`]) changes nothing else and repeats the standing decision.
    pub fn observe(&mut self, sample: &Sample) -> Report {
        if let Some(figures) = sample.memory {
            self.apply_memory(figures);
        }
        let used = match sample.throughput() {
            None => SampleUse::Missing,
            Some(rate) => self.take(sample.learners, rate, sample.seconds),
        };
        self.enforce_memory();
        self.finish_report(used)
    }

    /// The device's memory figures, if set.
    pub fn memory(&self) -> Option<MemoryFigures> {
        self.memory
    }

    /// Replaces the device's memory figures and answers the (possibly changed) decision: if
    /// the running learners no longer fit, the tuner asks to remove learners; a pending
    /// addition that no longer fits is withdrawn.
    pub fn set_memory(&mut self, figures: MemoryFigures) -> Report {
        self.apply_memory(figures);
        self.enforce_memory();
        self.finish_report(SampleUse::None)
    }

    /// Tells the tuner the engine could not apply the pending change (for instance, creating
    /// the learner failed to allocate). A failed addition caps the device at its current count
    /// until the memory figures change; a failed removal settles the device where it is.
    /// Without a pending change this only repeats the standing decision.
    pub fn change_failed(&mut self) -> Report {
        self.fail_in_flight();
        self.finish_report(SampleUse::None)
    }

    fn fail_in_flight(&mut self) {
        let (Some(cur), Some(step)) = (self.current, self.in_flight.take()) else {
            return;
        };
        self.awaiting = 0;
        let reason = Reason::ChangeFailed { learners: step };
        if step > cur {
            self.ceiling = Some(cur);
            self.blocked_up(cur, reason);
        } else {
            self.stop_here(cur, reason);
        }
    }

    /// Re-opens tuning now from the current count, as a throughput drop would.
    pub fn retune(&mut self) -> Report {
        if let Some(cur) = self.current {
            self.round = self.round.saturating_add(1);
            self.begin_round(cur, Reason::Requested);
            self.discard = 0;
            self.enforce_memory();
        }
        self.finish_report(SampleUse::None)
    }

    /// Learners running, as last reported.
    pub fn learners(&self) -> Option<usize> {
        self.current
    }

    /// Learners the tuner steers to.
    pub fn target(&self) -> usize {
        self.target
    }

    /// Where tuning stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether the search is over and the device runs its final count (the last report said
    /// [`Decision::Settled`]).
    pub fn is_settled(&self) -> bool {
        self.last.decision == Decision::Settled
    }

    /// The last report.
    pub fn last_report(&self) -> &Report {
        &self.last
    }

    /// Median throughput per learner count measured in this round, sorted by count.
    pub fn table(&self) -> &[TableEntry] {
        &self.table
    }

    /// The settled reference throughput, once measured.
    pub fn reference(&self) -> Option<f64> {
        self.reference
    }

    /// A serializable snapshot of the device's state (allocates; for logs).
    pub fn status(&self) -> DeviceStatus {
        DeviceStatus {
            phase: self.phase,
            round: self.round,
            learners: self.current,
            target: self.target,
            table: self.table.clone(),
            reference: self.reference,
            ceiling: self.ceiling,
            memory: self.memory,
            last: self.last,
        }
    }

    // ---- sample handling ----------------------------------------------------------------

    fn take(&mut self, count: usize, rate: f64, seconds: f64) -> SampleUse {
        let Some(cur) = self.current else {
            // First valid sample: the run starts here, whatever was configured.
            let warming = Reason::WarmingUp { remaining: self.config.warmup_windows };
            self.begin_round(count, warming);
            return SampleUse::SpansChange;
        };
        if count != cur {
            self.awaiting = 0;
            if self.is_progress(cur, count) {
                self.in_flight = None;
                self.arrive(count);
            } else {
                self.in_flight = None;
                self.round = self.round.saturating_add(1);
                let reason = Reason::ExternalChange { expected: self.target, reported: count };
                self.begin_round(count, reason);
            }
            return SampleUse::SpansChange;
        }
        if self.in_flight.is_some() {
            // This window ran the old count: the step asked for is not applied yet.
            self.awaiting += 1;
            if self.awaiting > self.change_timeout() {
                if cur == self.target {
                    // A withdrawn step the engine never applied: nothing to undo.
                    self.in_flight = None;
                } else {
                    self.fail_in_flight();
                }
            }
        }
        if cur != self.target {
            return SampleUse::AwaitingChange;
        }
        // Windows are pooled into spans one stall of the host cannot fill (see
        // `search_window_seconds` and `monitor_window_seconds`); warm-up counts pooled windows.
        let min_seconds = match self.phase {
            Phase::Searching => self.config.search_window_seconds,
            Phase::Settling | Phase::Returning | Phase::Settled => self.config.monitor_window_seconds,
        };
        let Some(rate) = self.pool(rate, seconds, min_seconds) else {
            return SampleUse::Pooled;
        };
        if self.discard > 0 {
            self.discard -= 1;
            if self.phase == Phase::Searching {
                self.reason = Reason::WarmingUp { remaining: self.discard };
            }
            return SampleUse::WarmUp;
        }
        match self.phase {
            Phase::Searching => {
                self.windows.push(rate);
                match self.measurement(self.config.windows_per_count) {
                    Ok((m, se)) => match self.inconclusive(cur, m, se) {
                        Some(needed) => self.reason = Reason::Measuring { windows: self.windows.len(), needed },
                        None => self.measured(cur, m, se),
                    },
                    Err(needed) => {
                        self.reason = Reason::Measuring { windows: self.windows.len(), needed };
                    }
                }
                SampleUse::Measured
            }
            Phase::Settling | Phase::Returning => {
                self.windows.push(rate);
                if let Ok((m, _)) = self.measurement(self.config.monitor_windows) {
                    self.reference = Some(m);
                    self.phase = Phase::Settled;
                    self.windows.clear();
                    self.ring_next = 0;
                }
                SampleUse::Measured
            }
            Phase::Settled => {
                self.monitor(cur, rate);
                SampleUse::Monitored
            }
        }
    }

    /// Adds a window (`rate` over `seconds`) to the pool; the pooled rate once the pool spans
    /// `min` seconds, and the pool starts again.
    fn pool(&mut self, rate: f64, seconds: f64, min: f64) -> Option<f64> {
        let (images, secs) = self.pooled;
        if secs == 0.0 && seconds >= min {
            // A window long enough on its own.
            return Some(rate);
        }
        let (images, secs) = (images + rate * seconds, secs + seconds);
        if secs < min {
            self.pooled = (images, secs);
            return None;
        }
        self.pooled = (0.0, 0.0);
        Some(images / secs)
    }

    /// Whether `count` is the step asked for, or lies on the way from `cur` to the target
    /// (the engine applied one or more of the steps asked for).
    fn is_progress(&self, cur: usize, count: usize) -> bool {
        self.in_flight == Some(count) || (cur < count && count <= self.target) || (self.target <= count && count < cur)
    }

    /// Valid windows at the old count after which an unapplied step counts as failed: the
    /// time one count takes to measure.
    fn change_timeout(&self) -> usize {
        1 + self.config.warmup_windows + self.config.windows_per_count
    }

    /// The engine moved to `count` on the way to the target.
    fn arrive(&mut self, count: usize) {
        self.current = Some(count);
        self.windows.clear();
        self.pooled = (0.0, 0.0);
        self.discard = self.config.warmup_windows;
        if count == self.target {
            match self.phase {
                Phase::Returning => self.phase = Phase::Settling,
                Phase::Searching => {
                    self.reason = Reason::WarmingUp { remaining: self.discard };
                }
                Phase::Settling | Phase::Settled => {}
            }
        }
    }

    /// Starts a search round at `count` (clamped into `[min, max]`), forgetting the table.
    fn begin_round(&mut self, count: usize, reason: Reason) {
        let (min, max) = (self.config.min_learners, self.config.max_learners);
        let start = count.clamp(min, max);
        self.current = Some(count);
        self.target = start;
        self.phase = Phase::Searching;
        self.search = Search::at(start, min);
        self.table.clear();
        self.windows.clear();
        self.pooled = (0.0, 0.0);
        self.drop_seen = false;
        self.reference = None;
        self.discard = self.config.warmup_windows;
        self.reason = if count > max {
            Reason::MaxLearners { max }
        } else if count < min {
            Reason::MinLearners { min }
        } else {
            reason
        };
    }

    /// The median of the current count's windows and its relative standard error, once the
    /// median can be trusted: at least `n` windows that agree (see
    /// [`TunerConfig::outlier_band`]), or as many more as `extra_windows` allows. Otherwise the
    /// windows still needed.
    fn measurement(&mut self, n: usize) -> Result<(f64, f64), usize> {
        let have = self.windows.len();
        if have < n {
            return Err(n);
        }
        match agreed_median(&self.windows, &mut self.scratch, self.config.outlier_band) {
            Some((m, agreed)) if agreed || have >= n.saturating_add(self.config.extra_windows) => {
                Ok((m, median_standard_error(&self.windows, &mut self.scratch, m)))
            }
            _ => Err(have + 1),
        }
    }

    /// While `count`'s median `m` (relative standard error `se`) beats the search's best count
    /// by the threshold but not by the noise as well (or the reverse, going down), and more
    /// windows may still be measured: the windows needed next. A longer measurement shrinks
    /// the noise; once `extra_windows` are spent the comparison is taken as it stands.
    fn inconclusive(&self, count: usize, m: f64, se: f64) -> Option<usize> {
        let have = self.windows.len();
        if self.config.significance <= 0.0
            || self.search.confirm.is_some()
            || have >= self.config.windows_per_count.saturating_add(self.config.extra_windows)
        {
            return None;
        }
        let best = self.search.best;
        let e = self.entry(best).filter(|_| best != count)?;
        let (lo, hi) = if count < best {
            ((count, m, se), (best, e.median, e.spread))
        } else {
            ((best, e.median, e.spread), (count, m, se))
        };
        let cmp = self.compare(lo, hi);
        (cmp.change > cmp.needed && !cmp.is_gain()).then_some(have + 1)
    }

    /// Compares a smaller count `lo` with a larger `hi`, each `(count, figure, relative
    /// standard error)`.
    fn compare(&self, lo: (usize, f64, f64), hi: (usize, f64, f64)) -> Comparison {
        let noise = self.config.significance * lo.2.hypot(hi.2);
        Comparison::new((lo.0, lo.1), (hi.0, hi.1), self.needed(lo.0, hi.0), noise)
    }

    /// The median `m` (relative standard error `se`) of the windows at `count` is measured.
    fn measured(&mut self, count: usize, m: f64, se: f64) {
        let windows = self.windows.len();
        self.windows.clear();
        if let Some(c) = self.search.confirm
            && (count == c.call.from_learners || count == c.call.to_learners)
        {
            self.confirming(c, count, m, se, windows);
            return;
        }
        let entry = TableEntry { learners: count, median: m, windows, spread: se };
        match self.table.binary_search_by_key(&count, |e| e.learners) {
            Ok(i) => self.table[i] = entry,
            Err(i) => self.table.insert(i, entry),
        }
        self.step(count, m, se);
    }

    /// The change the larger of two counts must beat the smaller by: every learner must pay
    /// the threshold, `(1 + threshold)^k - 1` for `k` learners more, so a lucky window two
    /// learners away is not a gain.
    fn needed(&self, a: usize, b: usize) -> f64 {
        let k = i32::try_from(a.abs_diff(b)).unwrap_or(i32::MAX);
        (1.0 + self.config.threshold).powi(k) - 1.0
    }

    fn entry(&self, count: usize) -> Option<TableEntry> {
        self.table.binary_search_by_key(&count, |e| e.learners).ok().and_then(|i| self.table.get(i)).copied()
    }

    // ---- the search ---------------------------------------------------------------------

    /// Decides the next move after measuring `count` (median `m`, relative standard error
    /// `se`).
    fn step(&mut self, count: usize, m: f64, se: f64) {
        let best = self.search.best;
        let best_e = match self.entry(best) {
            Some(b) if best != count => b,
            _ => {
                // The round's first measurement (or a lost reference): search from here.
                let min = self.config.min_learners;
                self.search = Search::at(count, min);
                self.next_probe(Reason::Explore { learners: count, median: m });
                return;
            }
        };
        let patience = self.config.patience;
        match self.search.direction {
            Direction::Up => {
                let cmp = self.compare((best, best_e.median, best_e.spread), (count, m, se));
                if cmp.is_gain() {
                    self.search.best = count;
                    self.search.misses = 0;
                    self.next_probe(Reason::Improved(cmp));
                } else {
                    self.search.misses = self.search.misses.saturating_add(1);
                    if self.search.misses > patience {
                        self.finish(Reason::NoGain(cmp));
                    } else {
                        self.next_probe(Reason::NoGainTryingMore(cmp));
                    }
                }
            }
            Direction::Down => {
                // `count` is below `best`: did the learners between them pay?
                let cmp = self.compare((count, m, se), (best, best_e.median, best_e.spread));
                if cmp.is_gain() {
                    self.search.misses = self.search.misses.saturating_add(1);
                    if self.search.misses > patience {
                        self.down_done(Reason::WorthKeeping(cmp));
                    } else {
                        self.next_probe(Reason::WorthKeepingTryingFewer(cmp));
                    }
                } else {
                    self.search.best = count;
                    self.search.misses = 0;
                    self.next_probe(Reason::NotWorthKeeping(cmp));
                }
            }
        }
    }

    /// Steers to the next probe of the search (`reason` says why), or ends that direction.
    fn next_probe(&mut self, reason: Reason) {
        let s = self.search;
        let step = s.misses.saturating_add(1);
        match s.direction {
            Direction::Up => match s.best.checked_add(step) {
                Some(probe) => match self.up_limit(probe) {
                    None => self.steer(probe, reason),
                    Some(limit) => self.finish(limit),
                },
                None => self.finish(Reason::MaxLearners { max: self.config.max_learners }),
            },
            Direction::Down => {
                let min = self.config.min_learners;
                match s.best.checked_sub(step).filter(|&p| p >= min) {
                    Some(probe) => self.steer(probe, reason),
                    None => {
                        let reason = match reason {
                            Reason::NotWorthKeeping(_) | Reason::Explore { .. } => Reason::MinLearners { min },
                            other => other,
                        };
                        self.down_done(reason);
                    }
                }
            }
        }
    }

    /// Moves the search to `probe`.
    fn steer(&mut self, probe: usize, reason: Reason) {
        self.target = probe;
        self.phase = Phase::Searching;
        self.reason = reason;
    }

    /// The downward search is over: climb from its best count. Even when learners were
    /// removed, the climb re-measures the counts above, so one unlucky median on the way down
    /// cannot strand the device below its best count.
    fn down_done(&mut self, reason: Reason) {
        self.search.direction = Direction::Up;
        self.search.misses = 0;
        self.next_probe(reason);
    }

    /// What stops the device from running `probe` learners (more than it runs now), if
    /// anything.
    fn up_limit(&self, probe: usize) -> Option<Reason> {
        let max = self.config.max_learners;
        if probe > max {
            return Some(Reason::MaxLearners { max });
        }
        if let Some(ceiling) = self.ceiling.filter(|&c| probe > c) {
            return Some(Reason::ChangeFailed { learners: ceiling + 1 });
        }
        let is_next = self.current.and_then(|c| c.checked_add(1)) == Some(probe);
        match fit(self.memory.as_ref(), self.config.memory_budget_bytes, probe, is_next) {
            Fit::Fits => None,
            Fit::OverBudget { needed, budget } => {
                Some(Reason::MemoryBudget { learners: probe, needed_bytes: needed, budget_bytes: budget })
            }
            Fit::OverFree { needed, free } => Some(Reason::MemoryFree { needed_bytes: needed, free_bytes: free }),
            Fit::Unknown if self.config.require_memory_figures => Some(Reason::MemoryUnknown),
            Fit::Unknown => None,
        }
    }

    /// The second visit to one count of a close call measured `m` (relative standard error
    /// `se`) over `windows` windows. Once both counts are measured again, the one their means
    /// favour is the best count and the search is over.
    fn confirming(&mut self, mut c: Confirm, count: usize, m: f64, se: f64, windows: usize) {
        let (first, first_se) = if count == c.call.from_learners {
            c.from_again = Some(m);
            c.spreads[2] = se;
            (c.call.from_median, c.spreads[0])
        } else {
            c.to_again = Some(m);
            c.spreads[3] = se;
            (c.call.to_median, c.spreads[1])
        };
        // The table shows what the decision rests on: the mean of the two visits.
        if let Ok(i) = self.table.binary_search_by_key(&count, |e| e.learners)
            && let Some(e) = self.table.get_mut(i)
        {
            e.median = first / 2.0 + m / 2.0;
            e.windows = e.windows.saturating_add(windows);
            e.spread = mean_spread((first, first_se), (m, se));
        }
        match (c.from_again, c.to_again) {
            (Some(from), Some(to)) => {
                self.search.confirm = None;
                let (lo, hi) = (c.call.from_learners, c.call.to_learners);
                let from = (
                    c.call.from_median / 2.0 + from / 2.0,
                    mean_spread((c.call.from_median, c.spreads[0]), (from, c.spreads[2])),
                );
                let to = (
                    c.call.to_median / 2.0 + to / 2.0,
                    mean_spread((c.call.to_median, c.spreads[1]), (to, c.spreads[3])),
                );
                let cmp = self.compare((lo, from.0, from.1), (hi, to.0, to.1));
                self.search.best = if cmp.is_gain() { hi } else { lo };
                self.finish(Reason::Confirmed(cmp));
            }
            (Some(_), None) => {
                self.search.confirm = Some(c);
                self.steer(c.call.to_learners, Reason::CloseCall(c.call));
            }
            (None, _) => {
                self.search.confirm = Some(c);
                self.steer(c.call.from_learners, Reason::CloseCall(c.call));
            }
        }
    }

    /// The comparison with the best count that came closest to the other answer, if it came
    /// within `confirm_band` and the other count can still be run.
    fn close_call(&self) -> Option<Comparison> {
        let band = self.config.confirm_band;
        let best = self.search.best;
        let (Some(cur), Some(b)) = (self.current, self.entry(best)) else {
            return None;
        };
        if band <= 0.0 {
            return None;
        }
        let mut call: Option<(f64, Comparison)> = None;
        for e in &self.table {
            let reachable = e.learners <= cur || self.up_limit(e.learners).is_none();
            if e.learners == best || !reachable {
                continue;
            }
            let (best_t, e_t) = ((best, b.median, b.spread), (e.learners, e.median, e.spread));
            let cmp = if e.learners < best { self.compare(e_t, best_t) } else { self.compare(best_t, e_t) };
            // Measured from the threshold: the noise makes a call more doubtful, not less close.
            let distance = (cmp.change - cmp.needed).abs();
            if distance <= band && call.is_none_or(|(d, _)| distance < d) {
                call = Some((distance, cmp));
            }
        }
        call.map(|(_, c)| c)
    }

    /// The search is over: measure its close call again if it has one (see
    /// [`TunerConfig::confirm_band`]), else steer to the best count and settle there. A
    /// confirmation cut short (the way to one of its counts is blocked) settles on the best
    /// count as it stands.
    fn finish(&mut self, reason: Reason) {
        if self.phase == Phase::Searching {
            if self.search.confirm.take().is_none()
                && !self.search.confirmed
                && let Some(call) = self.close_call()
            {
                self.search.confirmed = true;
                let cur = self.current.unwrap_or(self.search.best);
                let (lo, hi) = (call.from_learners, call.to_learners);
                // The nearer count first: no walk when the search ended at one of them, and
                // the order best, rival, rival, best when it ended past the rival.
                let first = if cur.abs_diff(lo) <= cur.abs_diff(hi) { lo } else { hi };
                let spread = |n: usize| self.entry(n).map_or(0.0, |e| e.spread);
                let spreads = [spread(lo), spread(hi), 0.0, 0.0];
                self.search.confirm = Some(Confirm { call, from_again: None, to_again: None, spreads });
                self.steer(first, Reason::CloseCall(call));
                return;
            }
            self.search.confirmed = true;
        }
        self.target = self.search.best;
        self.reason = reason;
        if self.current == Some(self.target) {
            self.phase = Phase::Settling;
        } else {
            self.phase = Phase::Returning;
        }
    }

    /// Stays at `cur` and settles there (a change failed or memory blocks the way).
    fn stop_here(&mut self, cur: usize, reason: Reason) {
        self.target = cur;
        self.reason = reason;
        if self.phase != Phase::Settled {
            self.phase = Phase::Settling;
        }
    }

    /// The way up from `cur` is blocked (`reason`): end the search at the best count if that
    /// is not above `cur`, else stay at `cur`.
    fn blocked_up(&mut self, cur: usize, reason: Reason) {
        if self.phase == Phase::Searching && self.search.best <= cur {
            self.finish(reason);
        } else {
            self.stop_here(cur, reason);
        }
    }

    // ---- memory -------------------------------------------------------------------------

    fn apply_memory(&mut self, figures: MemoryFigures) {
        let same_plan = self.memory.is_some_and(|m| {
            (m.bytes_per_learner, m.fixed_bytes, m.budget_bytes)
                == (figures.bytes_per_learner, figures.fixed_bytes, figures.budget_bytes)
        });
        if !same_plan {
            self.ceiling = None;
        }
        self.memory = Some(figures);
    }

    /// Never run more learners than fit; never ask for one that would not.
    fn enforce_memory(&mut self) {
        let Some(cur) = self.current else {
            return;
        };
        let min = self.config.min_learners;
        if cur > min {
            let cap = self.config.memory_budget_bytes;
            if let Fit::OverBudget { needed, budget } = fit(self.memory.as_ref(), cap, cur, false) {
                let fitting = self
                    .memory
                    .map_or(0, |m| m.learners_within(budget))
                    .min(cur - 1)
                    .min(self.config.max_learners)
                    .max(min);
                if self.target > fitting {
                    self.target = fitting;
                    self.reason = Reason::MemoryBudget { learners: cur, needed_bytes: needed, budget_bytes: budget };
                    if self.phase == Phase::Searching {
                        // Search again from the largest count that fits.
                        self.search = Search::at(fitting, min);
                        self.table.retain(|e| e.learners <= fitting);
                    } else {
                        self.phase = Phase::Returning;
                    }
                }
                return;
            }
        }
        if self.target > cur
            && let Some(limit) = cur.checked_add(1).and_then(|next| self.up_limit(next))
        {
            self.blocked_up(cur, limit);
        }
    }

    // ---- monitoring ---------------------------------------------------------------------

    fn monitor(&mut self, cur: usize, rate: f64) {
        let n = self.config.monitor_windows;
        if self.windows.len() < n {
            self.windows.push(rate);
        } else if let Some(slot) = self.windows.get_mut(self.ring_next) {
            *slot = rate;
        }
        self.ring_next = (self.ring_next + 1) % n;
        if self.windows.len() < n {
            return;
        }
        let band = self.config.outlier_band;
        let (Some(reference), Some((m, agreed))) =
            (self.reference, agreed_median(&self.windows, &mut self.scratch, band))
        else {
            return;
        };
        // A drop is believed when the windows agree on it, not when a run of outliers pulls
        // the median down, and when the next `monitor_windows` fresh windows show it again:
        // a burst of load that passes within one monitor span re-opens nothing.
        let dropped = agreed && m < reference * (1.0 - self.config.retune_drop);
        if dropped && !self.drop_seen {
            self.drop_seen = true;
            self.windows.clear();
            self.ring_next = 0;
            return;
        }
        if !dropped {
            self.drop_seen = false;
            return;
        }
        {
            self.round = self.round.saturating_add(1);
            let reason = Reason::ThroughputDrop { learners: cur, reference, median: m, drop: 1.0 - m / reference };
            self.begin_round(cur, reason);
            // Nothing changed on the device: no warm-up to sit out.
            self.discard = 0;
        }
    }

    // ---- reporting ----------------------------------------------------------------------

    /// Builds the report, asking for the next one-learner step towards the target when none
    /// is in flight (each step is asked for once).
    fn finish_report(&mut self, sample: SampleUse) -> Report {
        if let Some(cur) = self.current {
            // Never steer below the minimum or above the maximum, whatever led here (for
            // instance a withdrawn addition the engine applied anyway).
            let (min, max) = (self.config.min_learners, self.config.max_learners);
            if self.target < cur && self.target < min {
                self.target = min.min(cur);
            } else if self.target > cur && self.target > max {
                self.target = max.max(cur);
            }
            if self.target == cur && self.phase == Phase::Returning {
                self.phase = Phase::Settling;
            }
        }
        let decision = match self.current {
            None => Decision::Keep,
            Some(cur) if self.target != cur => {
                if self.in_flight.is_some() {
                    Decision::Keep
                } else if self.target > cur {
                    self.in_flight = Some(cur + 1);
                    self.awaiting = 0;
                    Decision::AddLearner
                } else {
                    self.in_flight = Some(cur - 1);
                    self.awaiting = 0;
                    Decision::RemoveLearner
                }
            }
            Some(_) => match self.phase {
                Phase::Searching => Decision::Keep,
                Phase::Returning | Phase::Settling | Phase::Settled => Decision::Settled,
            },
        };
        self.last = Report {
            decision,
            learners: self.current,
            target: self.target,
            reason: self.reason,
            sample,
            round: self.round,
        };
        self.last
    }
}

/// The relative standard error of the mean of two visits to one count, `(figure, relative
/// standard error)` each: √(se₁² + se₂²) / 2 from the windows of the two visits. (The
/// difference between the visits is not added: on simulated hosts whose load comes and goes
/// for tens of windows it made the second look settle low more often than no second look.)
fn mean_spread(first: (f64, f64), second: (f64, f64)) -> f64 {
    let se = first.1.hypot(second.1) / 2.0;
    if se.is_finite() { se } else { 0.0 }
}
