//! The auto-tuner in the training loop, written once for `train`, `bench` and `experiment`:
//! after every iteration, measure each device, ask its tuner, and add or remove a learner.
//!
//! Each device's tuner is fed that device's own compute time for the iteration (its learners'
//! forward, backward and local steps and its reduction, [`IterationRecord::device_seconds`]),
//! not the iteration time every device shares at the synchronisation barrier, which would
//! credit one device's change to all. When devices share a barrier (more than one device),
//! they are also probed one at a time by default: device 1 starts tuning when device 0 has
//! settled, so that a change on one device never lands in another's measurement window.

use crossbow_kernels::Backend;
use crossbow_tuner::{Decision, MemoryFigures, Report, Sample, Tuner, TunerConfig};
use serde::Serialize;

use super::{Engine, IterationRecord};
use crate::error::{ReplicaError, Result};

/// Something the auto-tuner did, for logs and metrics files.
#[derive(Clone, Debug, Serialize)]
pub struct TuningEvent {
    /// The iteration after which it happened.
    pub iteration: u64,
    /// Training progress, epochs.
    pub epoch: f64,
    /// The device.
    pub device: usize,
    /// The tuner's report (decision, reason, figures).
    pub report: Report,
    /// Learners per device after the decision was applied.
    pub learners_after: Vec<usize>,
    /// Why the decision could not be applied, if it could not.
    pub failed: Option<String>,
}

impl TuningEvent {
    /// One line: `k learners: N img/s -> add / remove / keep (reason)`.
    pub fn line(&self) -> String {
        let action = match self.report.decision {
            Decision::AddLearner => "add a learner",
            Decision::RemoveLearner => "remove a learner",
            Decision::Keep => "keep",
            Decision::Settled => "settled",
        };
        let now = self.report.learners.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
        let mut s = format!(
            "tuner device {}: {now} learners -> {action} (target {}): {}",
            self.device, self.report.target, self.report.reason
        );
        if let Some(e) = &self.failed {
            s.push_str(&format!(" [could not apply: {e}]"));
        }
        s
    }
}

/// The tuner and the bookkeeping around it.
pub struct AutoTuner {
    tuner: Tuner,
    /// With several devices behind one barrier: the device being tuned now.
    probing: Option<usize>,
    last_logged: Vec<Option<Decision>>,
}

impl AutoTuner {
    /// A tuner for `engine`'s devices with memory figures from its footprint and each
    /// device's budget ([`super::DeviceFactory::memory_budget`]). `one_at_a_time`: probe the
    /// devices one after another (only matters with more than one device).
    pub fn new<B: Backend>(engine: &Engine<B>, config: TunerConfig, one_at_a_time: bool) -> Result<Self> {
        let n = engine.devices().len();
        let mut tuner = Tuner::new(config, n).map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
        let fp = engine.footprint();
        for d in 0..n {
            let budget = engine.memory_budget(d).unwrap_or(u64::MAX);
            tuner
                .set_memory(d, MemoryFigures::new(fp.bytes_per_learner, fp.fixed_bytes_per_device, budget))
                .map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
        }
        Ok(AutoTuner { tuner, probing: (one_at_a_time && n > 1).then_some(0), last_logged: vec![None; n] })
    }

    /// The tuner itself (its tables and status).
    pub fn tuner(&self) -> &Tuner {
        &self.tuner
    }

    /// Whether every device has settled.
    pub fn settled(&self) -> bool {
        self.probing.is_none() && self.tuner.all_settled()
    }

    /// Feeds iteration `rec` to the tuner and applies its decisions to `engine`. Returns the
    /// decisions worth logging (changes, failures and the first "settled" of a device). A
    /// change the engine cannot make (memory, a backend that failed) is reported to the tuner,
    /// which then stops asking for it.
    pub fn after_step<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        rec: &IterationRecord,
    ) -> Result<Vec<TuningEvent>> {
        let mut events = vec![];
        let batch = engine.config().batch_size;
        for (d, &m) in rec.learners.iter().enumerate() {
            if let Some(p) = self.probing
                && p != d
            {
                continue;
            }
            let secs = rec.device_seconds.get(d).copied().unwrap_or(rec.seconds);
            let sample = Sample::new(m, (m * batch) as u64, secs);
            let report = self.tuner.observe(d, &sample).map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
            let applied = match report.decision {
                Decision::AddLearner => Some(engine.add_learner(d)),
                Decision::RemoveLearner => Some(engine.remove_learner(d)),
                Decision::Keep | Decision::Settled => None,
            };
            let failed = match applied {
                Some(Err(e)) => {
                    self.tuner.change_failed(d).map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
                    Some(e.to_string())
                }
                _ => None,
            };
            if report.decision == Decision::Settled
                && let Some(p) = self.probing
            {
                self.probing = (p + 1 < rec.learners.len()).then_some(p + 1);
            }
            let repeat_settled = report.decision == Decision::Settled && self.last_logged[d] == Some(Decision::Settled);
            if (report.decision != Decision::Keep && !repeat_settled) || failed.is_some() {
                self.last_logged[d] = Some(report.decision);
                events.push(TuningEvent {
                    iteration: rec.iteration,
                    epoch: rec.epoch,
                    device: d,
                    report,
                    learners_after: engine.layout(),
                    failed,
                });
            }
        }
        Ok(events)
    }
}

/// The auto-tuner's whole state as JSON, for checkpoints: a run resumed with
/// [`AutoTuner::restore`] continues the same search with the same measurements.
impl AutoTuner {
    /// The state ([`AutoTuner::restore`] reads it back).
    pub fn save(&self) -> Result<serde_json::Value> {
        serde_json::to_value((&self.tuner, self.probing, &self.last_logged))
            .map_err(|e| ReplicaError::Config(format!("tuner state: {e}")))
    }

    /// Replaces the state with one [`AutoTuner::save`] wrote, for the same number of
    /// devices; the memory figures stay this tuner's (they are the current engine's).
    pub fn restore(&mut self, state: &serde_json::Value) -> Result<()> {
        type Saved = (Tuner, Option<usize>, Vec<Option<Decision>>);
        let (mut tuner, probing, last_logged): Saved = serde_json::from_value(state.clone())
            .map_err(|e| ReplicaError::Config(format!("tuner state in the checkpoint is unreadable: {e}")))?;
        let n = self.last_logged.len();
        if tuner.devices() != n || last_logged.len() != n {
            return Err(ReplicaError::Config(format!(
                "tuner state is for {} devices, this run has {n}",
                tuner.devices()
            )));
        }
        for d in 0..n {
            let mine = self.tuner.device(d).ok().and_then(|t| t.memory());
            let saved = tuner.device(d).ok().and_then(|t| t.memory());
            if let Some(m) = mine
                && mine != saved
            {
                tuner.set_memory(d, m).map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
            }
        }
        self.tuner = tuner;
        self.probing = probing;
        self.last_logged = last_logged;
        Ok(())
    }
}
