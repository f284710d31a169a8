//! A stopped exploration, saved so that `crossbow explore --resume` continues it exactly: the
//! loop's position (the rung, the shared stream's first unit, every configuration's counters,
//! evaluations and status) in `OUT/state/explore.json`, and each live configuration's engine,
//! tuner and recalibration stream in `OUT/state/group-<id>.safetensors`. Files are written
//! atomically; the JSON last, so a state folder whose JSON names a group has its file.

use std::path::{Path, PathBuf};

use crossbow_replica::engine::IterationRecord;
use crossbow_session::BranchState;
use serde::{Deserialize, Serialize};

use super::groups::{Group, SharedStream, Status};
use crate::error::SessionError;
use crate::report::EvalLine;

/// The format of `explore.json`.
const VERSION: u32 = 2;

/// One configuration's place in the loop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct GroupState {
    pub(super) id: usize,
    pub(super) status: Status,
    pub(super) learners: Vec<usize>,
    pub(super) next_unit: u64,
    pub(super) next_eval: f64,
    pub(super) evals: Vec<EvalLine>,
    pub(super) rungs: Vec<f64>,
    pub(super) samples: u64,
    pub(super) iterations: u64,
    pub(super) calibration_samples: u64,
    /// The record of its last iteration (the rungs evaluate at it).
    pub(super) last: Option<IterationRecord>,
    /// A live configuration's branch (its engine is in `group-<id>.safetensors`).
    pub(super) branch: Option<BranchState>,
}

/// The loop's position.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct ExploreState {
    pub(super) version: u32,
    /// The exploration's id (its metrics file is this run's).
    pub(super) run: String,
    /// Each configuration's settings, to check that a resume explores the same space.
    pub(super) configurations: Vec<Vec<(String, String)>>,
    pub(super) rung_fractions: Vec<f64>,
    pub(super) rung: usize,
    /// Group steps so far (the signal test hook counts them).
    pub(super) steps: u64,
    /// The first unit the stream still holds (every live configuration is at or past it).
    pub(super) first_unit: u64,
    pub(super) decoded: u64,
    pub(super) wait_secs: f64,
    pub(super) copy_secs: f64,
    pub(super) wall_secs: f64,
    pub(super) groups: Vec<GroupState>,
}

/// `OUT/state`.
pub(super) fn dir(out: &Path) -> PathBuf {
    out.join("state")
}

pub(super) fn group_file(out: &Path, id: usize) -> PathBuf {
    dir(out).join(format!("group-{id}.safetensors"))
}

fn io(path: &Path, e: impl std::fmt::Display) -> SessionError {
    SessionError::run(format!("{}: {e}", path.display()))
}

/// Where the search loop stands: its rungs, the rung it is on, steps taken, wall seconds.
pub(super) struct Position<'a> {
    pub(super) fractions: &'a [f64],
    pub(super) rung: usize,
    pub(super) steps: u64,
    pub(super) wall_secs: f64,
}

/// Saves the loop's position and every live group's engine into `OUT/state`.
pub(super) fn save(
    out: &Path,
    run: &str,
    groups: &[Group],
    last: &[Option<IterationRecord>],
    stream: &SharedStream,
    at: &Position,
) -> Result<PathBuf, SessionError> {
    let Position { fractions, rung, steps, wall_secs } = *at;
    let d = dir(out);
    std::fs::create_dir_all(&d).map_err(|e| io(&d, format!("cannot create: {e}")))?;
    let mut states = vec![];
    for (g, rec) in groups.iter().zip(last) {
        let branch = match &g.branch {
            Some(b) => Some(b.save(&group_file(out, g.conf.id), serde_json::json!({ "id": g.conf.id }))?),
            None => None,
        };
        states.push(GroupState {
            id: g.conf.id,
            status: g.status,
            learners: g.learners.clone(),
            next_unit: g.next_unit,
            next_eval: g.next_eval,
            evals: g.evals.clone(),
            rungs: g.rungs.clone(),
            samples: g.samples,
            iterations: g.iterations,
            calibration_samples: g.calibration_samples,
            last: rec.clone(),
            branch,
        });
    }
    let state = ExploreState {
        version: VERSION,
        run: run.to_string(),
        configurations: groups.iter().map(|g| g.conf.settings.clone()).collect(),
        rung_fractions: fractions.to_vec(),
        rung,
        steps,
        first_unit: stream.first,
        decoded: stream.decoded,
        wait_secs: stream.wait_secs,
        copy_secs: stream.copy_secs,
        wall_secs,
        groups: states,
    };
    let path = d.join("explore.json");
    let text = serde_json::to_string_pretty(&state).map_err(SessionError::run)?;
    let tmp = d.join(".explore.json.tmp");
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
    Ok(path)
}

/// Reads `OUT/state/explore.json`, checking that it explores `configurations` with `fractions`.
pub(super) fn load(
    out: &Path,
    configurations: &[Vec<(String, String)>],
    fractions: &[f64],
) -> Result<ExploreState, SessionError> {
    let path = dir(out).join("explore.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        SessionError::usage(format!(
            "--resume: {}: {e} (no stopped exploration to resume in {})",
            path.display(),
            out.display()
        ))
    })?;
    let state: ExploreState = serde_json::from_str(&text)
        .map_err(|e| SessionError::usage(format!("--resume: {}: unreadable: {e}", path.display())))?;
    if state.version != VERSION {
        return Err(SessionError::usage(format!(
            "--resume: {} is of format {}, this crossbow reads {VERSION}",
            path.display(),
            state.version
        )));
    }
    if state.configurations != configurations || state.rung_fractions != fractions {
        return Err(SessionError::usage(format!(
            "--resume: {} explored another space or other rungs than this --config ({} configurations then, {} now): resume with the same file",
            path.display(),
            state.configurations.len(),
            configurations.len()
        )));
    }
    Ok(state)
}

/// Removes the state of a finished exploration (nothing left to resume).
pub(super) fn clear(out: &Path) {
    let _ = std::fs::remove_dir_all(dir(out));
}
