//! Checkpoints of a run (what they hold, when they are written, what is said of them), the
//! decisions every rank must take alike (a signal, a checkpoint due), and a clean stop on a
//! signal.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crossbow_kernels::Backend;
use crossbow_replica::ProcessGroup;
use crossbow_replica::checkpoint::{CheckpointFile, Tensor};
use crossbow_replica::engine::EngineSnapshot;
use serde_json::{Value, json};

use super::restore::RankState;
use super::trainer::Trainer;
use crate::checkpoint::{Checkpointer, OnWriteError, Written};
use crate::error::SessionError;
use crate::report::Reporter;
use crate::resume::config_to_file;
use crate::signals;

/// What every rank knows of the checkpoints (only rank 0 has the [`Checkpointer`]; when
/// one is due, rank 0 decides: [`agree`]).
pub(super) struct Saver {
    /// Checkpoints are written (`--checkpoint-dir`).
    pub(super) on: bool,
    /// The iteration of the last checkpoint this rank took part in.
    pub(super) submitted: Option<u64>,
}

/// The stop signal and the checkpoint decision after an iteration, the same on every rank:
/// with several ranks one all-reduce of three flags, so that a SIGTERM that reaches one rank
/// stops every rank after the same iteration (with a checkpoint), and rank 0's clock decides
/// when a checkpoint every N minutes is due.
pub(super) fn agree(
    world: &dyn ProcessGroup,
    sig: Option<i32>,
    due: bool,
) -> Result<(Option<i32>, bool), SessionError> {
    if world.size() <= 1 {
        return Ok((sig, due));
    }
    let mut flags = [
        f64::from(u8::from(sig == Some(signals::SIGINT))),
        f64::from(u8::from(sig.is_some_and(|s| s != signals::SIGINT))),
        f64::from(u8::from(due && world.rank() == 0)),
    ];
    world.all_reduce_sum_f64(&mut flags)?;
    let sig = if flags[0] > 0.0 {
        Some(signals::SIGINT)
    } else if flags[1] > 0.0 {
        Some(signals::SIGTERM)
    } else {
        None
    };
    Ok((sig, flags[2] > 0.0))
}

/// Reports what the writer finished; a failure stops the run under `--checkpoint-errors fatal`.
pub(super) fn report_written(
    done: Vec<Written>,
    ckpt: &mut Checkpointer,
    reporter: &mut Reporter,
) -> Result<(), SessionError> {
    for w in done {
        match w {
            Written::Ok { iteration, path, seconds, bytes } => {
                let failed = ckpt.count_success();
                if failed > 0 {
                    reporter.warn(&format!(
                        "checkpoints are written again: {} (iteration {iteration}), after {failed} failed write{}",
                        path.display(),
                        if failed == 1 { "" } else { "s" }
                    ));
                }
                reporter.record(
                    "checkpoint_written",
                    json!({ "iteration": iteration, "path": path, "write_seconds": seconds, "bytes": bytes }),
                )?;
                signal_notes(Some(ckpt));
            }
            Written::Failed { iteration, error } => {
                let keep = match ckpt.last_good() {
                    Some(p) => format!("the last good checkpoint is still {}", p.display()),
                    None => "there is no earlier checkpoint".to_string(),
                };
                reporter.record("checkpoint_failed", json!({ "iteration": iteration, "error": error }))?;
                if ckpt.policy().on_error == OnWriteError::Fatal {
                    return Err(SessionError::run(format!(
                        "checkpoint at iteration {iteration} failed: {error}; {keep} (--checkpoint-errors fatal)"
                    )));
                }
                // Said once per streak of failures (a full disk fails every write alike).
                if ckpt.count_failure() {
                    reporter.warn(&format!(
                        "warning: checkpoint at iteration {iteration} failed: {error}; {keep}; training continues (further failures are counted, not repeated)"
                    ));
                }
            }
            Written::Skipped { iteration } => {
                reporter.record("checkpoint_skipped", json!({ "iteration": iteration, "why": "superseded" }))?;
            }
        }
    }
    Ok(())
}

/// What a Ctrl-C (or SIGTERM) says at once: the first, that the run stops after this
/// iteration and writes a checkpoint; the second, which checkpoint survives.
pub(super) fn signal_notes(ckpt: Option<&Checkpointer>) {
    let Some(c) = ckpt else {
        signals::set_notes(
            Some(
                "crossbow: stopping after this iteration (no --checkpoint-dir: nothing is saved); a second signal exits at once",
            ),
            Some("crossbow: exited at once on a second signal; nothing was saved (no --checkpoint-dir)"),
        );
        return;
    };
    let last = match (c.last_good(), c.last_good_iteration()) {
        (Some(p), Some(i)) => format!("the last good checkpoint is {} (iteration {i})", p.display()),
        _ => "this run has written no checkpoint yet".to_string(),
    };
    signals::set_notes(
        Some(&format!(
            "crossbow: stopping after this iteration, then writing a checkpoint into {}; a second signal exits at once ({last})",
            c.policy().dir.display()
        )),
        Some(&format!(
            "crossbow: exited at once on a second signal; every checkpoint on disk is whole: {last}{}",
            c.last_good().map_or(String::new(), |p| format!("; resume with: crossbow train --resume {}", p.display()))
        )),
    );
}

