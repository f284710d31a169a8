//! The tuner's configuration and its validation.

use serde::{Deserialize, Serialize};

/// How the tuner searches, measures and monitors. The same configuration applies to every
/// device a [`Tuner`](crate::Tuner) manages.
///
/// Build one with [`TunerConfig::default()`] and struct-update syntax, or deserialize it (every
/// field is optional; unknown fields are rejected so a misspelt key is an error, not a silent
/// default). Nothing uses a configuration before [`TunerConfig::validate`] accepted it:
/// [`Tuner::new`](crate::Tuner::new) and [`DeviceTuner::new`](crate::DeviceTuner::new) validate.
///
/// ```
/// use crossbow_tuner::TunerConfig;
///
/// let config = TunerConfig { threshold: 0.08, max_learners: 8, ..TunerConfig::default() };
/// assert!(config.validate().is_ok());
///
/// let bad = TunerConfig { min_learners: 4, max_learners: 2, ..TunerConfig::default() };
/// assert!(bad.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TunerConfig {
    /// Learners per device the engine starts with (default 1). The first search round starts
    /// here; if the first sample reports another count, the tuner starts from that one.
    pub initial_learners: usize,
    /// Fewest learners per device (default 1, at least 1). The tuner never asks to go below.
    pub min_learners: usize,
    /// Most learners per device (default 16). The tuner never asks to go above.
    pub max_learners: usize,
    /// Windows discarded after every change of the learner count, on top of the first window
    /// at a new count, which is always discarded because it may span the change (default 2).
    /// New learners are slow for a while (caches, allocation, kernel selection).
    pub warmup_windows: usize,
    /// Valid windows measured per learner count; the count's throughput is their median
    /// (default 5, at least 1). The same number of windows forms the sliding median that is
    /// watched once settled.
    pub windows_per_count: usize,
    /// Windows in the settled reference (measured right after settling) and in the sliding
    /// median watched against it (default 10, at least 1). Longer than `windows_per_count`:
    /// there is no hurry to re-tune, and a false alarm costs a whole search.
    pub monitor_windows: usize,
    /// Once the search is over (the settled reference and the monitor), consecutive windows
    /// are pooled until they span at least this many seconds (default 0.05; `0` pools
    /// nothing). The monitor counts windows: on a 2 ms step its `monitor_windows` windows
    /// would span ~20 ms, and one stall of the host would read as a lasting drop and re-open
    /// tuning. Pooled windows keep its median over a span a stall cannot fill. The search
    /// itself still measures every window.
    pub monitor_window_seconds: f64,
    /// While searching, consecutive windows are pooled in the same way until they span at
    /// least this many seconds (default 0.05; `0` pools nothing): warm-up, the medians and
    /// their spread are then counted in pooled windows. On a 3 ms step one window is one
    /// scheduler slice, and a count's five windows would span 15 ms: the figure of a count
    /// would be the host's jitter more than the count's throughput.
    pub search_window_seconds: f64,
    /// Windows further than this fraction from their count's median are outliers (default
    /// 0.25). When more than a quarter of a count's windows are outliers, the median is not
    /// trusted yet and more windows are measured, up to `extra_windows` more.
    pub outlier_band: f64,
    /// The most windows added to a count whose windows disagree (default 10). After that the
    /// median of all its windows is used as it is.
    pub extra_windows: usize,
    /// One more learner must raise the median throughput by more than this fraction to be kept
    /// (default 0.05 = 5%). When two counts are within the threshold the smaller one wins: fewer
    /// learners use less memory and keep the total batch smaller.
    pub threshold: f64,
    /// How sure a gain must be (default 1.5; `0` turns this off): the larger of two counts
    /// must beat the smaller by the threshold **plus** this many standard errors of the
    /// difference of their figures, each estimated from the spread of that count's windows.
    /// On a quiet device the spread is small and nothing changes; on a shared host whose
    /// windows swing by ±20%, a 10% lead of one median is noise, and the count it would
    /// add changes what training does (under S-SGD, the aggregate batch) for nothing. While
    /// a gain clears the threshold but not the noise, more windows of the count are measured
    /// (up to `extra_windows` more) before it is called a tie, which the smaller count wins.
    pub significance: f64,
    /// Extra learners tried after one that did not pay before the climb stops (default 1), so
    /// one unlucky median cannot end the climb early. Every probe is compared with the best
    /// count so far, not with its neighbour.
    pub patience: usize,
    /// A close call is measured again before the tuner settles (default 0.25; `0` turns this
    /// off). When the search ends, the count whose comparison with the best count came
    /// closest to the other answer (its change within this fraction of the change needed) is
    /// the rival: the device runs the rival and the best count once more, nearer one first,
    /// and the two are compared on the mean of each one's two medians. On a shared host whose
    /// load comes and goes for seconds at a time, one count's windows can all fall in a busy
    /// stretch and another's in a calm one; measuring both twice, in the order
    /// best, rival, rival, best (or the reverse), cancels a load that changes steadily and
    /// halves the odds that luck decides. It costs one more visit to each of the two counts.
    pub confirm_band: f64,
    /// Once settled, tuning re-opens when the sliding median falls below `1 - retune_drop` of
    /// the settled reference (default 0.2 = 20%; in `(0, 1]`, `1` never re-opens) twice in a
    /// row: over `monitor_windows` windows, and again over the next `monitor_windows` fresh
    /// ones, so a burst of load on a shared host that passes within one monitor span does not
    /// re-open a search. Keep it well above the noise: on simulated devices whose windows swing
    /// by ±20% a stable device re-opened about once in 100,000 monitored windows, but a host whose
    /// load itself moves by 20% for seconds at a time re-opens it (raise this there).
    pub retune_drop: f64,
    /// Optional cap on the bytes crossbow may use per device, applied on top of the budget the
    /// engine reports in [`MemoryFigures`](crate::MemoryFigures) (the smaller one counts).
    pub memory_budget_bytes: Option<u64>,
    /// Refuse to add learners while the device's memory need is unknown (default `true`): no
    /// per-learner figure, or no budget and no free-memory figure. Set it to `false` only for
    /// devices whose memory cannot run out in practice.
    pub require_memory_figures: bool,
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            initial_learners: 1,
            min_learners: 1,
            max_learners: 16,
            warmup_windows: 2,
            windows_per_count: 5,
            monitor_windows: 10,
            monitor_window_seconds: 0.05,
            search_window_seconds: 0.05,
            outlier_band: 0.25,
            extra_windows: 10,
            threshold: 0.05,
            significance: 1.5,
            patience: 1,
            confirm_band: 0.25,
            retune_drop: 0.2,
            memory_budget_bytes: None,
            require_memory_figures: true,
        }
    }
}

