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
use crossbow_tuner::{Comparison, Decision, MemoryFigures, Reason, Report, Sample, Tuner, TunerConfig};
use serde::Serialize;

use super::{Engine, IterationRecord};
use crate::error::{ReplicaError, Result};

/// Something the auto-tuner decided, for logs and metrics files: one event per decision (a
/// move of several learners, asked for one learner at a time, is one event).
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
    /// Median images/s of the learners running when the decision was taken, when measured.
    pub images_per_sec: Option<f64>,
    /// The learner count they were compared with and its median images/s, if any.
    pub compared_with: Option<(usize, f64)>,
    /// Learners per device after the decision was applied.
    pub learners_after: Vec<usize>,
    /// Why the decision could not be applied, if it could not.
    pub failed: Option<String>,
    /// With a global batch ([`Engine::set_global_batch`]): the learner counts the tuner
    /// chooses among (those that divide the batch), each one step from the next; the
    /// report's counts are learners all the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<Vec<usize>>,
}

fn learners(n: usize) -> String {
    format!("{n} learner{}", if n == 1 { "" } else { "s" })
}

fn comparison(reason: &Reason) -> Option<&Comparison> {
    match reason {
        Reason::Improved(c)
        | Reason::NoGainTryingMore(c)
        | Reason::NoGain(c)
        | Reason::NotWorthKeeping(c)
        | Reason::WorthKeepingTryingFewer(c)
        | Reason::WorthKeeping(c)
        | Reason::CloseCall(c)
        | Reason::Confirmed(c) => Some(c),
        _ => None,
    }
}

/// Bytes in the largest binary unit that keeps them at least 1 (`1.50 GiB`, `12.0 MiB`).
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        n if n >= 1 << 30 => format!("{:.2} GiB", b / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", b / 1024.0),
        n => format!("{n} bytes"),
    }
}

impl TuningEvent {
    /// One line: `tuner device D: k learners: N img/s (+x% vs j) -> add / remove / keep: why`.
    pub fn line(&self) -> String {
        let r = &self.report;
        let mut s = format!("tuner device {}: ", self.device);
        match r.learners {
            Some(k) => s.push_str(&learners(k)),
            None => s.push_str("no learners measured yet"),
        }
        if let Some(n) = self.images_per_sec {
            s.push_str(&format!(": {n:.0} img/s"));
            if let Some((j, m)) = self.compared_with
                && m > 0.0
            {
                s.push_str(&format!(" ({:+.1}% vs {j})", (n / m - 1.0) * 100.0));
            }
        }
        let k = r.learners.unwrap_or(r.target);
        let action = match r.decision {
            Decision::AddLearner if r.target > k + 1 => format!("add {} (to {})", r.target - k, r.target),
            Decision::AddLearner => "add".to_string(),
            Decision::RemoveLearner if r.target + 1 < k => format!("remove {} (to {})", k - r.target, r.target),
            Decision::RemoveLearner => "remove".to_string(),
            Decision::Keep | Decision::Settled => "keep".to_string(),
        };
        s.push_str(&format!(" -> {action}: {}", self.why()));
        if let Some(e) = &self.failed {
            s.push_str(&format!(" [could not apply: {e}]"));
        }
        s
    }

