//! A divergence: stop with where to resume from, or roll back to the last good checkpoint
//! of this run with the learning rate halved (the choice of checkpoint: [`Guard`]).

use std::path::Path;
use std::sync::Arc;

use crossbow_kernels::Backend;
use crossbow_replica::checkpoint::CheckpointFile;
use crossbow_replica::engine::EngineSnapshot;
use serde_json::json;

use super::guard::likely_cause;
use super::restore::{RankState, rank_slice, saved_tuner};
use super::saving::{report_written, resume_hint};
use super::trainer::Trainer;
use crate::checkpoint::{Line, OnDivergence};
use crate::error::SessionError;

impl<B: Backend> Trainer<'_, B> {
    /// Stops with [`SessionError`] (`--on-divergence stop`, or no rollback left), or rolls back
    /// and continues (`--on-divergence rollback`); `why` says what diverged.
    pub(super) fn rollback(&mut self, why: &str) -> Result<(), SessionError> {
        // Rank 0 (which writes the checkpoints) chooses the checkpoint and sends it to every rank
        // (every rank diverges at the same iteration: the losses and the central model are the
        // same on all).
        let world = Arc::clone(self.engine.world());
        let at = self.engine.iteration() + 1;
        let g = self.guard.clone();
        let config = Arc::clone(&self.cfg);
        let (cfg, opts, engine, reporter) = (&*config, &self.opts, &self.engine, &mut *self.reporter);
        let sync_causes = engine.synchroniser_divergence_causes();
        if let Some(d) = self.run.diagnostics.as_mut() {
            d.forget();
        }
        let chosen = crate::checkpoint::from_rank0(Path::new("rollback"), &*world, || {
            let (last, dir, run) = match self.ckpt.as_mut() {
                Some(c) => {
                    let done = c.flush();
                    report_written(done, c, reporter)?;
                    (c.last_good().map(Path::to_path_buf), Some(c.policy().dir.clone()), Some(c.line().run.clone()))
                }
                None => (None, None, None),
            };
            let _ = reporter.record("diverged", json!({ "why": why, "last_good_checkpoint": last }));
            let stop = |extra: &str| {
                let at = match (&last, &dir) {
                    (Some(p), _) => format!(
                        "; the last good checkpoint is {} (resume with: {} --lr <lower>, or use --on-divergence rollback)",
                        p.display(),
                        resume_hint(&*world, p)
                    ),
                    (None, Some(d)) => format!("; no checkpoint had been written in {} yet", d.display()),
                    (None, None) => {
                        "; there is no checkpoint (use --checkpoint-dir, and --on-divergence rollback to recover automatically)"
                            .to_string()
                    }
                };
                SessionError::Diverged(format!(
                    "training diverged: {why}{at}{extra}; {}",
                    likely_cause(cfg, sync_causes.clone())
                ))
            };
            if opts.divergence.action == OnDivergence::Stop {
                return Err(stop(""));
            }
            if g.rollbacks >= opts.divergence.max_rollbacks {
                return Err(stop(&format!(" (after {} rollbacks, the most --max-rollbacks allows)", g.rollbacks)));
            }
            let Some(dir) = dir.clone() else { return Err(stop("")) };
            // This run's checkpoints only (the folder may be shared with other runs), newest first.
            let ours: Vec<crate::checkpoint::Entry> = crate::checkpoint::list(&dir)?
                .into_iter()
                .filter(|e| {
                    CheckpointFile::read_state(&e.path)
                        .ok()
                        .and_then(|s| Line::of_state(&s))
                        .is_some_and(|l| Some(&l.run) == run.as_ref())
                })
                .collect();
            let iterations: Vec<u64> = ours.iter().map(|e| e.iteration).collect();
            for e in g.rollback_order(at, &iterations).into_iter().map(|n| &ours[n]) {
                match CheckpointFile::read(&e.path) {
                    Ok(f) => return Ok((e.path.clone(), f)),
                    Err(err) => reporter.warn(&format!("warning: rollback skips a damaged checkpoint: {err}")),
                }
            }
            Err(stop(" (no checkpoint of this run to roll back to)"))
        });
        let (path, file) = chosen?;
        let snap = EngineSnapshot::from_checkpoint(&file, &path)?;
        let target = snap.iteration;
        let ranks = RankState::read(&path, &file)?;
        let tuner_state = saved_tuner(&file, &ranks, &*world);
        let snap = if world.size() > 1 {
            let counts = world.all_gather_u64(self.engine.devices().len() as u64)?;
            let device_offset = counts.iter().take(world.rank()).sum::<u64>() as usize;
            rank_slice(&snap, &ranks, &self.engine, device_offset)?
        } else {
            snap
        };
        let kept = self.guard.clone();
        self.continue_from(&file, &snap, &tuner_state)?;
        // The checkpoints after the one gone back to stay: the run continues as a new line.
        if let Some(c) = self.ckpt.as_mut() {
            let b = c.line().branch();
            c.set_line(b);
        }
        self.guard = kept.rolled_back(target, at);
        let rollbacks = self.guard.rollbacks;
        let lr = self.cfg.lr * self.guard.lr_factor;
        let (engine, reporter, opts) = (&mut self.engine, &mut *self.reporter, &self.opts);
        engine.set_base_lr(lr as f32)?;
        let line = format!(
            "training diverged: {why}; rollback {rollbacks}/{}: reloaded {} (iteration {}), base learning rate now {lr}",
            opts.divergence.max_rollbacks,
            path.display(),
            engine.iteration()
        );
        reporter.warn(&line);
        reporter.record(
            "rollback",
            json!({ "n": rollbacks, "checkpoint": path, "iteration": engine.iteration(), "lr": lr, "why": why }),
        )?;
        Ok(())
    }
}
