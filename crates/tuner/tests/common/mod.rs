//! A simulated device for driving the tuner: a throughput curve over learner counts, a memory
//! budget, per-window multiplicative noise, outliers and missing samples, all seeded.

#![allow(dead_code)] // Each test binary uses part of the simulator.

use crossbow_tuner::{Decision, DeviceTuner, MemoryFigures, Report, Sample, TunerConfig};

/// SplitMix64: tiny, seeded, good enough for noise.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in `[lo, hi]`.
    pub fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as usize
    }
}

/// The shape families the property tests draw from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Rises with shrinking gains to a peak at m*, then falls.
    Concave,
    /// Rises to a knee at k, then stays flat (or declines by at most 1% per learner).
    MonotoneFlat,
    /// Keeps rising past the memory limit: m > m_mem does not fit.
    MemoryCliff,
}

/// Throughput (images/s) at 1..=len learners.
#[derive(Clone, Debug)]
pub struct Curve {
    pub values: Vec<f64>,
}

/// Relative gain of every step below the best count. Curves whose steps below the peak gain
/// little are ill-posed for a threshold rule (it rightly stops where one more learner gains
/// less than the threshold), so below the last step every step gains at least 15%; the last
/// step into the peak gains at least 6% (just above the 5% default threshold).
const GAIN_MIN: f64 = 0.15;
const GAIN_MAX: f64 = 0.9;
const LAST_GAIN_MIN: f64 = 0.06;

impl Curve {
    pub fn at(&self, m: usize) -> f64 {
        match m {
            0 => 0.0,
            m => self.values.get(m - 1).copied().unwrap_or(0.0),
        }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Builds a curve of `len` counts from a base throughput and per-step gains
    /// (`gains[i]` is the change from `i + 1` to `i + 2` learners).
    fn from_gains(base: f64, gains: &[f64]) -> Self {
        let mut values = vec![base];
        let mut last = base;
        for g in gains {
            last *= 1.0 + g;
            values.push(last);
        }
        Curve { values }
    }

    /// Shrinking gains up to `peak`: `peak - 1` steps, sorted decreasing (concave in log).
    fn rising_gains(rng: &mut Rng, steps: usize) -> Vec<f64> {
        let mut gains: Vec<f64> = (0..steps).map(|_| rng.range(GAIN_MIN, GAIN_MAX)).collect();
        gains.sort_by(|a, b| b.total_cmp(a));
        if let Some(last) = gains.last_mut() {
            // The last step into the peak may be small, but still above the threshold.
            *last = rng.range(LAST_GAIN_MIN, *last);
        }
        gains
    }

    pub fn random(shape: Shape, rng: &mut Rng, len: usize) -> (Curve, usize) {
        let base = rng.range(50.0, 2000.0);
        match shape {
            Shape::Concave => {
                let peak = rng.int(1, len - 2);
                let mut gains = Self::rising_gains(rng, peak - 1);
                let mut loss = rng.range(0.03, 0.25);
                for _ in peak..len {
                    gains.push(-loss);
                    loss = (loss * rng.range(1.0, 1.5)).min(0.6);
                }
                (Self::from_gains(base, &gains), len)
            }
            Shape::MonotoneFlat => {
                let knee = rng.int(1, len - 2);
                let mut curve = Self::from_gains(base, &Self::rising_gains(rng, knee - 1));
                // Flat, or declining very slightly (at most 1% per learner).
                let decline = rng.range(0.0, 0.01);
                let top = curve.at(knee);
                for m in knee + 1..=len {
                    curve.values.push(top * (1.0 - decline * (m - knee) as f64));
                }
                (curve, len)
            }
            Shape::MemoryCliff => {
                // Rising all the way (the best count is wherever memory ends).
                let limit = rng.int(1, len - 2);
                let gains = Self::rising_gains(rng, len - 1);
                (Self::from_gains(base, &gains), limit)
            }
        }
    }

    /// The best count among those that fit (`<= fit_max`): highest throughput, the smallest
    /// count on ties.
    pub fn best(&self, fit_max: usize) -> usize {
        let mut best = 1;
        for m in 1..=fit_max.min(self.len()) {
            if self.at(m) > self.at(best) {
                best = m;
            }
        }
        best
    }

    /// Whether settling at `m` is acceptable: within one learner of the best count, or within
    /// 5% of the best throughput.
    pub fn acceptable(&self, m: usize, fit_max: usize) -> bool {
        let best = self.best(fit_max);
        m.abs_diff(best) <= 1 || self.at(m) >= 0.95 * self.at(best)
    }
}

/// A shared host's load that comes and goes: stretches of windows (geometric lengths, mean
/// `mean_windows`) alternate between full speed and `busy` of it. One count's windows can all
/// fall in one stretch, the next count's in another: the noise is correlated in time, which
/// a median over consecutive windows does not remove.
#[derive(Clone, Copy, Debug)]
pub struct Drift {
    pub busy: f64,
    pub mean_windows: f64,
    pub busy_now: bool,
}

/// A device with `curve` and a memory budget that fits `fit_max` learners exactly.
#[derive(Clone, Debug)]
pub struct SimDevice {
    pub curve: Curve,
    pub fit_max: usize,
    pub memory: MemoryFigures,
    pub learners: usize,
    /// Throughput multiplier (a "shift" of the whole curve).
    pub scale: f64,
    /// ± this fraction of uniform multiplicative noise per window.
    pub noise: f64,
    /// Probability of an outlier window (×0.3 or ×2, equally likely).
    pub outlier_rate: f64,
    /// Probability of a missing sample (no images).
    pub missing_rate: f64,
    /// Host load that comes and goes, if any (see [`Drift`]).
    pub drift: Option<Drift>,
    /// Windows simulated so far.
    pub windows: usize,
    /// Most learners ever run.
    pub peak_learners: usize,
    pub rng: Rng,
}

pub const BYTES_PER_LEARNER: u64 = 3 << 30; // 3 GiB
pub const FIXED_BYTES: u64 = 1 << 30;

impl SimDevice {
    pub fn new(curve: Curve, fit_max: usize, start: usize, seed: u64) -> Self {
        // The budget fits exactly `fit_max` learners, plus a little slack below the next one.
        let budget = FIXED_BYTES + BYTES_PER_LEARNER * fit_max as u64 + (BYTES_PER_LEARNER / 2);
        SimDevice {
            curve,
            fit_max,
            memory: MemoryFigures::new(BYTES_PER_LEARNER, FIXED_BYTES, budget),
            learners: start,
            scale: 1.0,
            noise: 0.10,
            outlier_rate: 0.05,
            missing_rate: 0.04,
            drift: None,
            windows: 0,
            peak_learners: start,
            rng: Rng::new(seed),
        }
    }

