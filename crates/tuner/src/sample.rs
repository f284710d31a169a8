//! What the engine feeds the tuner: throughput samples and memory figures.

use serde::{Deserialize, Serialize};

/// One measurement window of one device: how many images its learners processed and how long
/// that took, at a given learner count.
///
/// A window is whatever the engine chooses (one iteration, or several); the tuner only needs
/// the images, the elapsed time and the learner count that ran **the whole window**. If the
/// count changed inside a window, report the new count: the tuner discards the first window
/// at every new count anyway.
///
/// A sample with no learners, no images, or an elapsed time that is zero, negative, NaN or
/// infinite is **missing**: it is ignored, never read as a drop in throughput.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Learners that ran on the device during the window.
    pub learners: usize,
    /// Images processed by all of the device's learners during the window.
    pub images: f64,
    /// Elapsed wall-clock seconds of the window.
    pub seconds: f64,
    /// New memory figures for the device, if they changed (`None` keeps the last ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryFigures>,
}

impl Sample {
    /// A window in which `learners` learners processed `images` images in `seconds` seconds.
    pub fn new(learners: usize, images: u64, seconds: f64) -> Self {
        Sample {
            learners,
            // Exact below 2^53 images per window.
            images: images as f64,
            seconds,
            memory: None,
        }
    }

    /// A window summarised as a rate (images per second), e.g. from an external monitor.
    pub fn from_rate(learners: usize, images_per_second: f64) -> Self {
        Sample { learners, images: images_per_second, seconds: 1.0, memory: None }
    }

    /// The same sample carrying new memory figures for the device.
    pub fn with_memory(mut self, memory: MemoryFigures) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Images per second, or `None` when the sample is missing (see the type's docs).
    pub fn throughput(&self) -> Option<f64> {
        if self.learners == 0 {
            return None;
        }
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !ok(self.images) || !ok(self.seconds) {
            return None;
        }
        let rate = self.images / self.seconds;
        ok(rate).then_some(rate)
    }
}

/// A device's memory figures, from the engine's memory plan and the device itself.
///
/// `n` learners fit when `fixed_bytes + n * bytes_per_learner` is at most the budget (the
/// smaller of [`budget_bytes`](Self::budget_bytes) and the configured
/// [`memory_budget_bytes`](crate::TunerConfig::memory_budget_bytes)), and, for the next learner,
/// when `bytes_per_learner` is at most [`free_bytes`](Self::free_bytes) if that is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryFigures {
    /// Bytes one learner needs: replica, activations and workspace, from the memory plan.
    pub bytes_per_learner: u64,
    /// Bytes the device needs whatever the learner count (central model, synchroniser
    /// buffers, data staging).
    #[serde(default)]
    pub fixed_bytes: u64,
    /// Bytes crossbow may use on the device in total (capacity less what others hold), if known.
    #[serde(default)]
    pub budget_bytes: Option<u64>,
    /// Bytes free on the device right now, with the current learners allocated, if known.
    #[serde(default)]
    pub free_bytes: Option<u64>,
}

impl MemoryFigures {
    /// Figures with a total budget and no free-memory reading.
    pub fn new(bytes_per_learner: u64, fixed_bytes: u64, budget_bytes: u64) -> Self {
        MemoryFigures { bytes_per_learner, fixed_bytes, budget_bytes: Some(budget_bytes), free_bytes: None }
    }

    /// The same figures with a free-memory reading.
    pub fn with_free(mut self, free_bytes: u64) -> Self {
        self.free_bytes = Some(free_bytes);
        self
    }

    /// Bytes `learners` learners need in total (`fixed + learners * per learner`), saturating
    /// at `u64::MAX` instead of overflowing.
    pub fn bytes_for(&self, learners: usize) -> u64 {
        let total = u128::from(self.fixed_bytes) + u128::from(self.bytes_per_learner) * (learners as u128);
        u64::try_from(total).unwrap_or(u64::MAX)
    }
}

impl MemoryFigures {
    /// The most learners whose total need fits in `budget` bytes (0 if not even the fixed
    /// part does; `usize::MAX` if learners need no memory).
    pub(crate) fn learners_within(&self, budget: u64) -> usize {
        let Some(room) = budget.checked_sub(self.fixed_bytes) else {
            return 0;
        };
        match room.checked_div(self.bytes_per_learner) {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => usize::MAX,
        }
    }
}

/// Whether a learner count fits in memory, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    Fits,
    /// `needed` total bytes exceed the `budget`.
    OverBudget {
        needed: u64,
        budget: u64,
    },
    /// The next learner needs `needed` bytes and only `free` are free.
    OverFree {
        needed: u64,
        free: u64,
    },
    /// No figures to decide with.
    Unknown,
}

/// Decides whether `learners` fit. `next` says `learners` is one more than are running now, so
/// the free-memory reading applies.
pub(crate) fn fit(figures: Option<&MemoryFigures>, cap: Option<u64>, learners: usize, next: bool) -> Fit {
    let Some(m) = figures else {
        return Fit::Unknown;
    };
    let budget = match (m.budget_bytes, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut checked = false;
    if let Some(budget) = budget {
        checked = true;
        let needed = m.bytes_for(learners);
        if needed > budget {
            return Fit::OverBudget { needed, budget };
        }
    }
    if let (true, Some(free)) = (next, m.free_bytes) {
        checked = true;
        if m.bytes_per_learner > free {
            return Fit::OverFree { needed: m.bytes_per_learner, free };
        }
    }
    if checked { Fit::Fits } else { Fit::Unknown }
}
