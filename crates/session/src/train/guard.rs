//! The divergence guard: when a loss or the central model says the run diverged, and what
//! a rollback keeps of it (how many so far, the learning rate's factor, which checkpoint to
//! go back to).

use crossbow_kernels::Backend;
use crossbow_replica::engine::{Engine, IterationRecord, LossRead};
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::error::SessionError;

/// A loss this many times the first iteration's (or ln(classes), if larger) means the run
/// diverged even though it is still finite.
pub const EXPLODED_LOSS_FACTOR: f64 = 100.0;

/// Divergence watch: the first loss (the scale an exploded loss is measured against), and the
/// rollbacks so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Guard {
    pub(super) first_loss: Option<f64>,
    pub(super) rollbacks: u32,
    /// The base learning rate relative to the configured one (halved by every rollback).
    pub(super) lr_factor: f64,
    /// The iteration of the checkpoint the last rollback went back to.
    #[serde(default)]
    pub(super) prev_target: Option<u64>,
    /// The iteration at which the run diverged before the last rollback.
    #[serde(default)]
    pub(super) prev_diverged_at: Option<u64>,
}

impl Default for Guard {
    fn default() -> Self {
        Guard { first_loss: None, rollbacks: 0, lr_factor: 1.0, prev_target: None, prev_diverged_at: None }
    }
}

impl Guard {
    /// Which of this run's checkpoints (their iterations, newest first) a rollback of a
    /// divergence at iteration `at` tries, in order: the newest, unless the run diverged again
    /// no later than last time: then the checkpoint it went back to may already hold the seed
    /// of the divergence, so the earlier ones are tried first, and with none earlier, the same
    /// one again (the learning rate halves at every rollback, up to `--max-rollbacks`).
    pub(super) fn rollback_order(&self, at: u64, newest_first: &[u64]) -> Vec<usize> {
        let before = match (self.prev_target, self.prev_diverged_at) {
            (Some(t), Some(d)) if at <= d => Some(t),
            _ => None,
        };
        let earlier = (0..newest_first.len()).filter(|&n| before.is_some_and(|b| newest_first[n] < b));
        let same = (0..newest_first.len()).filter(|&n| before.is_none_or(|b| newest_first[n] == b));
        earlier.chain(same).collect()
    }

    /// The guard after rolling back to the checkpoint of iteration `target` from a divergence
    /// at iteration `at`: one rollback more, the learning rate halved.
    pub(super) fn rolled_back(&self, target: u64, at: u64) -> Guard {
        Guard {
            rollbacks: self.rollbacks + 1,
            lr_factor: self.lr_factor * 0.5,
            prev_target: Some(target),
            prev_diverged_at: Some(at),
            ..self.clone()
        }
    }

    /// Why the run diverged at `rec`, if it did ([`DivergenceWatch::check`]).
    pub(super) fn check<B: Backend>(
        &mut self,
        engine: &Engine<B>,
        rec: &IterationRecord,
        classes: usize,
    ) -> Result<Option<String>, SessionError> {
        let mut watch = DivergenceWatch { first_loss: self.first_loss };
        let why = watch.check(engine, rec, classes)?;
        self.first_loss = watch.first_loss;
        Ok(why)
    }
}

/// The divergence watch: a NaN or exploded loss (more than [`EXPLODED_LOSS_FACTOR`] times
/// the first iteration's, or ln(classes) if larger), or a non-finite central model.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DivergenceWatch {
    /// The first iteration's loss (the scale an exploded loss is measured against).
    pub first_loss: Option<f64>,
}

impl DivergenceWatch {
    /// The first loss (`loss`, when none was read before) and the loss above which a learner
    /// has diverged: [`EXPLODED_LOSS_FACTOR`] times the first loss, or ln(classes) if larger.
    pub fn limit(&mut self, loss: f64, classes: usize) -> (f64, f64) {
        let first = *self.first_loss.get_or_insert(loss);
        (first, EXPLODED_LOSS_FACTOR * first.max((classes.max(2) as f64).ln()))
    }

    /// Why the run diverged at `rec`, if it did.
    pub fn check<B: Backend>(
        &mut self,
        engine: &Engine<B>,
        rec: &IterationRecord,
        classes: usize,
    ) -> Result<Option<String>, SessionError> {
        // (No loss read yet: the first iteration with losses read one iteration late.)
        if rec.loss_images > 0 {
            let (first, limit) = self.limit(rec.loss, classes);
            // With several ranks every rank must decide alike: the mean loss over all ranks'
            // learners (the same number on every rank) stands for the per-learner losses.
            let losses = if engine.world().size() > 1 {
                vec![(format!("{} ranks", engine.world().size()), 0, rec.loss)]
            } else {
                engine.learner_losses()
            };
            for (dev, id, loss) in losses {
                if exploded(loss, limit) {
                    return Ok(Some(format!(
                        "learner {id} on {dev} has loss {loss:.4e} at iteration {} (epoch {:.3}), more than {EXPLODED_LOSS_FACTOR} times the first iteration's {first:.4}",
                        rec.loss_iteration, rec.epoch
                    )));
                }
            }
        }
        // With losses read late the engine checks the central model itself, read along.
        if engine.loss_read() == LossRead::Now && !engine.central_is_finite()? {
            return Ok(Some(format!(
                "the central model has a NaN or infinite value (or values beyond about 1e19) after iteration {} (epoch {:.3})",
                rec.iteration, rec.epoch
            )));
        }
        Ok(None)
    }
}

/// What most likely made a run diverge, as advice: the settings beyond their usual ranges
/// first, else the learning rate.
/// `sync_causes`: the synchroniser's own ([`crossbow_replica::Synchroniser::divergence_causes`]).
pub(super) fn likely_cause(cfg: &TrainConfig, sync_causes: Vec<String>) -> String {
    let mut causes = vec![];
    if cfg.weight_decay * cfg.lr > 0.1 {
        causes.push(format!(
            "{} {} (x lr {} = {:.2} per step: decay alone moves weights that much)",
            cfg.name_of("weight-decay"),
            cfg.weight_decay,
            cfg.lr,
            cfg.weight_decay * cfg.lr
        ));
    }
    causes.extend(sync_causes);
    if let crossbow_data::NormalizeChoice::Given { std, .. } = &cfg.normalize
        && std.iter().any(|s| *s < 0.01)
    {
        causes.push(format!("{} (a std this small scales the inputs by over 100)", cfg.name_of("normalize")));
    }
    if causes.is_empty() {
        "lower the learning rate".to_string()
    } else {
        format!("likely cause: {}; else lower the learning rate", causes.join("; "))
    }
}

/// A loss that means divergence: NaN, or above `limit` (infinity included).
pub(super) fn exploded(loss: f64, limit: f64) -> bool {
    loss.is_nan() || loss > limit
}