    /// The reason, in a few words.
    fn why(&self) -> String {
        let r = &self.report;
        let settled = if r.decision == Decision::Settled { ", settled" } else { "" };
        let pct = |x: f64| format!("{:+.1}%", x * 100.0);
        // The change needed grows with the learners added ((1 + threshold)^k - 1): say so
        // when it is more than one learner's worth.
        // The noise margin, when there is one, is said apart from the threshold.
        // With a global batch the tuner steps between the counts that divide it.
        let (k_of, unit) = match &self.counts {
            Some(l) => (
                Box::new(|n: usize| l.iter().position(|&c| c == n).unwrap_or(n)) as Box<dyn Fn(usize) -> usize>,
                "steps",
            ),
            None => (Box::new(|n: usize| n) as Box<dyn Fn(usize) -> usize>, "learners"),
        };
        let needed = |c: Comparison| {
            let k = k_of(c.to_learners).abs_diff(k_of(c.from_learners));
            let mut s = if k > 1 { format!("{} ({} {unit}' worth)", pct(c.needed), k) } else { pct(c.needed) };
            if c.noise > 0.0 {
                s.push_str(&format!(" + {:.1}% for noise", c.noise * 100.0));
            }
            s
        };
        if r.decision == Decision::Settled
            && comparison(&r.reason).is_some()
            && !matches!(r.reason, Reason::Confirmed(_))
        {
            // The comparison was reported with the move that led here.
            return "the best count, settled".to_string();
        }
        let text = match r.reason {
            Reason::Starting => "waiting for the first measurement".to_string(),
            Reason::WarmingUp { .. } | Reason::Measuring { .. } => "measuring".to_string(),
            Reason::Explore { .. } => "first measurement, trying one more".to_string(),
            Reason::Improved(c) => format!("{} beats the {} needed", pct(c.change), needed(c)),
            Reason::NoGainTryingMore(c) => format!(
                "{} over {} is short of the {} needed, but one more learner may still pay off: trying it before giving up",
                pct(c.change),
                learners(c.from_learners),
                needed(c)
            ),
            Reason::NoGain(c) => format!(
                "{}: {} where {} was needed; {} is the best",
                learners(c.to_learners),
                pct(c.change),
                needed(c),
                c.from_learners
            ),
            Reason::NotWorthKeeping(c) => format!(
                "{} gained only {} over {} ({} needed); trying fewer",
                learners(c.to_learners),
                pct(c.change),
                c.from_learners,
                needed(c)
            ),
            Reason::WorthKeepingTryingFewer(c) | Reason::WorthKeeping(c) => format!(
                "{} gain {} over {} ({} needed), worth keeping",
                learners(c.to_learners),
                pct(c.change),
                c.from_learners,
                needed(c)
            ),
            Reason::CloseCall(c) => format!(
                "close call, {} {} over {} ({} needed); measuring both again",
                learners(c.to_learners),
                pct(c.change),
                c.from_learners,
                needed(c)
            ),
            Reason::Confirmed(c) => format!(
                "measured twice, {} {} over {} ({} needed); {} is the best",
                learners(c.to_learners),
                pct(c.change),
                c.from_learners,
                needed(c),
                if c.is_gain() { c.to_learners } else { c.from_learners }
            ),
            Reason::MaxLearners { max } => format!("at the maximum of {}", learners(max)),
            Reason::MinLearners { min } => format!("at the minimum of {}", learners(min)),
            Reason::MemoryBudget { learners: n, needed_bytes, budget_bytes } => {
                format!("{} would need {} of a {} memory budget", learners(n), size(needed_bytes), size(budget_bytes))
            }
            Reason::MemoryFree { needed_bytes, free_bytes } => {
                format!("one more learner needs {}, {} free", size(needed_bytes), size(free_bytes))
            }
            Reason::MemoryUnknown => "memory needs unknown, not adding learners".to_string(),
            Reason::ChangeFailed { learners: n } => format!("could not move to {}", learners(n)),
            Reason::ThroughputDrop { learners: n, drop, .. } => {
                format!("throughput at {} fell {:.1}% since settling; re-tuning", learners(n), drop * 100.0)
            }
            Reason::ExternalChange { expected, reported } => {
                format!("learner count changed outside the tuner ({expected} -> {reported}); re-tuning")
            }
            Reason::Requested => "re-tuning on request".to_string(),
        };
        format!("{text}{settled}")
    }
}

/// Whether a report is a new decision worth an event: a change, failure or settling, and not
/// the next one-learner step of a move already reported (same decision, target and reason).
/// Tuning re-opened (a throughput drop, a count changed outside the tuner, a request) is
/// one too, though its decision is `Keep`: the log says why a settled device searches again.
fn new_decision(last: Option<&(Decision, usize, Reason)>, report: &Report) -> bool {
    let reopened =
        matches!(report.reason, Reason::ThroughputDrop { .. } | Reason::ExternalChange { .. } | Reason::Requested);
    (report.decision != Decision::Keep || reopened) && last != Some(&(report.decision, report.target, report.reason))
}

