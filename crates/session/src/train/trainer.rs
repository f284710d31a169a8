//! The training loop: a [`Trainer`] holds what a run is made of (engine, data streams,
//! tuner, divergence guard, checkpoint writer) and takes it one iteration at a time.

use std::path::PathBuf;
use std::sync::Arc;

use crossbow_kernels::Backend;
use crossbow_replica::engine::{AutoTuner, DeviceFactory, Engine, EngineSnapshot, IterationRecord, LossRead};
use crossbow_replica::{Graph, ReplicaError, Synchroniser};
use serde_json::json;

use super::guard::Guard;
use super::restore::{RankState, check_data, rank_slice, saved_layout, saved_tuner};
use super::run::{Run, StepError};
use super::saving::{Saver, agree, report_written, signal_notes};
use super::start::{announce, auto_tuner, learner_config, start_engine_planned, sync_notes};
use super::{Data, Rep, RunOptions};
use crate::checkpoint::{Checkpointer, Line, OnDivergence};
use crate::config::{LearnersPerDevice, TrainConfig};
use crate::error::SessionError;
use crate::report::{EvalLine, Summary};

/// One training run between its start and its end: everything the policies (evaluation,
/// checkpoints, divergence and rollback, signals, the tuner, rank agreement) act on.
pub(crate) struct Trainer<'a, B: Backend> {
    pub(super) cfg: Arc<TrainConfig>,
    pub(super) data: Arc<Data>,
    pub(super) opts: RunOptions,
    pub(super) engine: Engine<B>,
    pub(super) run: Run,
    pub(super) tuner: Option<AutoTuner>,
    pub(super) guard: Guard,
    /// The checkpoint writer (rank 0 with `--checkpoint-dir` only).
    pub(super) ckpt: Option<Checkpointer>,
    pub(super) saver: Saver,
    pub(super) reporter: Rep<'a>,
    /// The learner count the synchroniser's notes were last said for.
    noted_learners: usize,
    /// The synchroniser's settings as last said (Ako's partitions change as it runs).
    sync_settings: crossbow_replica::sync::Settings,
}