/// One line on standard error in one write, so that lines of several ranks never run together.
pub(super) fn say_line(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// `crossbow train --resume PATH`, under `mpirun -np N` when the run is one of N ranks.
pub(super) fn resume_hint(world: &dyn ProcessGroup, path: &Path) -> String {
    let launcher = if world.size() > 1 { format!("mpirun -np {} ", world.size()) } else { String::new() };
    format!("{launcher}crossbow train --resume {}", path.display())
}

impl<B: Backend> Trainer<'_, B> {
    /// The checkpoint of the run as it stands: the engine's buffers, copied to the host now (the
    /// only pause), handed to the writer thread.
    pub(super) fn save(&mut self) -> Result<(), SessionError> {
        let t0 = Instant::now();
        let file = self.checkpoint_file()?;
        let copy = t0.elapsed().as_secs_f64();
        let engine = &self.engine;
        self.saver.submitted = Some(engine.iteration());
        if let (Some(c), Some(mut file)) = (self.ckpt.as_mut(), file) {
            if let Some(o) = file.state.as_object_mut() {
                // Whose checkpoint this is (rotation and resume go by it), and when it was made
                // (a folder with several lines of a run resumes the line written last).
                o.insert("line".into(), serde_json::to_value(c.line()).map_err(SessionError::run)?);
                let now =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
                o.insert("written_at".into(), json!(now));
            }
            c.submit(engine.iteration(), file)?;
        }
        self.reporter.record("checkpoint", json!({ "iteration": engine.iteration(), "copy_seconds": copy }))?;
        self.run.phases.checkpoints += t0.elapsed().as_secs_f64();
        Ok(())
    }

    /// Everything a checkpoint holds: the engine's tensors, and as JSON the settings, the model's
    /// input, the data streams' positions, the run's counters and evaluations, the tuner.
    fn checkpoint_file(&self) -> Result<Option<CheckpointFile>, SessionError> {
        let (cfg, data, engine, run, tuner, guard, opts) =
            (&*self.cfg, &*self.data, &self.engine, &self.run, self.tuner.as_ref(), &self.guard, &self.opts);
        let world = engine.world();
        // A collective with several ranks (the mean over every rank's learners).
        let central_stats = engine.central_stats()?;
        let snap = engine.snapshot()?;
        let tuner_state = match tuner {
            Some(t) => t.save()?,
            None => Value::Null,
        };
        let names = |s: &EngineSnapshot| s.devices.iter().map(|d| d.device.clone()).collect::<Vec<_>>();
        let (snap, tuner_state, ranks) = if world.size() > 1 {
            // Every rank's part (its devices and learners, its tuner) goes to rank 0 as the bytes
            // of a checkpoint file of its own (checksummed), and rank 0 puts the devices of all
            // ranks in rank order into one file.
            let mut part = CheckpointFile::new(json!({ "tuner": tuner_state }));
            snap.to_checkpoint(&mut part)?;
            let bytes = part.to_bytes().map_err(|e| SessionError::run(e.to_string()))?;
            let parts = world.gather_bytes(0, &bytes)?;
            if world.rank() != 0 {
                return Ok(None);
            }
            let mut snaps = Vec::with_capacity(parts.len());
            let mut ranks = Vec::with_capacity(parts.len());
            for (r, b) in parts.iter().enumerate() {
                let from = PathBuf::from(format!("(rank {r}'s part of the checkpoint)"));
                let f = CheckpointFile::from_bytes(&from, b).map_err(|e| SessionError::run(e.to_string()))?;
                let s = EngineSnapshot::from_checkpoint(&f, &from)?;
                ranks.push(RankState {
                    devices: names(&s),
                    layout: s.layout(),
                    next_id: s.next_id,
                    tuner: f.state.get("tuner").cloned().unwrap_or(Value::Null),
                });
                snaps.push(s);
            }
            (EngineSnapshot::merge_ranks(snaps)?, Value::Null, Some(ranks))
        } else {
            (snap, tuner_state, None)
        };
        let norm = run.test.normalize.clone();
        // Paths that outlive the working directory: the data folder absolute (a resume from
        // elsewhere still finds it; a moved one is accepted by its fingerprint), the metrics file
        // relative to the checkpoint folder (a moved or copied folder takes its metrics along).
        let mut config = config_to_file(cfg);
        if let Some(d) = config.data_dir.as_mut()
            && let Ok(a) = std::path::absolute(&*d)
        {
            *d = a;
        }
        if let (Some(m), Some(p)) = (config.metrics.as_mut(), opts.checkpoint.as_ref()) {
            *m = crate::paths::relative_to(m, &p.dir);
        }
        let mut file = CheckpointFile::new(json!({
            "crossbow_version": env!("CARGO_PKG_VERSION"),
            "config": config,
            "data": { "train": data.train.fingerprint(), "test": data.test.fingerprint() },
            "model": cfg.model.to_string(),
            "input_shape": data.train.image_shape(),
            "classes": data.train.num_classes(),
            "class_names": data.train.class_names(),
            "normalize": { "mean": norm.mean(), "std": norm.std() },
            "iteration": engine.iteration(),
            "epoch": run.epoch(engine),
            "devices": names(&snap),
            "layout": snap.layout(),
            // Every random stream (initialisation, shuffles, augmentation, dropout) is derived
            // from the seed and a position (iteration, learner id, data cursor): these are its state.
            "rng": { "seed": cfg.seed, "derived_from": ["seed", "iteration", "learner id", "data cursor"] },
            "run": run.save(),
            "guard": guard,
            "tuner": tuner_state,
            "checkpoint_policy": opts.checkpoint,
            "divergence_policy": opts.divergence,
            // Where it was written: a resume from a copy (or a moved folder) sees that it is one.
            "folder": opts.checkpoint.as_ref().and_then(|p| std::fs::canonicalize(&p.dir).ok()),
        }));
        if let (Some(ranks), Some(o)) = (ranks, file.state.as_object_mut()) {
            o.insert("ranks".into(), serde_json::to_value(ranks).map_err(SessionError::run)?);
        }
        snap.to_checkpoint(&mut file)?;
        file.tensors.insert("central/stats".into(), Tensor::vector(central_stats));
        Ok(Some(file))
    }

    /// Stops on `sig` after the iteration: writes a checkpoint and says how to resume. With
    /// several ranks, the other ranks say their line themselves and return an empty message.
    pub(super) fn interrupted(&mut self, sig: i32) -> SessionError {
        let iteration = self.engine.iteration();
        let code = signals::exit_code(sig);
        let what = format!("stopped by {} after iteration {iteration}", signals::name(sig));
        let _ = self.reporter.record("interrupted", json!({ "signal": sig, "iteration": iteration }));
        if !self.saver.on {
            return SessionError::Interrupted {
                code,
                msg: format!("{what}; no checkpoint (no --checkpoint-dir given)"),
            };
        }
        // Checkpoints still waiting for the writer are older than the one this stop writes: they
        // are skipped, so the stop is one write away (the one being written finishes).
        if let Some(c) = self.ckpt.as_ref() {
            c.supersede(iteration);
        }
        let written = self.save();
        let (world, reporter) = (self.engine.world(), &mut *self.reporter);
        let Some(c) = self.ckpt.as_mut() else {
            // Another rank: wait until rank 0 has its file on disk (or failed), then say so.
            let gathered = written.and_then(|_| Ok(world.all_gather_u64(0)?));
            let msg = match &gathered {
                Ok(v) if v.first() == Some(&1) => format!("{what}; rank 0 wrote the checkpoint"),
                Ok(_) => format!("{what}; rank 0 could not write the checkpoint (its message says why)"),
                Err(e) => format!("{what}; the checkpoint failed ({e})"),
            };
            if gathered.is_err() {
                return SessionError::Interrupted { code, msg };
            }
            // mpirun ends the whole job as soon as rank 0 exits with a signal's code, which would
            // cut this line off: it is said here, whole, and only then may rank 0 leave.
            say_line(&format!("crossbow (rank {}): {msg}", world.rank()));
            let _ = world.all_gather_u64(0);
            return SessionError::Interrupted { code, msg: String::new() };
        };
        let done = c.flush();
        let written = written.and_then(|_| report_written(done, c, reporter));
        if world.size() > 1 {
            // The other ranks wait for this before they exit; then rank 0 waits until every other
            // rank has said how it stopped.
            if world.all_gather_u64(u64::from(written.is_ok())).is_ok() {
                let _ = world.all_gather_u64(0);
            }
        }
        let hint = |p: &Path| resume_hint(&**world, p);
        let now = iteration;
        let msg = match (written, c.last_good(), c.last_good_iteration()) {
            (Ok(()), Some(p), Some(i)) if i == now => {
                format!("{what}; checkpoint written to {}\nresume with: {}", p.display(), hint(&c.policy().dir))
            }
            (Ok(()), Some(p), i) => format!(
                "{what}; the checkpoint of iteration {now} could not be written (see the warning above); the last good one is {} (iteration {})\nresume with: {}",
                p.display(),
                i.map_or("?".to_string(), |i| i.to_string()),
                hint(p)
            ),
            (Err(e), Some(p), _) => {
                format!(
                    "{what}; the checkpoint failed ({e}); the last good one is {}\nresume with: {}",
                    p.display(),
                    hint(p)
                )
            }
            (r, None, _) => {
                format!(
                    "{what}; no checkpoint could be written{}",
                    r.err().map(|e| format!(" ({e})")).unwrap_or_default()
                )
            }
        };
        SessionError::Interrupted { code, msg }
    }
}
