//! What the tuner answers: decisions, their reasons and the figures behind them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::MemoryFigures;

/// What a device should do before its next window.
///
/// `AddLearner` and `RemoveLearner` are each asked for **once**: apply every one you receive
/// (one learner each) at the next iteration boundary. Until a sample shows the new count the
/// reports say `Keep`, with [`Report::target`] still ahead of [`Report::learners`]; windows at
/// the old count are discarded. A step never seen applied within one count's measuring time
/// (`1 + warmup_windows + windows_per_count` valid windows) is treated as failed, as if
/// [`DeviceTuner::change_failed`](crate::DeviceTuner::change_failed) had been called, so a
/// lost step cannot leave the device waiting forever and is never asked for twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Add one learner on the device at the next iteration boundary.
    AddLearner,
    /// Remove one learner from the device at the next iteration boundary.
    RemoveLearner,
    /// Keep the current learners; tuning is in progress (warming up or measuring).
    Keep,
    /// Keep the current learners; tuning has finished and the device is being monitored.
    Settled,
}

/// Two learner counts compared on their median throughput (images/s).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The count compared against (the best so far, or the settled count).
    pub from_learners: usize,
    /// Its median throughput.
    pub from_median: f64,
    /// The count just measured.
    pub to_learners: usize,
    /// Its median throughput.
    pub to_median: f64,
    /// `to_median / from_median - 1`: +0.12 means 12% more images/s.
    pub change: f64,
    /// The change needed to count as a gain: `(1 + threshold)^k - 1` for `k` more learners.
    pub needed: f64,
    /// What the measurement noise adds to `needed`: `significance` standard errors of the
    /// difference of the two figures, estimated from the spread of each count's windows. `0`
    /// when the windows agreed exactly or `significance` is 0.
    #[serde(default)]
    pub noise: f64,
}

impl Comparison {
    pub(crate) fn new(from: (usize, f64), to: (usize, f64), needed: f64, noise: f64) -> Self {
        Comparison {
            from_learners: from.0,
            from_median: from.1,
            to_learners: to.0,
            to_median: to.1,
            change: to.1 / from.1 - 1.0,
            needed,
            noise,
        }
    }

    /// Whether the larger count gained enough to be worth its learners: `change` above
    /// `needed + noise`. A gain inside the noise is no gain: the smaller count wins.
    pub fn is_gain(&self) -> bool {
        self.change > self.needed + self.noise
    }

    /// The whole bar `change` had to clear: `needed + noise`.
    pub fn bar(&self) -> f64 {
        self.needed + self.noise
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} learners {:.1} img/s -> {} learners {:.1} img/s ({:+.1}%, gain needed > {:.1}%",
            self.from_learners,
            self.from_median,
            self.to_learners,
            self.to_median,
            self.change * 100.0,
            self.bar() * 100.0
        )?;
        if self.noise > 0.0 {
            write!(f, ": {:.1}% threshold + {:.1}% noise", self.needed * 100.0, self.noise * 100.0)?;
        }
        write!(f, ")")
    }
}

