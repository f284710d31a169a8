//! Resuming: the checkpoint must be of this data; each rank's learners, ids and tuner are
//! found in it; its state goes into the engine, the run, the tuner and the guard.

use std::path::Path;

use crossbow_kernels::Backend;
use crossbow_replica::ProcessGroup;
use crossbow_replica::checkpoint::CheckpointFile;
use crossbow_replica::engine::{Engine, EngineSnapshot};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Data;
use super::guard::Guard;
use super::trainer::Trainer;
use crate::config::{LearnersPerDevice, TrainConfig};
use crate::error::SessionError;

/// Refuses to resume the run of `file` on other data than it trained on: the fingerprints
/// of the training and test sets ([`crossbow_data::Fingerprint`]) must equal the saved ones
/// (a checkpoint of an older version has none and is accepted). Where the files lie does not
/// matter: a moved data folder is the same data.
pub(super) fn check_data(
    cfg: &TrainConfig,
    data: &Data,
    path: &Path,
    file: &CheckpointFile,
) -> Result<(), SessionError> {
    let Some(saved) = file.state.get("data") else { return Ok(()) };
    for (split, now) in [("train", data.train.fingerprint()), ("test", data.test.fingerprint())] {
        let Some(was) = saved.get(split) else { continue };
        let was: crossbow_data::Fingerprint = serde_json::from_value(was.clone()).map_err(|e| {
            SessionError::usage(format!("--resume {}: the data fingerprint is unreadable: {e}", path.display()))
        })?;
        if was != now {
            return Err(SessionError::usage(format!(
                "--resume {}: the {} data differ from the run's: {} {} ({}) holds {now}; the run trained on {was}; point {} at the run's data, or start a new run",
                path.display(),
                if split == "train" { "training" } else { "test" },
                cfg.dataset,
                cfg.data_dir.display(),
                cfg.name_of("data-dir"),
                cfg.name_of("data-dir"),
            )));
        }
    }
    Ok(())
}

/// What the checkpoint of a job of several ranks says of each rank (the state's `ranks`):
/// resuming with the same ranks restores each one's learners, ids and tuner exactly.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct RankState {
    /// The rank's devices (its slice of the checkpoint's, in order).
    pub(super) devices: Vec<String>,
    /// Learners per device.
    pub(super) layout: Vec<usize>,
    /// The id the rank numbers its next learner with.
    pub(super) next_id: usize,
    /// The rank's auto-tuner.
    pub(super) tuner: Value,
}

impl RankState {
    /// The ranks of `file` (empty for a checkpoint of one process).
    pub(super) fn read(path: &Path, file: &CheckpointFile) -> Result<Vec<RankState>, SessionError> {
        match file.state.get("ranks") {
            None | Some(Value::Null) => Ok(vec![]),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                SessionError::usage(format!("--resume {}: the ranks' state is unreadable: {e}", path.display()))
            }),
        }
    }
}

/// The learners per device this rank starts with to continue `snap` exactly: its own from a
/// checkpoint of as many ranks with as many devices each, or its devices' slice of the
/// checkpoint's when all ranks together have the checkpoint's devices (2 ranks of 1 device
/// and 1 process of 2 devices continue each other's runs); none otherwise.
pub(super) fn saved_layout(
    snap: &EngineSnapshot,
    ranks: &[RankState],
    world: &dyn ProcessGroup,
    n_dev: usize,
    device_offset: usize,
    world_devices: usize,
) -> Option<Vec<usize>> {
    if world.size() > 1
        && ranks.len() == world.size()
        && let Some(r) = ranks.get(world.rank())
        && r.layout.len() == n_dev
    {
        return Some(r.layout.clone());
    }
    let all = snap.layout();
    if all.len() != world_devices {
        return None;
    }
    all.get(device_offset..device_offset + n_dev).map(<[usize]>::to_vec)
}

