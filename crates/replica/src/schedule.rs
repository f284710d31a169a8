//! Learning-rate schedules, as a function of training progress in epochs (fractional).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A learning-rate schedule. Progress is measured in (fractional) epochs, so a schedule means
/// the same thing whatever the batch size or number of learners.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    /// The base rate throughout.
    Constant,
    /// The base rate times `gamma` for every milestone (epoch) passed.
    MultiStep {
        /// Epochs at which the rate is multiplied by `gamma` once more.
        milestones: Vec<f64>,
        /// Factor applied at each milestone, usually in `(0, 1)` (default 0.1).
        gamma: f64,
    },
    /// Linear warm-up from `start_factor × base` to the base rate over `warmup` epochs, then
    /// multistep.
    WarmupMultiStep {
        /// Length of the linear warm-up, in epochs; 0 disables it.
        warmup: f64,
        /// Fraction of the base rate at epoch 0, usually in `(0, 1]` (default 0.1).
        start_factor: f64,
        /// Epochs at which the rate is multiplied by `gamma` once more.
        milestones: Vec<f64>,
        /// Factor applied at each milestone, usually in `(0, 1)` (default 0.1).
        gamma: f64,
    },
    /// Cosine annealing from the base rate to `min_factor × base` at `total` epochs (and
    /// constant after).
    Cosine {
        /// Epoch at which the rate reaches its minimum.
        total: f64,
        /// Final rate as a fraction of the base rate, usually in `[0, 1]`.
        min_factor: f64,
    },
}