/// Why the tuner holds its current decision. Comparisons carry the figures that caused it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// No valid sample yet.
    Starting,
    /// Discarding windows after a change of the learner count.
    WarmingUp {
        /// Windows still to discard at this count.
        remaining: usize,
    },
    /// Collecting windows for the median of the current count.
    Measuring {
        /// Valid windows collected at this count.
        windows: usize,
        /// Windows needed before the median is taken: `windows_per_count`, then one more at a
        /// time while the windows disagree (up to `extra_windows` more).
        needed: usize,
    },
    /// The round's starting count is measured: try one learner fewer (when allowed) or more.
    Explore {
        /// The round's starting count.
        learners: usize,
        /// Its median throughput (images/s).
        median: f64,
    },
    /// The new count beat the best so far by more than the threshold: keep climbing.
    Improved(Comparison),
    /// The new count did not beat the best by more than the threshold; patience left, so one
    /// more learner is tried before giving up.
    NoGainTryingMore(Comparison),
    /// Adding learners stopped paying: go back to (or stay at) the best count and settle.
    NoGain(Comparison),
    /// Fewer learners lost at most the threshold per learner: the learners removed were not
    /// worth keeping; try fewer still.
    NotWorthKeeping(Comparison),
    /// Fewer learners lost more than the threshold per learner; patience left, so one learner
    /// fewer still is tried before giving up.
    WorthKeepingTryingFewer(Comparison),
    /// Fewer learners lost more than the threshold per learner: go back to the best count (and
    /// settle, or climb from it if the round has not tried more learners yet).
    WorthKeeping(Comparison),
    /// The search is over, but its closest call (this comparison, from the search) came
    /// within `confirm_band` of the other answer: both counts are measured once more before
    /// the tuner settles.
    CloseCall(Comparison),
    /// The close call measured again: each count's figure is the mean of its two medians.
    /// The larger count wins when `change > needed`; the tuner settles on the winner.
    Confirmed(Comparison),
    /// The current count is above `max_learners`, or the climb reached it.
    MaxLearners {
        /// The configured maximum.
        max: usize,
    },
    /// The current count is below `min_learners`, or the descent reached it.
    MinLearners {
        /// The configured minimum.
        min: usize,
    },
    /// `learners` learners would not fit in the device's memory budget.
    MemoryBudget {
        /// The learner count checked.
        learners: usize,
        /// Bytes those learners need (fixed + per learner).
        needed_bytes: u64,
        /// The budget (the smaller of the reported and the configured one).
        budget_bytes: u64,
    },
    /// The next learner would not fit in the memory free on the device.
    MemoryFree {
        /// Bytes the next learner needs.
        needed_bytes: u64,
        /// Bytes free on the device.
        free_bytes: u64,
    },
    /// The memory need is unknown and `require_memory_figures` is set: no learner is added.
    MemoryUnknown,
    /// The engine reported that it could not apply the change to `learners` learners.
    ChangeFailed {
        /// The count the change aimed at.
        learners: usize,
    },
    /// The settled throughput fell by more than `retune_drop`: tuning re-opened.
    ThroughputDrop {
        /// The settled count.
        learners: usize,
        /// Median throughput measured when the device settled.
        reference: f64,
        /// The sliding median that fell.
        median: f64,
        /// `1 - median / reference`.
        drop: f64,
    },
    /// The learner count changed without the tuner asking: tuning restarts from it.
    ExternalChange {
        /// The count the tuner expected.
        expected: usize,
        /// The count reported.
        reported: usize,
    },
    /// Tuning was re-opened on request ([`DeviceTuner::retune`](crate::DeviceTuner::retune)).
    Requested,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Starting => write!(f, "waiting for the first sample"),
            Reason::WarmingUp { remaining } => {
                write!(f, "warming up: {remaining} window(s) to discard")
            }
            Reason::Measuring { windows, needed } => {
                write!(f, "measuring: {windows} of {needed} windows")
            }
            Reason::Explore { learners, median } => {
                write!(f, "start: {learners} learners {median:.1} img/s, trying one more")
            }
            Reason::Improved(c) => write!(f, "improved: {c}"),
            Reason::NoGainTryingMore(c) => {
                write!(f, "no gain above threshold, trying one more: {c}")
            }
            Reason::NoGain(c) => write!(f, "no gain above threshold, keeping the best: {c}"),
            Reason::NotWorthKeeping(c) => write!(f, "learners not worth keeping: {c}"),
            Reason::WorthKeepingTryingFewer(c) => {
                write!(f, "learners worth keeping, trying fewer still: {c}")
            }
            Reason::WorthKeeping(c) => write!(f, "learners worth keeping: {c}"),
            Reason::CloseCall(c) => write!(f, "close call, measuring both again: {c}"),
            Reason::Confirmed(c) => write!(f, "close call measured twice (means of two medians): {c}"),
            Reason::MaxLearners { max } => write!(f, "max learners ({max})"),
            Reason::MinLearners { min } => write!(f, "min learners ({min})"),
            Reason::MemoryBudget { learners, needed_bytes, budget_bytes } => write!(
                f,
                "memory budget: {learners} learners need {needed_bytes} bytes ({:.1} MiB), \
                 budget {budget_bytes} bytes ({:.1} MiB)",
                mib(*needed_bytes),
                mib(*budget_bytes)
            ),
            Reason::MemoryFree { needed_bytes, free_bytes } => write!(
                f,
                "memory: next learner needs {needed_bytes} bytes ({:.1} MiB), \
                 {free_bytes} free ({:.1} MiB)",
                mib(*needed_bytes),
                mib(*free_bytes)
            ),
            Reason::MemoryUnknown => write!(f, "memory figures unknown: not adding learners (require_memory_figures)"),
            Reason::ChangeFailed { learners } => {
                write!(f, "the engine could not move to {learners} learners")
            }
            Reason::ThroughputDrop { learners, reference, median, drop } => write!(
                f,
                "throughput at {learners} learners fell {:.1}%: {median:.1} img/s vs \
                 {reference:.1} img/s when settled; re-tuning",
                drop * 100.0
            ),
            Reason::ExternalChange { expected, reported } => {
                write!(f, "learner count changed outside the tuner ({expected} -> {reported}); re-tuning")
            }
            Reason::Requested => write!(f, "re-tuning on request"),
        }
    }
}