/// The tuner and the bookkeeping around it.
pub struct AutoTuner {
    tuner: Tuner,
    /// With several devices behind one barrier: the device being tuned now.
    probing: Option<usize>,
    last_logged: Vec<Option<(Decision, usize, Reason)>>,
    /// With a global batch ([`Engine::set_global_batch`]): the learner counts that divide it,
    /// ascending. The tuner itself then counts steps on this ladder (its count `i` is
    /// `ladder[i - 1]` learners), so that every count it tries splits the batch evenly.
    ladder: Option<Vec<usize>>,
}

/// Report `r`, whose counts are steps on `ladder`, in learners.
fn on_ladder(r: &Report, ladder: &[usize]) -> Report {
    let at = |i: usize| ladder.get(i.wrapping_sub(1)).copied().unwrap_or(i);
    let cmp = |c: Comparison| Comparison { from_learners: at(c.from_learners), to_learners: at(c.to_learners), ..c };
    let reason = match r.reason {
        Reason::Explore { learners, median } => Reason::Explore { learners: at(learners), median },
        Reason::Improved(c) => Reason::Improved(cmp(c)),
        Reason::NoGainTryingMore(c) => Reason::NoGainTryingMore(cmp(c)),
        Reason::NoGain(c) => Reason::NoGain(cmp(c)),
        Reason::NotWorthKeeping(c) => Reason::NotWorthKeeping(cmp(c)),
        Reason::WorthKeepingTryingFewer(c) => Reason::WorthKeepingTryingFewer(cmp(c)),
        Reason::WorthKeeping(c) => Reason::WorthKeeping(cmp(c)),
        Reason::CloseCall(c) => Reason::CloseCall(cmp(c)),
        Reason::Confirmed(c) => Reason::Confirmed(cmp(c)),
        Reason::MaxLearners { max } => Reason::MaxLearners { max: at(max) },
        Reason::MinLearners { min } => Reason::MinLearners { min: at(min) },
        Reason::MemoryBudget { learners, needed_bytes, budget_bytes } => {
            Reason::MemoryBudget { learners: at(learners), needed_bytes, budget_bytes }
        }
        Reason::ChangeFailed { learners } => Reason::ChangeFailed { learners: at(learners) },
        Reason::ThroughputDrop { learners, reference, median, drop } => {
            Reason::ThroughputDrop { learners: at(learners), reference, median, drop }
        }
        Reason::ExternalChange { expected, reported } => {
            Reason::ExternalChange { expected: at(expected), reported: at(reported) }
        }
        other => other,
    };
    Report { learners: r.learners.map(at), target: at(r.target), reason, ..*r }
}