/// Why a [`TunerConfig`] was rejected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// `min_learners` is zero.
    #[error("min_learners must be at least 1 (got 0)")]
    ZeroMinLearners,
    /// `min_learners > max_learners`.
    #[error("min_learners ({min}) is larger than max_learners ({max})")]
    MinAboveMax {
        /// The configured minimum.
        min: usize,
        /// The configured maximum.
        max: usize,
    },
    /// `initial_learners` lies outside `[min_learners, max_learners]`.
    #[error("initial_learners ({initial}) must lie in [min_learners, max_learners] = [{min}, {max}]")]
    InitialOutOfRange {
        /// The configured start.
        initial: usize,
        /// The configured minimum.
        min: usize,
        /// The configured maximum.
        max: usize,
    },
    /// `windows_per_count` is zero.
    #[error("windows_per_count must be at least 1 (got 0)")]
    ZeroWindows,
    /// `monitor_windows` is zero.
    #[error("monitor_windows must be at least 1 (got 0)")]
    ZeroMonitorWindows,
    /// `outlier_band` is not a positive finite fraction.
    #[error("outlier_band must be a finite fraction > 0 (got {0})")]
    OutlierBand(f64),
    /// `threshold` is negative, NaN or infinite.
    #[error("threshold must be a finite fraction >= 0 (got {0})")]
    Threshold(f64),
    /// `monitor_window_seconds` is negative, NaN or infinite.
    #[error("monitor_window_seconds must be a finite number of seconds >= 0 (got {0})")]
    MonitorWindowSeconds(f64),
    /// `search_window_seconds` is negative, NaN or infinite.
    #[error("search_window_seconds must be a finite number of seconds >= 0 (got {0})")]
    SearchWindowSeconds(f64),
    /// `significance` is negative, NaN or infinite.
    #[error("significance must be a finite number of standard errors >= 0 (got {0})")]
    Significance(f64),
    /// `confirm_band` is negative, NaN or infinite.
    #[error("confirm_band must be a finite fraction >= 0 (got {0})")]
    ConfirmBand(f64),
    /// `retune_drop` is not in `(0, 1]`.
    #[error("retune_drop must be a fraction in (0, 1] (got {0})")]
    RetuneDrop(f64),
    /// `memory_budget_bytes` is `Some(0)`.
    #[error("memory_budget_bytes must be positive when set (got 0)")]
    ZeroMemoryBudget,
}

impl TunerConfig {
    /// Checks every field; the first problem found is returned. Never panics.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.min_learners == 0 {
            return Err(ConfigError::ZeroMinLearners);
        }
        if self.min_learners > self.max_learners {
            return Err(ConfigError::MinAboveMax { min: self.min_learners, max: self.max_learners });
        }
        if !(self.min_learners..=self.max_learners).contains(&self.initial_learners) {
            return Err(ConfigError::InitialOutOfRange {
                initial: self.initial_learners,
                min: self.min_learners,
                max: self.max_learners,
            });
        }
        if self.windows_per_count == 0 {
            return Err(ConfigError::ZeroWindows);
        }
        if self.monitor_windows == 0 {
            return Err(ConfigError::ZeroMonitorWindows);
        }
        if !(self.outlier_band.is_finite() && self.outlier_band > 0.0) {
            return Err(ConfigError::OutlierBand(self.outlier_band));
        }
        if !(self.threshold.is_finite() && self.threshold >= 0.0) {
            return Err(ConfigError::Threshold(self.threshold));
        }
        if !(self.monitor_window_seconds.is_finite() && self.monitor_window_seconds >= 0.0) {
            return Err(ConfigError::MonitorWindowSeconds(self.monitor_window_seconds));
        }
        if !(self.search_window_seconds.is_finite() && self.search_window_seconds >= 0.0) {
            return Err(ConfigError::SearchWindowSeconds(self.search_window_seconds));
        }
        if !(self.significance.is_finite() && self.significance >= 0.0) {
            return Err(ConfigError::Significance(self.significance));
        }
        if !(self.confirm_band.is_finite() && self.confirm_band >= 0.0) {
            return Err(ConfigError::ConfirmBand(self.confirm_band));
        }
        if !(self.retune_drop > 0.0 && self.retune_drop <= 1.0) {
            return Err(ConfigError::RetuneDrop(self.retune_drop));
        }
        if self.memory_budget_bytes == Some(0) {
            return Err(ConfigError::ZeroMemoryBudget);
        }
        Ok(())
    }
}