/// What the tuner did with the sample it was just given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleUse {
    /// No sample (a report asked for without one).
    None,
    /// Missing data (no learners, no images, bad elapsed time): ignored, not a drop.
    Missing,
    /// The first window at a new learner count: it may span the change, so it is discarded.
    SpansChange,
    /// A warm-up window after a change: discarded.
    WarmUp,
    /// A window at the old count while a decided change is not applied yet: discarded.
    AwaitingChange,
    /// Counted towards the median of the current count.
    Measured,
    /// Counted towards the sliding median watched while settled.
    Monitored,
    /// Pooled with the next windows until they span `search_window_seconds` (while
    /// searching) or `monitor_window_seconds` (once the search is over).
    Pooled,
}

/// The answer to one observation: the decision for the device, the reason for it and the
/// figures that caused it. Serializable, so it can go straight into a JSON metrics file.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// What the device should do now.
    pub decision: Decision,
    /// Learners the device runs, as last reported (`None` before the first valid sample).
    pub learners: Option<usize>,
    /// Learners the tuner is steering to: the probe or final count while moving (one learner
    /// per decision), `learners` otherwise.
    pub target: usize,
    /// Why.
    pub reason: Reason,
    /// What happened to the sample just observed.
    pub sample: SampleUse,
    /// Tuning round: 0 for the first search, +1 at every re-tune.
    pub round: u32,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let decision = match self.decision {
            Decision::AddLearner => "add learner",
            Decision::RemoveLearner => "remove learner",
            Decision::Keep => "keep",
            Decision::Settled => "settled",
        };
        match self.learners {
            Some(n) => write!(f, "{decision} ({n} -> {}): {}", self.target, self.reason),
            None => write!(f, "{decision}: {}", self.reason),
        }
    }
}

/// Where a device's tuning stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Measuring counts and climbing (or descending), including moves to a probe count.
    Searching,
    /// The search is over; moving back to the chosen count.
    Returning,
    /// At the chosen count; measuring the settled reference throughput.
    Settling,
    /// Settled with a reference; watching for a drop.
    Settled,
}

/// One row of the per-count throughput table of the current round.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableEntry {
    /// Learner count.
    pub learners: usize,
    /// Median throughput over the windows (images/s).
    pub median: f64,
    /// Windows the median was taken over.
    pub windows: usize,
    /// The median's relative standard error, estimated from the spread of its windows
    /// (1.2533 × 1.4826 × median absolute deviation / median / √windows); for a count
    /// measured twice, that of the mean of its two visits.
    #[serde(default)]
    pub spread: f64,
}

/// A serializable snapshot of one device's tuning state, for logs and metrics files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// Where tuning stands.
    pub phase: Phase,
    /// Tuning round (0 for the first search).
    pub round: u32,
    /// Learners running, as last reported.
    pub learners: Option<usize>,
    /// Learners the tuner steers to.
    pub target: usize,
    /// Median throughput per learner count measured in this round, by count.
    pub table: Vec<TableEntry>,
    /// Reference median throughput measured after settling.
    pub reference: Option<f64>,
    /// Highest count the engine managed to reach after a failed addition, if any.
    pub ceiling: Option<usize>,
    /// Last memory figures reported.
    pub memory: Option<MemoryFigures>,
    /// The last report.
    pub last: Report,
}