impl<'a, B: Backend> Trainer<'a, B> {
    /// Starts the engine, restores `opts.resume` when given, says the banner and writes the
    /// metrics file's `start` (and `resume`) records: a run ready for its first iteration.
    pub(super) fn start(
        config: Arc<TrainConfig>,
        dataset: Arc<Data>,
        graph: Graph,
        factory: Box<dyn DeviceFactory<B>>,
        sync: Box<dyn Synchroniser<B>>,
        mut reporter: Rep<'a>,
        opts: RunOptions,
    ) -> Result<Self, SessionError> {
        let (cfg, data): (&TrainConfig, &Data) = (&Arc::clone(&config), &Arc::clone(&dataset));
        let n_dev = factory.devices().len();
        let world = Arc::clone(&opts.world);
        let multi = world.size() > 1;
        let resumed = match &opts.resume {
            Some((path, file)) => Some((path.clone(), EngineSnapshot::from_checkpoint(file, path)?)),
            None => None,
        };
        let saved_ranks = match &opts.resume {
            Some((p, f)) => RankState::read(p, f)?,
            None => vec![],
        };
        if let Some((p, f)) = &opts.resume {
            check_data(cfg, data, p, f)?;
        }
        // Where this rank's devices start among every rank's (a checkpoint's devices are every
        // rank's, in rank order).
        let (device_offset, world_devices) = if multi {
            let counts = world.all_gather_u64(n_dev as u64)?;
            (counts.iter().take(world.rank()).sum::<u64>() as usize, counts.iter().sum::<u64>() as usize)
        } else {
            (0, n_dev)
        };
        // Start with the checkpoint's learners when the devices and the learner setting allow.
        let layout = match (&resumed, cfg.learners_per_device) {
            (Some((_, s)), LearnersPerDevice::Auto) => {
                saved_layout(s, &saved_ranks, &*world, n_dev, device_offset, world_devices)
                    .unwrap_or_else(|| vec![1; n_dev])
            }
            (_, LearnersPerDevice::Auto) => vec![1; n_dev],
            (_, LearnersPerDevice::Fixed(m)) => vec![m; n_dev],
        };
        // With a global batch each learner starts at its share among every rank's learners.
        let mut starting = layout.iter().sum::<usize>() as u64;
        if multi {
            starting = world.all_gather_u64(starting)?.iter().sum();
        }
        let lcfg = learner_config(cfg, starting as usize)?;
        let plan = crate::preflight::check_run(&lcfg, data, &graph, &*factory, &*sync)?;
        let mut engine = start_engine_planned(&lcfg, graph, Some(plan), factory, sync, &layout, Arc::clone(&world))?;
        // With several ranks each restores its slice of the checkpoint's learners.
        let resumed = match resumed {
            Some((p, s)) if multi => {
                let slice = rank_slice(&s, &saved_ranks, &engine, device_offset)?;
                Some((p, slice))
            }
            r => r,
        };
        let run = Run::new(cfg, data, &engine)?;
        let read = if engine.asynchronous_devices() { LossRead::Lagged } else { LossRead::Now };
        engine.set_loss_read(cfg.loss_read.unwrap_or(read))?;
        // The run's identity (its checkpoints' and its metrics' owner): rank 0's, on every rank.
        let mut line = opts.line.clone().unwrap_or_else(Line::new_run);
        if multi {
            let mut bytes = serde_json::to_vec(&line).map_err(SessionError::run)?;
            world.broadcast_bytes(0, &mut bytes)?;
            line = serde_json::from_slice(&bytes).map_err(|e| SessionError::run(format!("rank 0's run id: {e}")))?;
        }
        // Only rank 0 writes; the others send it their part of every checkpoint.
        let ckpt = match &opts.checkpoint {
            Some(p) if world.rank() == 0 => Some(Checkpointer::start(
                p.clone(),
                resumed.as_ref().map(|r| r.1.iteration).unwrap_or(0),
                line.clone(),
            )?),
            _ => None,
        };
        let saver = Saver { on: opts.checkpoint.is_some(), submitted: None };
        if world.rank() == 0 {
            signal_notes(ckpt.as_ref());
        }
        announce(cfg, data, &engine, &run, &line.run, &mut reporter)?;
        let tuner = auto_tuner(cfg, &engine, data.train.len())?;
        let sync_settings = engine.synchroniser().1;
        let mut t = Trainer {
            cfg: config,
            data: dataset,
            opts,
            engine,
            run,
            tuner,
            guard: Guard::default(),
            ckpt,
            saver,
            reporter,
            noted_learners: 0,
            sync_settings,
        };
        if t.tuner.is_none() {
            sync_notes(&t.engine, &mut t.noted_learners, &mut t.reporter)?;
        }
        if let Some((path, snap)) = &resumed {
            t.resume(path, snap, &saved_ranks, &line.run)?;
        }
        // With rollback, a first checkpoint before any step: a divergence before the first
        // periodic checkpoint still has something to go back to.
        // (Rank 0 knows whether there is one; it tells the others.)
        let mut first = t.opts.divergence.action == OnDivergence::Rollback
            && t.saver.on
            && t.ckpt.as_ref().is_none_or(|c| c.last_good().is_none());
        if multi {
            first = world.all_gather_u64(u64::from(first))?.first() == Some(&1);
        }
        if first {
            t.save()?;
            if let Some(c) = t.ckpt.as_mut() {
                let done = c.flush();
                report_written(done, c, &mut t.reporter)?;
            }
        }
        if !multi {
            // (Several ranks agree on a signal after the first iteration instead.)
            t.opts.interrupt.during_startup("starting the engine")?;
        }
        Ok(t)
    }

    /// Continues from the checkpoint `opts.resume` (its snapshot `snap`, this rank's slice).
    fn resume(
        &mut self,
        path: &std::path::Path,
        snap: &EngineSnapshot,
        saved_ranks: &[RankState],
        run_id: &str,
    ) -> Result<(), SessionError> {
        let Some((_, file)) = self.opts.resume.take() else { return Ok(()) };
        let tuner_state = saved_tuner(&file, saved_ranks, &**self.engine.world());
        let notes = self.continue_from(&file, snap, &tuner_state);
        self.opts.resume = Some((path.to_path_buf(), file));
        let notes = notes?;
        let epoch = self.run.epoch(&self.engine);
        self.reporter.say(&format!(
            "resumed from {} at iteration {} (epoch {epoch:.3}){}",
            path.display(),
            self.engine.iteration(),
            if self.guard.lr_factor < 1.0 {
                format!(", learning rate x{}", self.guard.lr_factor)
            } else {
                String::new()
            }
        ));
        for n in &notes {
            self.reporter.say(&format!("resume: {n}"));
        }
        self.reporter.record(
            "resume",
            json!({ "run": run_id, "pid": std::process::id(), "from": path, "iteration": self.engine.iteration(), "epoch": epoch, "changes": notes }),
        )?;
        Ok(())
    }

    /// Trains to the epoch limit or the target (or until a signal, returned as
    /// [`SessionError::Interrupted`]), then evaluates, checkpoints and reports the end.
    pub(super) fn run(mut self) -> Result<Summary, SessionError> {
        let mut last = None;
        while !self.run.finished(&self.engine) {
            if let Some(rec) = self.iteration()? {
                last = Some(rec);
            }
        }
        self.finish(last)
    }