    /// One window's sample at the current count.
    pub fn sample(&mut self) -> Sample {
        self.windows += 1;
        let mut rate = self.curve.at(self.learners) * self.scale;
        if let Some(d) = &mut self.drift {
            if self.rng.unit() < 1.0 / d.mean_windows {
                d.busy_now = !d.busy_now;
            }
            if d.busy_now {
                rate *= d.busy;
            }
        }
        rate *= 1.0 + self.rng.range(-self.noise, self.noise);
        if self.rng.unit() < self.outlier_rate {
            rate *= if self.rng.unit() < 0.5 { 0.3 } else { 2.0 };
        }
        let seconds = self.rng.range(0.05, 0.5);
        let images = if self.rng.unit() < self.missing_rate {
            0 // a missing sample: the monitor had nothing for this window
        } else {
            ((rate * seconds).round() as u64).max(1)
        };
        let sample = Sample::new(self.learners, images, seconds);
        if self.windows == 1 { sample.with_memory(self.memory) } else { sample }
    }

    /// Applies a decision like the engine would; panics (fails the test) if the tuner ever
    /// made the device exceed its memory budget.
    pub fn apply(&mut self, report: &Report) {
        match report.decision {
            Decision::AddLearner => self.learners += 1,
            Decision::RemoveLearner => self.learners -= 1,
            Decision::Keep | Decision::Settled => {}
        }
        self.peak_learners = self.peak_learners.max(self.learners);
        assert!(
            self.learners <= self.fit_max,
            "the tuner made the device run {} learners, only {} fit: {report:?}",
            self.learners,
            self.fit_max
        );
        assert!(self.learners >= 1, "the tuner removed the last learner");
    }
}

/// Drives `tuner` on `device` until it settles (or `max_windows` pass). Returns the window
/// count at which the report first said `Settled` with the device at the target.
pub fn run_until_settled(tuner: &mut DeviceTuner, device: &mut SimDevice, max_windows: usize) -> Option<usize> {
    for w in 1..=max_windows {
        let report = tuner.observe(&device.sample());
        device.apply(&report);
        if report.decision == Decision::Settled && report.learners == Some(device.learners) {
            return Some(w);
        }
    }
    None
}

/// Windows the search may need to settle with `max` learners allowed when a fraction
/// `missing` of the samples is missing: every count measured about once (first window +
/// warm-up + median windows; a round that starts above 1 probes down first, so allow two
/// passes over the low counts), the walks between probes, and a margin for windows measured
/// longer because outliers made them disagree.
pub fn settle_bound(config: &TunerConfig, max: usize, missing: f64) -> usize {
    let per_count = 1 + config.warmup_windows + config.windows_per_count;
    let counts = max + 2 * (config.patience + 1);
    let valid = counts * per_count + 2 * max;
    (valid as f64 * 1.25 / (1.0 - missing)).ceil() as usize
}