impl Schedule {
    /// The learning rate at `epoch` for a base rate `base`.
    pub fn lr(&self, base: f64, epoch: f64) -> f64 {
        let steps = |ms: &[f64], gamma: f64| gamma.powi(ms.iter().filter(|&&m| epoch >= m).count() as i32);
        match self {
            Schedule::Constant => base,
            Schedule::MultiStep { milestones, gamma } => base * steps(milestones, *gamma),
            Schedule::WarmupMultiStep { warmup, start_factor, milestones, gamma } => {
                let w = if *warmup > 0.0 && epoch < *warmup {
                    start_factor + (1.0 - start_factor) * epoch / warmup
                } else {
                    1.0
                };
                base * w * steps(milestones, *gamma)
            }
            Schedule::Cosine { total, min_factor } => {
                let t = (epoch / total).clamp(0.0, 1.0);
                base * (min_factor + (1.0 - min_factor) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos()))
            }
        }
    }

    /// The number of step-downs (milestones passed) at `epoch`: SMA resets every replica to
    /// the central model when this increases.
    pub fn stage(&self, epoch: f64) -> usize {
        match self {
            // A milestone that does not lower the rate (gamma >= 1) is not a step down.
            Schedule::MultiStep { milestones, gamma } | Schedule::WarmupMultiStep { milestones, gamma, .. }
                if *gamma < 1.0 =>
            {
                milestones.iter().filter(|&&m| epoch >= m).count()
            }
            _ => 0,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        let ms_ok = |ms: &[f64]| ms.iter().all(|m| m.is_finite() && *m >= 0.0) && ms.windows(2).all(|w| w[0] < w[1]);
        match self {
            Schedule::Constant => Ok(()),
            Schedule::MultiStep { milestones, gamma } | Schedule::WarmupMultiStep { milestones, gamma, .. } => {
                if !ms_ok(milestones) {
                    return Err(format!("milestones {milestones:?} must be increasing, finite and >= 0"));
                }
                if !(*gamma > 0.0 && gamma.is_finite()) {
                    return Err(format!("gamma must be positive, got {gamma}"));
                }
                if let Schedule::WarmupMultiStep { warmup, start_factor, .. } = self
                    && !(*warmup >= 0.0 && warmup.is_finite() && (0.0..=1.0).contains(start_factor))
                {
                    return Err(format!("warm-up {warmup} must be >= 0 and its start factor {start_factor} in [0, 1]"));
                }
                Ok(())
            }
            Schedule::Cosine { total, min_factor } => {
                if !(*total > 0.0 && total.is_finite() && (0.0..=1.0).contains(min_factor)) {
                    return Err(format!("cosine needs total > 0 and min factor in [0, 1], got {total}, {min_factor}"));
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |ms: &[f64]| ms.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(",");
        match self {
            Schedule::Constant => write!(f, "constant"),
            Schedule::MultiStep { milestones, gamma } => write!(f, "multistep:{}:{gamma}", list(milestones)),
            Schedule::WarmupMultiStep { warmup, start_factor, milestones, gamma } => {
                write!(f, "warmup:{warmup}:{start_factor}:{}:{gamma}", list(milestones))
            }
            Schedule::Cosine { total, min_factor } => write!(f, "cosine:{total}:{min_factor}"),
        }
    }
}

impl FromStr for Schedule {
    type Err = String;
    /// `constant` · `multistep:E1,E2[:GAMMA]` · `warmup:W[:START]:E1,E2[:GAMMA]` ·
    /// `cosine[:TOTAL[:MIN]]` (epochs; GAMMA default 0.1, START 0.1, MIN 0; a cosine without
    /// TOTAL is completed by the trainer with the epoch limit).
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.trim().split(':').collect();
        let num = |t: &str, what: &str| {
            t.trim().parse::<f64>().map_err(|_| format!("schedule '{s}': {what} '{t}' is not a number"))
        };
        let list = |t: &str| -> Result<Vec<f64>, String> {
            if t.trim().is_empty() {
                return Ok(vec![]);
            }
            t.split(',').map(|m| num(m, "milestone")).collect()
        };
        let sched = match parts.as_slice() {
            ["constant"] => Schedule::Constant,
            ["multistep", ms] => Schedule::MultiStep { milestones: list(ms)?, gamma: 0.1 },
            ["multistep", ms, g] => Schedule::MultiStep { milestones: list(ms)?, gamma: num(g, "gamma")? },
            ["warmup", w, ms] => Schedule::WarmupMultiStep {
                warmup: num(w, "warm-up")?,
                start_factor: 0.1,
                milestones: list(ms)?,
                gamma: 0.1,
            },
            ["warmup", w, st, ms] => Schedule::WarmupMultiStep {
                warmup: num(w, "warm-up")?,
                start_factor: num(st, "start factor")?,
                milestones: list(ms)?,
                gamma: 0.1,
            },
            ["warmup", w, st, ms, g] => Schedule::WarmupMultiStep {
                warmup: num(w, "warm-up")?,
                start_factor: num(st, "start factor")?,
                milestones: list(ms)?,
                gamma: num(g, "gamma")?,
            },
            ["cosine"] => Schedule::Cosine { total: f64::NAN, min_factor: 0.0 },
            ["cosine", t] => Schedule::Cosine { total: num(t, "total")?, min_factor: 0.0 },
            ["cosine", t, m] => Schedule::Cosine { total: num(t, "total")?, min_factor: num(m, "min factor")? },
            _ => {
                return Err(format!(
                    "unknown schedule '{s}' (expected constant, multistep:E1,E2[:GAMMA], warmup:W[:START]:E1,E2[:GAMMA] or cosine[:TOTAL[:MIN]])"
                ));
            }
        };
        if let Schedule::Cosine { total, .. } = &sched
            && total.is_nan()
        {
            return Ok(sched); // completed later with the epoch limit
        }
        sched.validate().map_err(|e| format!("schedule '{s}': {e}"))?;
        Ok(sched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        let m: Schedule = "multistep:80,120".parse().unwrap();
        assert_eq!(m.lr(0.1, 10.0), 0.1);
        assert!((m.lr(0.1, 80.0) - 0.01).abs() < 1e-12);
        assert!((m.lr(0.1, 130.0) - 0.001).abs() < 1e-12);
        assert_eq!(m.stage(100.0), 1);
        let w: Schedule = "warmup:5:0.2:30,60:0.5".parse().unwrap();
        assert!((w.lr(1.0, 0.0) - 0.2).abs() < 1e-12);
        assert!((w.lr(1.0, 2.5) - 0.6).abs() < 1e-12);
        assert!((w.lr(1.0, 40.0) - 0.5).abs() < 1e-12);
        let c: Schedule = "cosine:10:0.1".parse().unwrap();
        assert!((c.lr(1.0, 0.0) - 1.0).abs() < 1e-12);
        assert!((c.lr(1.0, 5.0) - 0.55).abs() < 1e-12);
        assert!((c.lr(1.0, 10.0) - 0.1).abs() < 1e-12);
        assert_eq!("constant".parse::<Schedule>().unwrap().lr(0.3, 99.0), 0.3);
        for s in ["constant", "multistep:80,120:0.1", "cosine:10:0.1", "warmup:5:0.2:30,60:0.5"] {
            assert_eq!(
                s.parse::<Schedule>().unwrap().to_string().parse::<Schedule>().unwrap(),
                s.parse::<Schedule>().unwrap()
            );
        }
    }

    #[test]
    fn a_milestone_that_does_not_lower_the_rate_is_not_a_drop() {
        let up: Schedule = "multistep:10,20:2".parse().unwrap();
        assert!((up.lr(0.1, 15.0) - 0.2).abs() < 1e-12);
        assert_eq!(up.stage(25.0), 0);
        let flat: Schedule = "warmup:1:0.5:10:1".parse().unwrap();
        assert_eq!(flat.stage(25.0), 0);
        let down: Schedule = "warmup:1:0.5:10:0.5".parse().unwrap();
        assert_eq!(down.stage(25.0), 1);
    }

    #[test]
    fn bad_schedules_are_errors() {
        for bad in
            ["step", "multistep:a,b", "multistep:80,20", "multistep:10:-1", "cosine:0", "warmup:x:1", "cosine:10:2"]
        {
            let e = bad.parse::<Schedule>().unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