    /// One iteration and what follows it: the divergence guard (a rollback returns `None`),
    /// the tuner, an evaluation, a stop on a signal, a checkpoint.
    fn iteration(&mut self) -> Result<Option<IterationRecord>, SessionError> {
        let mut stepped = self.run.step(&mut self.engine, &mut self.reporter);
        // What happens after this iteration: an evaluation, a checkpoint, a signal, the end.
        // Each looks at the run, so the losses still being read (`LossRead::Lagged`) are
        // read first and counted with this iteration.
        let mut after = None;
        if let Ok(rec) = &mut stepped {
            let eval_due = self.run.evaluation_due(rec);
            if let Some(c) = self.ckpt.as_mut() {
                let done = c.poll();
                report_written(done, c, &mut self.reporter)?;
            }
            let due_here = self.ckpt.as_ref().is_some_and(|c| c.due(self.engine.iteration()));
            let world = Arc::clone(self.engine.world());
            let (sig, due) = agree(&*world, self.opts.interrupt.requested(self.engine.iteration()), due_here)?;
            if eval_due || due || sig.is_some() || self.run.finished(&self.engine) {
                match self.engine.flush_losses() {
                    Ok(Some(late)) => {
                        self.run.window.add_losses(&late);
                        rec.add_losses(&late);
                    }
                    Ok(None) => {}
                    Err(ReplicaError::Diverged(why)) => stepped = Err(StepError::Diverged(why)),
                    Err(e) => return Err(SessionError::run(e.to_string())),
                }
            }
            after = Some((eval_due, sig, due));
        }
        let diverged = match &stepped {
            Err(StepError::Diverged(why)) => Some(why.clone()),
            Err(StepError::Other(_)) => None,
            Ok(rec) => self.guard.check(&self.engine, rec, self.data.train.num_classes())?,
        };
        if let Some(why) = diverged {
            self.rollback(&why)?;
            return Ok(None);
        }
        let rec = match stepped {
            Ok(rec) => rec,
            Err(StepError::Other(e)) | Err(StepError::Diverged(e)) => return Err(SessionError::run(e)),
        };
        let layout_before = self.engine.layout();
        if let Some(t) = self.tuner.as_mut() {
            for ev in t.after_step(&mut self.engine, &rec)? {
                self.reporter.say(&ev.line());
                self.reporter.record("tuner", json!(ev))?;
            }
            if t.settled() {
                sync_notes(&self.engine, &mut self.noted_learners, &mut self.reporter)?;
            }
        }
        // A synchroniser that decides something as it runs (Ako's automatic partitions): each
        // change is said and recorded (the same on every rank: they agree on it).
        let (name, now) = self.engine.synchroniser();
        if now != self.sync_settings {
            // A change that follows a change of the learner count (SMA's alpha = 1/k) is the
            // tuner's line's consequence: recorded, not said again.
            if self.engine.layout() == layout_before {
                self.reporter
                    .say(&format!("synchroniser {name} now: {now} (from iteration {})", self.engine.iteration()));
            }
            self.reporter.record(
                "sync",
                json!({ "iteration": self.engine.iteration(), "name": name, "settings": now.to_json() }),
            )?;
            self.sync_settings = now;
        }
        let (eval_due, sig, due) = after.unwrap_or((false, None, false));
        if eval_due {
            self.run.evaluate(&mut self.engine, &rec, &mut self.reporter)?;
        }
        if let Some(sig) = sig {
            return Err(self.interrupted(sig));
        }
        if due {
            self.save()?;
        }
        Ok(Some(rec))
    }