impl AutoTuner {
    /// A tuner for `engine`'s devices with memory figures from its footprint and each
    /// device's budget ([`super::DeviceFactory::memory_budget`]). `one_at_a_time`: probe the
    /// devices one after another (only matters with more than one device).
    ///
    /// With a global batch ([`Engine::set_global_batch`]) the tuner tries only the counts
    /// that divide it, from `config.min_learners` to `config.max_learners` (one device in
    /// one process: with several, each device's count would have to divide what the others
    /// leave); its threshold is then per step between them (1 -> 2 -> 4 for a batch of 4).
    pub fn new<B: Backend>(engine: &Engine<B>, config: TunerConfig, one_at_a_time: bool) -> Result<Self> {
        let n = engine.devices().len();
        let fp = engine.footprint();
        let (config, ladder, per_learner) = match engine.global_batch() {
            None => (config, None, fp.bytes_per_learner),
            Some(global) => {
                if n > 1 || engine.world().size() > 1 {
                    return Err(ReplicaError::Config(format!(
                        "the auto-tuner with a global batch needs one device in one process ({n} device(s), {} process(es)); give a fixed learner count instead",
                        engine.world().size()
                    )));
                }
                let ladder: Vec<usize> = (config.min_learners.max(1)..=config.max_learners.min(global))
                    .filter(|k| global.is_multiple_of(*k))
                    .collect();
                let now = engine.learners();
                let Some(at) = ladder.iter().position(|&c| c == now) else {
                    return Err(ReplicaError::Config(format!(
                        "the engine's {now} learner(s) are not among the counts the tuner may choose for a global batch of {global}: {ladder:?}"
                    )));
                };
                // The tuner's linear memory model (fixed + i x per step) made to cover every
                // step: c learners sharing the batch need c x (replica, buffers, workspace)
                // plus the activations of the whole batch, about the current learners' together.
                let act = fp.planned_activation_bytes;
                let fixed_part = fp.bytes_per_learner.saturating_sub(act);
                let whole = act.saturating_mul(now as u64);
                let per = ladder
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| (fixed_part.saturating_mul(c as u64).saturating_add(whole)).div_ceil(i as u64 + 1))
                    .max()
                    .unwrap_or(fp.bytes_per_learner);
                let steps =
                    TunerConfig { min_learners: 1, max_learners: ladder.len(), initial_learners: at + 1, ..config };
                (steps, Some(ladder), per)
            }
        };
        let mut tuner = Tuner::new(config, n).map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
        for d in 0..n {
            let budget = engine.memory_budget(d).unwrap_or(u64::MAX);
            tuner
                .set_memory(d, MemoryFigures::new(per_learner, fp.fixed_bytes_per_device, budget))
                .map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
        }
        Ok(AutoTuner { tuner, probing: (one_at_a_time && n > 1).then_some(0), last_logged: vec![None; n], ladder })
    }

    /// With a global batch, the learner counts the tuner chooses among (ascending).
    pub fn counts(&self) -> Option<&[usize]> {
        self.ladder.as_deref()
    }

    /// Moves device `d` from `from` to `to` learners (a step on the ladder may be several
    /// learners); a move that fails half-way goes back to `from` before the error is returned.
    fn move_learners<B: Backend>(engine: &mut Engine<B>, d: usize, from: usize, to: usize) -> Result<()> {
        let mut go = |to: usize| -> Result<()> {
            while engine.layout().get(d).is_some_and(|&m| m < to) {
                engine.add_learner(d)?;
            }
            while engine.layout().get(d).is_some_and(|&m| m > to) {
                engine.remove_learner(d)?;
            }
            Ok(())
        };
        match go(to) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = go(from);
                Err(e)
            }
        }
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
        // The batch of the iteration just run (a new share is lowered before the next one).
        let batch = engine.batch_size();
        for (d, &m) in rec.learners.iter().enumerate() {
            if let Some(p) = self.probing
                && p != d
            {
                continue;
            }
            let secs = rec.device_seconds.get(d).copied().unwrap_or(rec.seconds);
            // With a ladder the tuner's count is the step: its position, from 1.
            let step = match &self.ladder {
                Some(l) => l.iter().position(|&c| c == m).map(|i| i + 1).ok_or_else(|| {
                    ReplicaError::Config(format!("tuner: {m} learners are not among the counts {l:?}"))
                })?,
                None => m,
            };
            let sample = Sample::new(step, (m * batch) as u64, secs);
            let report = self.tuner.observe(d, &sample).map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
            let applied = match (&self.ladder, report.decision) {
                (Some(l), Decision::AddLearner | Decision::RemoveLearner) => {
                    let next = if report.decision == Decision::AddLearner { step + 1 } else { step.saturating_sub(1) };
                    let to = l.get(next.wrapping_sub(1)).copied().ok_or_else(|| {
                        ReplicaError::Config(format!("tuner: step {next} is not among the counts {l:?}"))
                    })?;
                    Some(Self::move_learners(engine, d, m, to))
                }
                (None, Decision::AddLearner) => Some(engine.add_learner(d)),
                (None, Decision::RemoveLearner) => Some(engine.remove_learner(d)),
                (_, Decision::Keep | Decision::Settled) => None,
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
            if new_decision(self.last_logged[d].as_ref(), &report) || failed.is_some() {
                self.last_logged[d] = Some((report.decision, report.target, report.reason));
                let (images_per_sec, mut compared_with) = self.figures(d, &report);
                let report = match &self.ladder {
                    Some(l) => {
                        compared_with = compared_with.map(|(j, x)| (l.get(j.wrapping_sub(1)).copied().unwrap_or(j), x));
                        on_ladder(&report, l)
                    }
                    None => report,
                };
                events.push(TuningEvent {
                    iteration: rec.iteration,
                    epoch: rec.epoch,
                    device: d,
                    report,
                    images_per_sec,
                    compared_with,
                    learners_after: engine.layout(),
                    failed,
                    counts: self.ladder.clone(),
                });
            }
        }
        Ok(events)
    }

    /// The measured median of the count running at `report`, and the count it was compared
    /// with (from the report's comparison, else the device's table of this round).
    fn figures(&self, d: usize, report: &Report) -> (Option<f64>, Option<(usize, f64)>) {
        let Some(k) = report.learners else { return (None, None) };
        match comparison(&report.reason) {
            Some(c) if c.to_learners == k => (Some(c.to_median), Some((c.from_learners, c.from_median))),
            Some(c) if c.from_learners == k => (Some(c.from_median), Some((c.to_learners, c.to_median))),
            _ => {
                let table = self.tuner.device(d).map(|t| t.table()).unwrap_or(&[]);
                let median = match report.reason {
                    Reason::Explore { learners, median } if learners == k => Some(median),
                    _ => table.iter().find(|e| e.learners == k).map(|e| e.median),
                };
                (median, None)
            }
        }
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
        type Saved = (Tuner, Option<usize>, Vec<Option<(Decision, usize, Reason)>>);
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
        // The tuner continues under this run's configuration (a resume may change the
        // threshold, the noise margin or the re-tune rule), with everything it measured.
        tuner.set_config(*self.tuner.config()).map_err(|e| ReplicaError::Config(format!("tuner: {e}")))?;
        self.tuner = tuner;
        self.probing = probing;
        self.last_logged = last_logged;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crossbow_kernels::CpuBackend;
    use crossbow_kernels::optim::SgdConfig;
    use crossbow_tensor::{Device, Shape};
    use crossbow_tuner::SampleUse;

    use super::*;
    use crate::engine::{CpuDevices, DeviceFactory, EngineConfig};
    use crate::graph::{Graph, GraphBuilder};
    use crate::schedule::Schedule;
    use crate::sync::{HostAllReduce, Independent};

    fn report(decision: Decision, learners: usize, target: usize, reason: Reason) -> Report {
        Report { decision, learners: Some(learners), target, reason, sample: SampleUse::Measured, round: 0 }
    }

    fn event(report: Report, images_per_sec: Option<f64>, compared_with: Option<(usize, f64)>) -> TuningEvent {
        TuningEvent {
            iteration: 9,
            epoch: 0.1,
            device: 0,
            report,
            images_per_sec,
            compared_with,
            learners_after: vec![],
            failed: None,
            counts: None,
        }
    }

    /// A settled device that re-opens tuning answers `Keep` (it measures where it is first);
    /// that report is still an event, once, so the log says why the search starts again.
    #[test]
    fn tuning_reopened_is_an_event_though_it_keeps() {
        let drop = Reason::ThroughputDrop { learners: 2, reference: 1000.0, median: 700.0, drop: 0.3 };
        let r = report(Decision::Keep, 2, 2, drop);
        assert!(new_decision(None, &r));
        assert!(!new_decision(Some(&(r.decision, r.target, r.reason)), &r), "logged once");
        let moved = Reason::ExternalChange { expected: 2, reported: 3 };
        assert!(new_decision(None, &report(Decision::Keep, 3, 3, moved)));
        assert!(new_decision(None, &report(Decision::Keep, 2, 2, Reason::Requested)));
        // Measuring is not news.
        assert!(!new_decision(None, &report(Decision::Keep, 2, 2, Reason::Measuring { windows: 1, needed: 5 })));
        let l = event(r, None, None).line();
        assert_eq!(
            l,
            "tuner device 0: 2 learners -> keep: throughput at 2 learners fell 30.0% since settling; re-tuning"
        );
    }

    fn cmp(from: (usize, f64), to: (usize, f64), needed: f64) -> Comparison {
        Comparison {
            from_learners: from.0,
            from_median: from.1,
            to_learners: to.0,
            to_median: to.1,
            change: to.1 / from.1 - 1.0,
            needed,
            noise: 0.0,
        }
    }

    #[test]
    fn lines_say_count_throughput_change_and_action() {
        let c = cmp((1, 2000.0), (2, 2300.0), 0.05);
        let l = event(report(Decision::AddLearner, 2, 3, Reason::Improved(c)), Some(2300.0), Some((1, 2000.0))).line();
        assert_eq!(l, "tuner device 0: 2 learners: 2300 img/s (+15.0% vs 1) -> add: +15.0% beats the +5.0% needed");
        let start = Reason::Explore { learners: 1, median: 2981.2 };
        let l = event(report(Decision::AddLearner, 1, 2, start), Some(2981.2), None).line();
        assert_eq!(l, "tuner device 0: 1 learner: 2981 img/s -> add: first measurement, trying one more");
        // A move of two learners back to the best, then settling there.
        let c = cmp((2, 3000.0), (4, 2400.0), 0.1025);
        let l = event(report(Decision::RemoveLearner, 4, 2, Reason::NoGain(c)), Some(2400.0), Some((2, 3000.0))).line();
        assert!(l.starts_with("tuner device 0: 4 learners: 2400 img/s (-20.0% vs 2) -> remove 2 (to 2): "), "{l}");
        // The change needed for two more learners is explained (issue 50: it jumped unexplained).
        assert!(l.ends_with("4 learners: -20.0% where +10.2% (2 learners' worth) was needed; 2 is the best"), "{l}");
        // Short of the gain, yet one more is tried: the line says why it adds.
        let short = cmp((1, 3000.0), (2, 2796.0), 0.05);
        let l =
            event(report(Decision::AddLearner, 2, 3, Reason::NoGainTryingMore(short)), Some(2796.0), Some((1, 3000.0)))
                .line();
        assert!(
            l.ends_with(
                "-> add: -6.8% over 1 learner is short of the +5.0% needed, but one more learner may still pay off: trying it before giving up"
            ),
            "{l}"
        );
        let l = event(report(Decision::Settled, 2, 2, Reason::NoGain(c)), Some(3000.0), Some((4, 2400.0))).line();
        assert!(l.starts_with("tuner device 0: 2 learners: 3000 img/s (+25.0% vs 4) -> keep: "), "{l}");
        assert!(l.ends_with("-> keep: the best count, settled"), "{l}");
        // A close call measured again: the move to its first count, then the verdict.
        let c = cmp((1, 445.0), (2, 440.0), 0.05);
        let l = event(report(Decision::RemoveLearner, 3, 2, Reason::CloseCall(c)), None, None).line();
        assert_eq!(
            l,
            "tuner device 0: 3 learners -> remove: close call, 2 learners -1.1% over 1 (+5.0% needed); measuring \
             both again"
        );
        let c = cmp((1, 439.0), (2, 470.0), 0.05);
        let l = event(report(Decision::Settled, 2, 2, Reason::Confirmed(c)), Some(470.0), Some((1, 439.0))).line();
        assert_eq!(
            l,
            "tuner device 0: 2 learners: 470 img/s (+7.1% vs 1) -> keep: measured twice, 2 learners +7.1% over 1 \
             (+5.0% needed); 2 is the best, settled"
        );
        let mem = Reason::MemoryBudget { learners: 3, needed_bytes: 3 << 30, budget_bytes: 2 << 30 };
        let l = event(report(Decision::Settled, 2, 2, mem), None, None).line();
        assert_eq!(
            l,
            "tuner device 0: 2 learners -> keep: 3 learners would need 3.00 GiB of a 2.00 GiB memory budget, settled"
        );
        assert_eq!(
            (size(1536 << 20), size(3 << 19), size(2048), size(5)),
            ("1.50 GiB".into(), "1.5 MiB".into(), "2.0 KiB".into(), "5 bytes".into())
        );
    }

    #[test]
    fn one_event_per_decision_not_per_step() {
        let c = cmp((2, 3000.0), (4, 2400.0), 0.1025);
        let first = report(Decision::RemoveLearner, 4, 2, Reason::NoGain(c));
        let step = report(Decision::RemoveLearner, 3, 2, Reason::NoGain(c));
        let settled = report(Decision::Settled, 2, 2, Reason::NoGain(c));
        let key = |r: &Report| (r.decision, r.target, r.reason);
        assert!(new_decision(None, &first));
        assert!(!new_decision(Some(&key(&first)), &step), "the second step of the same move");
        assert!(new_decision(Some(&key(&first)), &settled));
        assert!(!new_decision(Some(&key(&settled)), &settled), "settled again");
        assert!(!new_decision(None, &report(Decision::Keep, 2, 2, Reason::Measuring { windows: 1, needed: 5 })));
        let c2 = cmp((2, 3000.0), (3, 3400.0), 0.05);
        let climb = report(Decision::AddLearner, 3, 4, Reason::Improved(c2));
        assert!(new_decision(Some(&key(&settled)), &climb));
    }

    /// CPU devices with a memory budget set by the test.
    struct Budgeted {
        cpu: CpuDevices,
        budget: u64,
    }

    impl DeviceFactory<CpuBackend> for Budgeted {
        fn devices(&self) -> Vec<Device> {
            self.cpu.devices()
        }
        fn learner_backend(&self, d: usize, learners: usize) -> Result<CpuBackend> {
            self.cpu.learner_backend(d, learners)
        }
        fn device_backend(&self, d: usize) -> Result<CpuBackend> {
            self.cpu.device_backend(d)
        }
        fn host_threads(&self, d: usize) -> usize {
            self.cpu.host_threads(d)
        }
        fn memory_budget(&self, _d: usize) -> Option<u64> {
            Some(self.budget)
        }
    }

    fn tiny() -> Graph {
        let mut b = GraphBuilder::new("tiny", Shape::new(vec![1, 4, 4])).unwrap();
        let x = b.input();
        let out = b.linear("fc", x, 3, true).unwrap();
        b.finish(out).unwrap()
    }

    /// Throughput that grows with every learner: only memory stops the tuner, at the largest
    /// count whose footprint fits the device's budget.
    #[test]
    fn the_tuner_never_adds_learners_beyond_the_memory_budget() {
        let cfg = EngineConfig {
            batch_size: 2,
            sgd: SgdConfig::plain(0.1),
            schedule: Schedule::Constant,
            seed: 1,
            eval_batch_size: 4,
        };
        let make = |budget: u64| {
            Engine::new(
                tiny(),
                cfg.clone(),
                Box::new(Budgeted { cpu: CpuDevices { count: 1, threads: 1 }, budget }),
                Box::new(Independent::default()),
                Box::new(HostAllReduce),
                &[1],
            )
            .unwrap()
        };
        let fp = make(u64::MAX).footprint();
        // Room for three learners and a half.
        let mut engine = make(fp.fixed_bytes_per_device + 3 * fp.bytes_per_learner + fp.bytes_per_learner / 2);
        let tc = TunerConfig { max_learners: 8, ..TunerConfig::default() };
        let mut tuner = AutoTuner::new(&engine, tc, true).unwrap();
        let mut most = 1;
        let mut lines = vec![];
        for it in 1..400u64 {
            let k = engine.learners();
            most = most.max(k);
            // k learners process k times the images in a tenth of the time: always a gain.
            let secs = 0.01 / k as f64;
            let rec = IterationRecord {
                iteration: it,
                epoch: it as f64 / 100.0,
                lr: 0.1,
                loss: 1.0,
                accuracy: 0.5,
                loss_iteration: it,
                loss_images: 2 * k,
                images: 2 * k,
                seconds: secs,
                device_seconds: vec![secs],
                learners: engine.layout(),
                rank_allreduce_seconds: 0.0,
            };
            for ev in tuner.after_step(&mut engine, &rec).unwrap() {
                lines.push(ev.line());
            }
            if tuner.settled() {
                break;
            }
        }
        assert!(tuner.settled(), "{lines:#?}");
        assert_eq!(most, 3, "{lines:#?}");
        assert_eq!(engine.learners(), 3, "{lines:#?}");
        assert!(lines.last().is_some_and(|l| l.contains("memory budget")), "{lines:#?}");

        // A resumed run continues with everything measured, under its own configuration:
        // the saved tuner's threshold and re-tune rule give way to the new run's.
        let saved = tuner.save().unwrap();
        let changed = TunerConfig { threshold: 0.2, significance: 0.0, retune_drop: 1.0, ..tc };
        let mut resumed = AutoTuner::new(&engine, changed, true).unwrap();
        resumed.restore(&saved).unwrap();
        assert!(resumed.settled());
        assert_eq!(*resumed.tuner.config(), changed);
        assert_eq!(*resumed.tuner.device(0).unwrap().config(), changed);
        assert_eq!(resumed.tuner.device(0).unwrap().table(), tuner.tuner.device(0).unwrap().table());
    }
}
