//! The checkpoint and divergence settings: how often, how many kept, what a failed write
//! or a divergence does.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::SessionError;

/// The checkpoint and divergence settings of a run, as given (flags or config-file keys, see
/// [`crate::settings`]); [`CheckpointArgs::resolve`] turns them, with a resumed run's saved
/// policies, into the policies the run uses.
#[derive(Clone, Debug, Default)]
pub struct CheckpointArgs {
    /// `--checkpoint-dir`.
    pub checkpoint_dir: Option<PathBuf>,
    /// `--checkpoint-every`.
    pub checkpoint_every: Option<Every>,
    /// `--keep-checkpoints`.
    pub keep_checkpoints: Option<usize>,
    /// `--checkpoint-errors`.
    pub checkpoint_errors: Option<OnWriteError>,
    /// `--on-divergence`.
    pub on_divergence: Option<OnDivergence>,
    /// `--max-rollbacks`.
    pub max_rollbacks: Option<u32>,
    /// `--share-checkpoint-dir`.
    pub share_checkpoint_dir: bool,
}

impl CheckpointArgs {
    /// The checkpoint settings of `cfg`.
    pub fn of(cfg: &crate::config::TrainConfig) -> Self {
        CheckpointArgs {
            checkpoint_dir: cfg.checkpoint_dir.clone(),
            checkpoint_every: cfg.checkpoint_every,
            keep_checkpoints: cfg.keep_checkpoints,
            checkpoint_errors: cfg.checkpoint_errors,
            on_divergence: cfg.on_divergence,
            max_rollbacks: cfg.max_rollbacks,
            share_checkpoint_dir: cfg.share_checkpoint_dir,
        }
    }
}

/// How often checkpoints are written.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Every {
    /// Every this many iterations.
    Iterations(u64),
    /// Every this many seconds of wall time.
    Seconds(f64),
}

/// The longest checkpoint interval in minutes (about two years).
pub(super) const MAX_MINUTES: f64 = 1e6;

impl FromStr for Every {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("'{s}' must be a whole number of iterations >= 1 (e.g. 500) or of minutes with 'm' (e.g. 10m)");
        let t = s.trim();
        if let Some(m) = t.strip_suffix('m') {
            match m.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 && v <= MAX_MINUTES => Ok(Every::Seconds(v * 60.0)),
                Ok(v) if v > MAX_MINUTES => Err(format!("'{s}': at most {MAX_MINUTES} minutes (about two years)")),
                _ => Err(bad()),
            }
        } else {
            match t.parse::<u64>() {
                Ok(n) if n >= 1 => Ok(Every::Iterations(n)),
                _ => Err(bad()),
            }
        }
    }
}

impl std::fmt::Display for Every {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Every::Iterations(n) => write!(f, "{n}"),
            Every::Seconds(s) => write!(f, "{}m", s / 60.0),
        }
    }
}

/// What a failed checkpoint write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnWriteError {
    /// Report it (terminal and metrics file) and keep training.
    Warn,
    /// Stop the run with the error.
    Fatal,
}

impl FromStr for OnWriteError {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "warn" => Ok(OnWriteError::Warn),
            "fatal" => Ok(OnWriteError::Fatal),
            o => Err(format!("'{o}' must be 'warn' or 'fatal'")),
        }
    }
}

impl std::fmt::Display for OnWriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OnWriteError::Warn => "warn",
            OnWriteError::Fatal => "fatal",
        })
    }
}

/// What a diverged run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnDivergence {
    /// Stop with a message naming the iteration, the learner and the last good checkpoint.
    Stop,
    /// Reload the last good checkpoint with the learning rate halved.
    Rollback,
}

impl FromStr for OnDivergence {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "stop" => Ok(OnDivergence::Stop),
            "rollback" => Ok(OnDivergence::Rollback),
            o => Err(format!("'{o}' must be 'stop' or 'rollback'")),
        }
    }
}

impl std::fmt::Display for OnDivergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OnDivergence::Stop => "stop",
            OnDivergence::Rollback => "rollback",
        })
    }
}

/// Where and how often checkpoints are written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointPolicy {
    /// The folder (on resume: the folder resumed from, unless `--checkpoint-dir` names
    /// another; the folder saved in a checkpoint is never used again).
    pub dir: PathBuf,
    /// How often.
    pub every: Every,
    /// How many to keep, >= 1.
    pub keep: usize,
    /// What a failed write does.
    pub on_error: OnWriteError,
    /// The folder may hold other runs' checkpoints (`--share-checkpoint-dir`).
    #[serde(default)]
    pub share: bool,
}

/// Divergence handling.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivergencePolicy {
    /// Stop or roll back.
    pub action: OnDivergence,
    /// Most rollbacks in a run.
    pub max_rollbacks: u32,
}

impl CheckpointArgs {
    /// The policies these flags ask for. `saved` are a resumed run's (used where a flag is
    /// not given), `resumed_from` the checkpoint file resumed (its folder is the default).
    pub fn resolve(
        &self,
        saved: Option<(&Option<CheckpointPolicy>, &DivergencePolicy)>,
        resumed_from: Option<&Path>,
    ) -> Result<(Option<CheckpointPolicy>, DivergencePolicy), SessionError> {
        let saved_ckpt = saved.and_then(|(c, _)| c.clone());
        // A resumed run writes where it was resumed from (or where it is told): the folder
        // saved in the checkpoint may have been moved, copied, or reused by another run.
        let dir = self.checkpoint_dir.clone().or_else(|| {
            resumed_from.map(|p| match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            })
        });
        let every =
            self.checkpoint_every.or_else(|| saved_ckpt.as_ref().map(|c| c.every)).unwrap_or(Every::Seconds(600.0));
        let keep = self.keep_checkpoints.or(saved_ckpt.as_ref().map(|c| c.keep)).unwrap_or(3).max(1);
        let on_error =
            self.checkpoint_errors.or_else(|| saved_ckpt.as_ref().map(|c| c.on_error)).unwrap_or(OnWriteError::Warn);
        let saved_div = saved.map(|(_, d)| *d);
        let action = self.on_divergence.or_else(|| saved_div.map(|d| d.action)).unwrap_or(OnDivergence::Stop);
        let max_rollbacks = self.max_rollbacks.or(saved_div.map(|d| d.max_rollbacks)).unwrap_or(3);
        if dir.is_none() {
            for (given, flag) in [
                (self.checkpoint_every.is_some(), "--checkpoint-every"),
                (self.keep_checkpoints.is_some(), "--keep-checkpoints"),
                (self.checkpoint_errors.is_some(), "--checkpoint-errors"),
            ] {
                if given {
                    return Err(SessionError::usage(format!("{flag} needs --checkpoint-dir")));
                }
            }
            if action == OnDivergence::Rollback {
                return Err(SessionError::usage(
                    "--on-divergence rollback needs --checkpoint-dir (it reloads the last checkpoint)",
                ));
            }
        }
        let share = self.share_checkpoint_dir || saved_ckpt.as_ref().is_some_and(|c| c.share);
        if dir.is_none() && self.share_checkpoint_dir {
            return Err(SessionError::usage("--share-checkpoint-dir needs --checkpoint-dir"));
        }
        let policy = dir.map(|dir| CheckpointPolicy { dir, every, keep, on_error, share });
        Ok((policy, DivergencePolicy { action, max_rollbacks }))
    }
}