    /// The end of the run: the final evaluation, the final checkpoint, the central model's
    /// fingerprint and the summary.
    fn finish(mut self, last: Option<IterationRecord>) -> Result<Summary, SessionError> {
        let config = Arc::clone(&self.cfg);
        let (cfg, engine) = (&*config, &self.engine);
        if last.is_none() && self.opts.resume.is_some() {
            // Resumed with nothing left to do: write nothing (the last checkpoint stays as it is).
            self.reporter.say(&format!(
                "nothing left to do: the run had reached {} at iteration {} (give a larger --epochs to continue)",
                if self.run.reached.is_some() {
                    "its target accuracy".to_string()
                } else {
                    format!("{} epoch{}", cfg.epochs, if cfg.epochs == 1.0 { "" } else { "s" })
                },
                engine.iteration()
            ));
            let summary = self.run.summary(cfg, engine);
            self.reporter.finish(&summary)?;
            return Ok(summary);
        }
        // The final accuracy is the model's at the end of the run.
        let mut evaluated_at_end = false;
        if let Some(rec) = last.filter(|r| self.run.evals.last().is_none_or(|e| e.iteration != r.iteration)) {
            self.run.evaluate(&mut self.engine, &rec, &mut self.reporter)?;
            evaluated_at_end = true;
        }
        let engine = &self.engine;
        if let Some(note) =
            crate::limits::short_limit_note(cfg, engine.iteration(), engine.samples(), self.run.per_epoch)
        {
            self.reporter.say(&note);
        }
        if self.saver.on && (evaluated_at_end || self.saver.submitted != Some(engine.iteration())) {
            self.save()?;
        }
        let engine = &self.engine;
        if let Some(c) = self.ckpt.as_mut() {
            let done = c.flush();
            report_written(done, c, &mut self.reporter)?;
            match (c.last_good(), c.last_good_iteration()) {
                (Some(p), Some(i)) if i == engine.iteration() => {
                    self.reporter.say(&format!("final checkpoint: {}", p.display()));
                }
                (last, i) => self.reporter.warn(&format!(
                    "warning: the final checkpoint (iteration {}) could not be written ({} checkpoint write{} failed in this run); {}",
                    engine.iteration(),
                    c.failed(),
                    if c.failed() == 1 { "" } else { "s" },
                    match (last, i) {
                        (Some(p), Some(i)) => format!("the last good one is {} (iteration {i})", p.display()),
                        _ => "there is no checkpoint of this run".to_string(),
                    }
                )),
            }
        }
        // A fingerprint of the final central model: equal on every rank, and equal between runs
        // that are bit-identical (the multi-process tests compare it).
        let z = engine.central_to_host(0)?;
        let mut crc = crc32fast::Hasher::new();
        for v in &z {
            crc.update(&v.to_le_bytes());
        }
        self.reporter.record(
            "central",
            json!({ "iteration": engine.iteration(), "parameters": z.len(), "crc32": format!("{:08x}", crc.finalize()) }),
        )?;
        if engine.world().size() > 1 {
            self.report_rank_allreduce()?;
        }
        let summary = self.run.summary(cfg, &self.engine);
        self.reporter.finish(&summary)?;
        Ok(summary)
    }

    /// Several ranks: the all-reduce between them, per iteration (median and mean).
    fn report_rank_allreduce(&mut self) -> Result<(), SessionError> {
        let engine = &self.engine;
        let mut t = self.run.rank_allreduce.clone();
        t.sort_by(f64::total_cmp);
        let median = t.get(t.len() / 2).copied().unwrap_or(0.0);
        let mean = t.iter().sum::<f64>() / t.len().max(1) as f64;
        self.reporter.record(
            "rank_allreduce",
            json!({
                "ranks": engine.world().size(),
                "count": t.len(),
                "bytes": 4 * engine.graph().param_len,
                "median_seconds": median,
                "mean_seconds": mean,
                "train_seconds": self.run.train_secs,
            }),
        )?;
        self.reporter.say(&format!(
            "all-reduce between ranks ({} KiB, download + MPI + upload, waiting for the slowest rank included): median {:.3} ms over {} iterations",
            4 * engine.graph().param_len / 1024,
            1e3 * median,
            t.len()
        ));
        Ok(())
    }
}

impl<B: Backend> super::Steps for Trainer<'static, B> {
    fn finished(&self) -> bool {
        self.run.finished(&self.engine)
    }

    fn step(&mut self) -> Result<Option<IterationRecord>, SessionError> {
        self.iteration()
    }

    fn evaluate(&mut self, rec: &IterationRecord) -> Result<EvalLine, SessionError> {
        // An iteration already evaluated (by the schedule) is not evaluated twice.
        if let Some(e) = self.run.evals.last().filter(|e| e.iteration == rec.iteration) {
            return Ok(e.clone());
        }
        self.run.evaluate(&mut self.engine, rec, &mut self.reporter)?;
        self.run.evals.last().cloned().ok_or_else(|| SessionError::run("the evaluation recorded nothing"))
    }

    fn save(&mut self) -> Result<PathBuf, SessionError> {
        if !self.saver.on {
            return Err(SessionError::usage(
                "this run writes no checkpoints: give it a checkpoint folder (Config::checkpoint_dir, --checkpoint-dir)",
            ));
        }
        Trainer::save(self)?;
        let now = self.engine.iteration();
        let Some(c) = self.ckpt.as_mut() else {
            return Err(SessionError::usage("only rank 0 writes the checkpoints of a run of several ranks"));
        };
        let done = c.flush();
        report_written(done, c, &mut self.reporter)?;
        match (c.last_good(), c.last_good_iteration()) {
            (Some(p), Some(i)) if i == now => Ok(p.to_path_buf()),
            _ => Err(SessionError::run(format!(
                "the checkpoint of iteration {now} could not be written (see the warning)"
            ))),
        }
    }

    fn finish(self: Box<Self>, last: Option<IterationRecord>) -> Result<Summary, SessionError> {
        Trainer::finish(*self, last)
    }
}