/// This rank's part of the job's snapshot `snap` (see [`EngineSnapshot::slice_for_rank`]):
/// its devices' slice, its learners from its offset in the global order, and the id it
/// numbers new learners from (its own from a checkpoint of the same ranks and learners,
/// otherwise one above every id of the checkpoint that no other rank uses).
pub(super) fn rank_slice<B: Backend>(
    snap: &EngineSnapshot,
    ranks: &[RankState],
    engine: &Engine<B>,
    device_offset: usize,
) -> Result<EngineSnapshot, SessionError> {
    let world = engine.world();
    let (rank, size) = (world.rank(), world.size());
    let layout = engine.layout();
    let next_id = match ranks.get(rank) {
        Some(r) if ranks.len() == size && r.layout == layout => r.next_id,
        _ => snap.next_id.max(engine.world_learners()) + rank,
    };
    Ok(snap.slice_for_rank(&layout, device_offset, engine.learner_offset(), next_id)?)
}

/// The auto-tuner state this process continues: its rank's from a checkpoint of as many
/// ranks, the file's from a checkpoint of one process resumed by one; none otherwise (the
/// tuner starts a new search).
pub(super) fn saved_tuner(file: &CheckpointFile, ranks: &[RankState], world: &dyn ProcessGroup) -> Value {
    if world.size() > 1 {
        return match ranks.get(world.rank()) {
            Some(r) if ranks.len() == world.size() => r.tuner.clone(),
            _ => Value::Null,
        };
    }
    if ranks.len() > 1 {
        return Value::Null;
    }
    file.state.get("tuner").cloned().unwrap_or(Value::Null)
}

impl<B: Backend> Trainer<'_, B> {
    /// Puts `file`'s state into the engine, the run and the tuner.
    pub(super) fn continue_from(
        &mut self,
        file: &CheckpointFile,
        snap: &EngineSnapshot,
        tuner_state: &Value,
    ) -> Result<Vec<String>, SessionError> {
        let (cfg, data, engine, run, guard) =
            (&*self.cfg, &*self.data, &mut self.engine, &mut self.run, &mut self.guard);
        let tuner = self.tuner.as_mut();
        // Match the checkpoint's learners where the settings allow, so the state carries over
        // exactly (with several ranks each started with its slice's learners already).
        let want = snap.layout();
        if engine.world().size() == 1
            && want.len() == engine.devices().len()
            && cfg.learners_per_device == LearnersPerDevice::Auto
        {
            for (d, &m) in want.iter().enumerate() {
                while engine.layout()[d] < m {
                    engine.add_learner(d)?;
                }
                while engine.layout()[d] > m {
                    engine.remove_learner(d)?;
                }
            }
        }
        let mut notes = engine.restore(snap)?;
        run.restore(cfg, data, file.state.get("run").unwrap_or(&Value::Null))?;
        if let Some(g) = file.state.get("guard").and_then(|g| serde_json::from_value::<Guard>(g.clone()).ok()) {
            *guard = g;
        }
        let layout_changed = !notes.is_empty();
        // A learning rate given on resume replaces the run's (and any halving by rollbacks).
        let saved_lr = file.state.get("config").and_then(|c| c.get("lr")).and_then(Value::as_f64);
        if let Some(was) = saved_lr
            && was != cfg.lr
        {
            let now_lr = was * guard.lr_factor;
            guard.lr_factor = 1.0;
            engine.set_base_lr(cfg.lr as f32)?;
            notes.push(format!(
                "the base learning rate is now {} ({} of the run{}); the trajectory differs from here on",
                cfg.lr,
                was,
                if now_lr != was { format!(", {now_lr} after its rollbacks") } else { String::new() }
            ));
        } else if (guard.lr_factor - 1.0).abs() > 0.0 {
            engine.set_base_lr((cfg.lr * guard.lr_factor) as f32)?;
        }
        if let Some(t) = tuner {
            if !tuner_state.is_null() && !layout_changed {
                if let Err(e) = t.restore(tuner_state) {
                    notes.push(format!("the auto-tuner starts a new search ({e})"));
                }
            } else {
                notes.push("the auto-tuner starts a new search".into());
            }
        }
        Ok(notes)
    }
}
