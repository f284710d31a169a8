//! `crossbow train`: data, engine, synchroniser and tuner wired together.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{
    Cursor, DEFAULT_IMAGE_SIZE, Dataset, DatasetKind, FolderOptions, LoadOptions, Normalize, Pipeline, PipelineConfig,
    Share,
};
use crossbow_kernels::Backend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_replica::checkpoint::{CheckpointFile, Tensor};
use crossbow_replica::engine::EngineSnapshot;
use crossbow_replica::engine::{
    AutoTuner, DeviceFactory, Engine, EngineConfig, IterationRecord, LossRead, LossRecord, TrainPlan, TrainSource,
};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, ProcessGroup, ReplicaError, Solo, Synchroniser};
use crossbow_tensor::Shape;
use crossbow_tuner::TunerConfig;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::checkpoint::{CheckpointPolicy, Checkpointer, DivergencePolicy, Line, OnDivergence, OnWriteError, Written};
use crate::config::{AugmentChoice, BnEval, LearnersPerDevice, TrainConfig};
use crate::error::CliError;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Reporter, Summary};
use crate::resume::config_to_file;
use crate::signals::{self, Interrupt};
use crate::source::{PipelineSource, TestSet};

/// The loaded training and test sets.
pub struct Data {
    /// The training set (augmented by the pipeline).
    pub train: Arc<Dataset>,
    /// The test set the central model is evaluated on.
    pub test: Arc<Dataset>,
}

/// Loads (or generates) the configured dataset.
pub fn load_data(cfg: &TrainConfig) -> Result<Data, CliError> {
    let folder = cfg.dataset == DatasetKind::Folder;
    if !folder && cfg.image_size.is_some() {
        return Err(CliError::usage(format!(
            "{} applies to --dataset folder only ({} images are {}x{})",
            cfg.name_of("image-size"),
            cfg.dataset,
            cfg.dataset.image_shape()[1],
            cfg.dataset.image_shape()[2]
        )));
    }
    let opts = LoadOptions {
        seed: cfg.seed,
        train_size: cfg.train_size,
        test_size: cfg.test_size,
        folder: FolderOptions {
            image_size: cfg.image_size.unwrap_or(DEFAULT_IMAGE_SIZE),
            max_pixels: cfg.max_image_pixels,
            on_bad_image: cfg.on_bad_image,
            decode: cfg.decode,
        },
    };
    let (train, test) = crossbow_data::load(cfg.dataset, &cfg.data_dir, &opts)?;
    Ok(Data { train: Arc::new(train), test: Arc::new(test) })
}

/// The model for a dataset's image shape and classes.
pub fn build_graph(cfg: &TrainConfig, data: &Data) -> Result<Graph, CliError> {
    let [c, h, w] = data.train.image_shape();
    Ok(cfg.model.build(&Shape::new(vec![c, h, w]), data.train.num_classes())?)
}

pub use crate::dispatch::{Hardware, cores, resolve_hardware};

/// Trains as configured, with the synchroniser `cfg.sync_name` of `registry` (for the
/// built-in ones: [`SyncRegistry::builtin`]), printing progress through `reporter`.
pub fn train(cfg: &TrainConfig, registry: &SyncRegistry, reporter: &mut Reporter) -> Result<Summary, CliError> {
    train_with_opts(cfg, registry, reporter, RunOptions::default())
}

/// [`train`] with checkpoints, resume, divergence handling and signals ([`RunOptions`]).
pub fn train_with_opts(
    cfg: &TrainConfig,
    registry: &SyncRegistry,
    reporter: &mut Reporter,
    opts: RunOptions,
) -> Result<Summary, CliError> {
    let sync = registry.build_for(cfg)?;
    let data = load_data(cfg)?;
    for note in data.train.notes().iter().chain(data.test.notes()) {
        reporter.warn(&format!("warning: {}: {note}", cfg.data_dir.display()));
    }
    opts.interrupt.during_startup("loading the data")?;
    normalize_for(cfg, &data.train)?;
    let graph = build_graph(cfg, &data)?;
    let hw = resolve_hardware(&cfg.devices, cfg.threads, &mut |l| reporter.say(&l))?;
    struct TrainJob<'a> {
        cfg: &'a TrainConfig,
        data: &'a Data,
        graph: Graph,
        reporter: &'a mut Reporter,
        opts: RunOptions,
    }
    impl crate::dispatch::Job for TrainJob<'_> {
        type Output = Summary;
        fn run<B: Backend>(
            self,
            factory: Box<dyn DeviceFactory<B>>,
            sync: Box<dyn Synchroniser<B>>,
            about: Vec<String>,
        ) -> Result<Summary, CliError> {
            for line in &about {
                self.reporter.say(line);
            }
            train_with_options(self.cfg, self.data, self.graph, factory, sync, self.reporter, self.opts)
        }
    }
    crate::dispatch::dispatch(&hw, sync, cfg.all_reduce, TrainJob { cfg, data: &data, graph, reporter, opts })
}

/// Samples per pipeline epoch for `data` at `cfg`'s batch size.
fn pipeline_for(
    cfg: &TrainConfig,
    data: &Data,
    prefetch: usize,
    seed: u64,
    start: Cursor,
    share: Option<Share>,
) -> Result<Pipeline, CliError> {
    let mut pc = PipelineConfig::new(cfg.batch_size, seed);
    pc.start = start;
    pc.share = share;
    pc.workers = cfg.workers;
    pc.prefetch = prefetch.max(4);
    if let AugmentChoice::Set(a) = cfg.augment {
        pc.augment = Some(a);
    }
    pc.normalize = Some(normalize_for(cfg, &data.train)?);
    Ok(Pipeline::new(Arc::clone(&data.train), pc)?)
}

/// Trains `graph` on `data` with any backend and synchroniser: what `crossbow train` runs, and
/// the library entry point for a backend of your own (for a synchroniser of your own, a
/// [`SyncRegistry`] and `crossbow_cli::main_with` give you the whole command line instead). No
/// checkpoints, no signal handling: see [`train_with_options`].
pub fn train_with<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    reporter: &mut Reporter,
) -> Result<Summary, CliError> {
    train_with_options(cfg, data, graph, factory, sync, reporter, RunOptions::default())
}

/// What a run does besides training: resume from a checkpoint, write checkpoints, handle a
/// divergence, stop cleanly on a signal.
pub struct RunOptions {
    /// The checkpoint to continue from, and its file name.
    pub resume: Option<(PathBuf, CheckpointFile)>,
    /// Where and how often to write checkpoints (none: no checkpoints).
    pub checkpoint: Option<CheckpointPolicy>,
    /// What a diverged run does.
    pub divergence: DivergencePolicy,
    /// Signals asking the run to stop.
    pub interrupt: Interrupt,
    /// The processes (ranks) this run is one of ([`Solo`] alone; see [`crate::processes`]).
    pub world: Arc<dyn ProcessGroup>,
    /// The run and line of checkpoints this process writes (rank 0; `None`: a new run).
    pub line: Option<Line>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            resume: None,
            checkpoint: None,
            divergence: DivergencePolicy { action: OnDivergence::Stop, max_rollbacks: 0 },
            interrupt: Interrupt::none(),
            world: Arc::new(Solo),
            line: None,
        }
    }
}

/// A loss this many times the first iteration's (or ln(classes), if larger) means the run
/// diverged even though it is still finite.
pub const EXPLODED_LOSS_FACTOR: f64 = 100.0;

/// [`train_with`] with checkpoints, resume, divergence handling and signals.
pub fn train_with_options<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    reporter: &mut Reporter,
    opts: RunOptions,
) -> Result<Summary, CliError> {
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
    let plan = crate::preflight::check_run(cfg, data, &graph, &*factory, &*sync)?;
    let mut engine = start_engine_planned(cfg, graph, Some(plan), factory, sync, &layout, Arc::clone(&world))?;
    // With several ranks each restores its slice of the checkpoint's learners.
    let resumed = match resumed {
        Some((p, s)) if multi => {
            let slice = rank_slice(&s, &saved_ranks, &engine, device_offset)?;
            Some((p, slice))
        }
        r => r,
    };
    let mut run = Run::new(cfg, data, &engine)?;
    let read = if engine.asynchronous_devices() { LossRead::Lagged } else { LossRead::Now };
    engine.set_loss_read(cfg.loss_read.unwrap_or(read))?;
    // The run's identity (its checkpoints' and its metrics' owner): rank 0's, on every rank.
    let mut line = opts.line.clone().unwrap_or_else(Line::new_run);
    if multi {
        let mut bytes = serde_json::to_vec(&line).map_err(CliError::run)?;
        world.broadcast_bytes(0, &mut bytes)?;
        line = serde_json::from_slice(&bytes).map_err(|e| CliError::run(format!("rank 0's run id: {e}")))?;
    }
    // Only rank 0 writes; the others send it their part of every checkpoint.
    let mut ckpt = match &opts.checkpoint {
        Some(p) if world.rank() == 0 => {
            Some(Checkpointer::start(p.clone(), resumed.as_ref().map(|r| r.1.iteration).unwrap_or(0), line.clone())?)
        }
        _ => None,
    };
    let mut saver = Saver { on: opts.checkpoint.is_some(), submitted: None };
    if world.rank() == 0 {
        signal_notes(ckpt.as_ref());
    }
    announce(cfg, data, &engine, &run, &line.run, reporter)?;
    let mut noted_learners = 0;
    let mut tuner = auto_tuner(cfg, &engine, data.train.len())?;
    if tuner.is_none() {
        sync_notes(&engine, &mut noted_learners, reporter)?;
    }
    let mut guard = Guard { first_loss: None, rollbacks: 0, lr_factor: 1.0, prev_target: None, prev_diverged_at: None };
    if let (Some((path, file)), Some((_, snap))) = (&opts.resume, &resumed) {
        let tuner_state = saved_tuner(file, &saved_ranks, &*world);
        let notes =
            continue_from(cfg, data, &mut engine, &mut run, tuner.as_mut(), &mut guard, file, snap, &tuner_state)?;
        let epoch = run.epoch(&engine);
        reporter.say(&format!(
            "resumed from {} at iteration {} (epoch {epoch:.3}){}",
            path.display(),
            engine.iteration(),
            if guard.lr_factor < 1.0 { format!(", learning rate x{}", guard.lr_factor) } else { String::new() }
        ));
        for n in &notes {
            reporter.say(&format!("resume: {n}"));
        }
        reporter.record(
            "resume",
            json!({ "run": line.run, "pid": std::process::id(), "from": path, "iteration": engine.iteration(), "epoch": epoch, "changes": notes }),
        )?;
    }
    // With rollback, a first checkpoint before any step: a divergence before the first
    // periodic checkpoint still has something to go back to.
    // (Rank 0 knows whether there is one; it tells the others.)
    let mut first = opts.divergence.action == OnDivergence::Rollback
        && saver.on
        && ckpt.as_ref().is_none_or(|c| c.last_good().is_none());
    if multi {
        first = world.all_gather_u64(u64::from(first))?.first() == Some(&1);
    }
    if first {
        write_checkpoint(cfg, data, &engine, &run, tuner.as_ref(), &guard, &opts, ckpt.as_mut(), &mut saver, reporter)?;
        if let Some(c) = ckpt.as_mut() {
            let done = c.flush();
            report_written(done, c, reporter)?;
        }
    }
    if !multi {
        // (Several ranks agree on a signal after the first iteration instead.)
        opts.interrupt.during_startup("starting the engine")?;
    }
    let mut last = None;
    let mut sync_settings = engine.synchroniser().1;
    while !run.finished(&engine) {
        let mut stepped = run.step(&mut engine, reporter);
        // What happens after this iteration: an evaluation, a checkpoint, a signal, the end.
        // Each looks at the run, so the losses still being read (`LossRead::Lagged`) are
        // read first and counted with this iteration.
        let mut after = None;
        if let Ok(rec) = &mut stepped {
            let eval_due = run.evaluation_due(rec);
            if let Some(c) = ckpt.as_mut() {
                let done = c.poll();
                report_written(done, c, reporter)?;
            }
            let due_here = ckpt.as_ref().is_some_and(|c| c.due(engine.iteration()));
            let (sig, due) = agree(&*world, opts.interrupt.requested(engine.iteration()), due_here)?;
            if eval_due || due || sig.is_some() || run.finished(&engine) {
                match engine.flush_losses() {
                    Ok(Some(late)) => {
                        run.window.add_losses(&late);
                        rec.add_losses(&late);
                    }
                    Ok(None) => {}
                    Err(ReplicaError::Diverged(why)) => stepped = Err(StepError::Diverged(why)),
                    Err(e) => return Err(CliError::run(e.to_string())),
                }
            }
            after = Some((eval_due, sig, due));
        }
        let diverged = match &stepped {
            Err(StepError::Diverged(why)) => Some(why.clone()),
            Err(StepError::Other(_)) => None,
            Ok(rec) => guard.check(&engine, rec, data.train.num_classes())?,
        };
        if let Some(why) = diverged {
            rollback(
                cfg,
                data,
                &mut engine,
                &mut run,
                tuner.as_mut(),
                &mut guard,
                &opts,
                ckpt.as_mut(),
                reporter,
                &why,
            )?;
            continue;
        }
        let rec = match stepped {
            Ok(rec) => rec,
            Err(StepError::Other(e)) | Err(StepError::Diverged(e)) => return Err(CliError::run(e)),
        };
        let layout_before = engine.layout();
        if let Some(t) = tuner.as_mut() {
            for ev in t.after_step(&mut engine, &rec)? {
                reporter.say(&ev.line());
                reporter.record("tuner", json!(ev))?;
            }
            if t.settled() {
                sync_notes(&engine, &mut noted_learners, reporter)?;
            }
        }
        // A synchroniser that decides something as it runs (Ako's automatic partitions): each
        // change is said and recorded (the same on every rank: they agree on it).
        let (name, now) = engine.synchroniser();
        if now != sync_settings {
            // A change that follows a change of the learner count (SMA's alpha = 1/k) is the
            // tuner's line's consequence: recorded, not said again.
            if engine.layout() == layout_before {
                reporter.say(&format!("synchroniser {name} now: {now} (from iteration {})", engine.iteration()));
            }
            reporter
                .record("sync", json!({ "iteration": engine.iteration(), "name": name, "settings": now.to_json() }))?;
            sync_settings = now;
        }
        let (eval_due, sig, due) = after.unwrap_or((false, None, false));
        if eval_due {
            run.evaluate(&mut engine, &rec, reporter)?;
        }
        if let Some(sig) = sig {
            return Err(interrupted(
                cfg,
                data,
                &engine,
                &run,
                tuner.as_ref(),
                &guard,
                &opts,
                ckpt.as_mut(),
                &mut saver,
                reporter,
                sig,
            ));
        }
        if due {
            write_checkpoint(
                cfg,
                data,
                &engine,
                &run,
                tuner.as_ref(),
                &guard,
                &opts,
                ckpt.as_mut(),
                &mut saver,
                reporter,
            )?;
        }
        last = Some(rec);
    }
    if last.is_none() && opts.resume.is_some() {
        // Resumed with nothing left to do: write nothing (the last checkpoint stays as it is).
        reporter.say(&format!(
            "nothing left to do: the run had reached {} at iteration {} (give a larger --epochs to continue)",
            if run.reached.is_some() {
                "its target accuracy".to_string()
            } else {
                format!("{} epoch{}", cfg.epochs, if cfg.epochs == 1.0 { "" } else { "s" })
            },
            engine.iteration()
        ));
        let summary = run.summary(cfg, &engine);
        reporter.finish(&summary)?;
        return Ok(summary);
    }
    // The final accuracy is the model's at the end of the run.
    let mut evaluated_at_end = false;
    if let Some(rec) = last.filter(|r| run.evals.last().is_none_or(|e| e.iteration != r.iteration)) {
        run.evaluate(&mut engine, &rec, reporter)?;
        evaluated_at_end = true;
    }
    if let Some(note) = crate::limits::short_limit_note(cfg, engine.iteration(), engine.samples(), run.per_epoch) {
        reporter.say(&note);
    }
    if saver.on && (evaluated_at_end || saver.submitted != Some(engine.iteration())) {
        write_checkpoint(cfg, data, &engine, &run, tuner.as_ref(), &guard, &opts, ckpt.as_mut(), &mut saver, reporter)?;
    }
    if let Some(c) = ckpt.as_mut() {
        let done = c.flush();
        report_written(done, c, reporter)?;
        match (c.last_good(), c.last_good_iteration()) {
            (Some(p), Some(i)) if i == engine.iteration() => {
                reporter.say(&format!("final checkpoint: {}", p.display()));
            }
            (last, i) => reporter.warn(&format!(
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
    reporter.record(
        "central",
        json!({ "iteration": engine.iteration(), "parameters": z.len(), "crc32": format!("{:08x}", crc.finalize()) }),
    )?;
    if engine.world().size() > 1 {
        let mut t = run.rank_allreduce.clone();
        t.sort_by(f64::total_cmp);
        let median = t.get(t.len() / 2).copied().unwrap_or(0.0);
        let mean = t.iter().sum::<f64>() / t.len().max(1) as f64;
        reporter.record(
            "rank_allreduce",
            json!({
                "ranks": engine.world().size(),
                "count": t.len(),
                "bytes": 4 * engine.graph().param_len,
                "median_seconds": median,
                "mean_seconds": mean,
                "train_seconds": run.train_secs,
            }),
        )?;
        reporter.say(&format!(
            "all-reduce between ranks ({} KiB, download + MPI + upload, waiting for the slowest rank included): median {:.3} ms over {} iterations",
            4 * engine.graph().param_len / 1024,
            1e3 * median,
            t.len()
        ));
    }
    let summary = run.summary(cfg, &engine);
    reporter.finish(&summary)?;
    Ok(summary)
}

/// Divergence watch: the first loss (the scale an exploded loss is measured against), and the
/// rollbacks so far.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Guard {
    first_loss: Option<f64>,
    rollbacks: u32,
    /// The base learning rate relative to the configured one (halved by every rollback).
    lr_factor: f64,
    /// The iteration of the checkpoint the last rollback went back to.
    #[serde(default)]
    prev_target: Option<u64>,
    /// The iteration at which the run diverged before the last rollback.
    #[serde(default)]
    prev_diverged_at: Option<u64>,
}

impl Guard {
    /// Why the run diverged at `rec`, if it did ([`DivergenceWatch::check`]).
    fn check<B: Backend>(
        &mut self,
        engine: &Engine<B>,
        rec: &IterationRecord,
        classes: usize,
    ) -> Result<Option<String>, CliError> {
        let mut watch = DivergenceWatch { first_loss: self.first_loss };
        let why = watch.check(engine, rec, classes)?;
        self.first_loss = watch.first_loss;
        Ok(why)
    }
}

/// Why [`Run::step`] failed.
enum StepError {
    /// A learner's loss became NaN or infinite (the engine's check).
    Diverged(String),
    /// Anything else.
    Other(String),
}

/// The checkpoint of the run as it stands: the engine's buffers, copied to the host now (the
/// only pause), handed to the writer thread.
#[allow(clippy::too_many_arguments)]
fn write_checkpoint<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &Engine<B>,
    run: &Run,
    tuner: Option<&AutoTuner>,
    guard: &Guard,
    opts: &RunOptions,
    ckpt: Option<&mut Checkpointer>,
    saver: &mut Saver,
    reporter: &mut Reporter,
) -> Result<(), CliError> {
    let t0 = Instant::now();
    let file = checkpoint_file(cfg, data, engine, run, tuner, guard, opts)?;
    let copy = t0.elapsed().as_secs_f64();
    saver.submitted = Some(engine.iteration());
    if let (Some(c), Some(mut file)) = (ckpt, file) {
        if let Some(o) = file.state.as_object_mut() {
            // Whose checkpoint this is (rotation and resume go by it), and when it was made
            // (a folder with several lines of a run resumes the line written last).
            o.insert("line".into(), serde_json::to_value(c.line()).map_err(CliError::run)?);
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
            o.insert("written_at".into(), json!(now));
        }
        c.submit(engine.iteration(), file)?;
    }
    reporter.record("checkpoint", json!({ "iteration": engine.iteration(), "copy_seconds": copy }))?;
    Ok(())
}

/// What every rank knows of the checkpoints (only rank 0 has the [`Checkpointer`]; when
/// one is due, rank 0 decides: [`agree`]).
struct Saver {
    /// Checkpoints are written (`--checkpoint-dir`).
    on: bool,
    /// The iteration of the last checkpoint this rank took part in.
    submitted: Option<u64>,
}

/// The stop signal and the checkpoint decision after an iteration, the same on every rank:
/// with several ranks one all-reduce of three flags, so that a SIGTERM that reaches one rank
/// stops every rank after the same iteration (with a checkpoint), and rank 0's clock decides
/// when a checkpoint every N minutes is due.
fn agree(world: &dyn ProcessGroup, sig: Option<i32>, due: bool) -> Result<(Option<i32>, bool), CliError> {
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
fn report_written(done: Vec<Written>, ckpt: &mut Checkpointer, reporter: &mut Reporter) -> Result<(), CliError> {
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
                    return Err(CliError::run(format!(
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
fn signal_notes(ckpt: Option<&Checkpointer>) {
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
fn say_line(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Stops on `sig` after the iteration: writes a checkpoint and says how to resume. With
/// several ranks, the other ranks say their line themselves and return an empty message.
#[allow(clippy::too_many_arguments)]
fn interrupted<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &Engine<B>,
    run: &Run,
    tuner: Option<&AutoTuner>,
    guard: &Guard,
    opts: &RunOptions,
    mut ckpt: Option<&mut Checkpointer>,
    saver: &mut Saver,
    reporter: &mut Reporter,
    sig: i32,
) -> CliError {
    let code = signals::exit_code(sig);
    let what = format!("stopped by {} after iteration {}", signals::name(sig), engine.iteration());
    let _ = reporter.record("interrupted", json!({ "signal": sig, "iteration": engine.iteration() }));
    if !saver.on {
        return CliError::Interrupted { code, msg: format!("{what}; no checkpoint (no --checkpoint-dir given)") };
    }
    // Checkpoints still waiting for the writer are older than the one this stop writes: they
    // are skipped, so the stop is one write away (the one being written finishes).
    if let Some(c) = ckpt.as_deref() {
        c.supersede(engine.iteration());
    }
    let written = write_checkpoint(cfg, data, engine, run, tuner, guard, opts, ckpt.as_deref_mut(), saver, reporter);
    let world = engine.world();
    let Some(c) = ckpt else {
        // Another rank: wait until rank 0 has its file on disk (or failed), then say so.
        let gathered = written.and_then(|_| Ok(world.all_gather_u64(0)?));
        let msg = match &gathered {
            Ok(v) if v.first() == Some(&1) => format!("{what}; rank 0 wrote the checkpoint"),
            Ok(_) => format!("{what}; rank 0 could not write the checkpoint (its message says why)"),
            Err(e) => format!("{what}; the checkpoint failed ({e})"),
        };
        if gathered.is_err() {
            return CliError::Interrupted { code, msg };
        }
        // mpirun ends the whole job as soon as rank 0 exits with a signal's code, which would
        // cut this line off: it is said here, whole, and only then may rank 0 leave.
        say_line(&format!("crossbow (rank {}): {msg}", world.rank()));
        let _ = world.all_gather_u64(0);
        return CliError::Interrupted { code, msg: String::new() };
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
    let now = engine.iteration();
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
            format!("{what}; no checkpoint could be written{}", r.err().map(|e| format!(" ({e})")).unwrap_or_default())
        }
    };
    CliError::Interrupted { code, msg }
}

/// `crossbow train --resume PATH`, under `mpirun -np N` when the run is one of N ranks.
fn resume_hint(world: &dyn ProcessGroup, path: &Path) -> String {
    let launcher = if world.size() > 1 { format!("mpirun -np {} ", world.size()) } else { String::new() };
    format!("{launcher}crossbow train --resume {}", path.display())
}

/// A divergence: stop with where to resume from, or roll back to the last good checkpoint
/// with the learning rate halved.
#[allow(clippy::too_many_arguments)]
fn rollback<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &mut Engine<B>,
    run: &mut Run,
    tuner: Option<&mut AutoTuner>,
    guard: &mut Guard,
    opts: &RunOptions,
    mut ckpt: Option<&mut Checkpointer>,
    reporter: &mut Reporter,
    why: &str,
) -> Result<(), CliError> {
    // Rank 0 (which writes the checkpoints) chooses the checkpoint and sends it to every rank
    // (every rank diverges at the same iteration: the losses and the central model are the
    // same on all).
    let world = Arc::clone(engine.world());
    let at = engine.iteration() + 1;
    let g = guard.clone();
    if let Some(d) = run.diagnostics.as_mut() {
        d.forget();
    }
    let chosen = crate::checkpoint::from_rank0(Path::new("rollback"), &*world, || {
        let (last, dir, run) = match ckpt.as_deref_mut() {
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
            CliError::run(format!("training diverged: {why}{at}{extra}; {}", likely_cause(cfg, engine)))
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
        // The newest checkpoint, unless the run diverged again no later than last time: then
        // the checkpoint it went back to may already hold the seed of the divergence, so an
        // earlier one is tried first; with none earlier, the same one again (the learning
        // rate halves at every rollback, up to --max-rollbacks).
        let before = match (g.prev_target, g.prev_diverged_at) {
            (Some(t), Some(d)) if at <= d => Some(t),
            _ => None,
        };
        let order = ours
            .iter()
            .filter(|e| before.is_some_and(|b| e.iteration < b))
            .chain(ours.iter().filter(|e| before.is_none_or(|b| e.iteration == b)));
        for e in order {
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
        let counts = world.all_gather_u64(engine.devices().len() as u64)?;
        let device_offset = counts.iter().take(world.rank()).sum::<u64>() as usize;
        rank_slice(&snap, &ranks, engine, device_offset)?
    } else {
        snap
    };
    let mut kept = guard.clone();
    continue_from(cfg, data, engine, run, tuner, guard, &file, &snap, &tuner_state)?;
    // The checkpoints after the one gone back to stay: the run continues as a new line.
    if let Some(c) = ckpt {
        let b = c.line().branch();
        c.set_line(b);
    }
    kept.rollbacks += 1;
    kept.lr_factor *= 0.5;
    kept.prev_target = Some(target);
    kept.prev_diverged_at = Some(at);
    *guard = kept;
    let rollbacks = guard.rollbacks;
    let lr = cfg.lr * guard.lr_factor;
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

/// What most likely made a run diverge, as advice: the settings beyond their usual ranges
/// first, else the learning rate.
fn likely_cause<B: Backend>(cfg: &TrainConfig, engine: &Engine<B>) -> String {
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
    let k = engine.world_learners();
    if let Some(a) = cfg.alpha
        && k >= 2
        && a > 2.0 / (k as f64 + 1.0)
    {
        causes.push(format!(
            "{} {a} (with {k} learners the central model overshoots above {:.2})",
            cfg.name_of("alpha"),
            2.0 / (k as f64 + 1.0)
        ));
    }
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

/// Everything a checkpoint holds: the engine's tensors, and as JSON the settings, the model's
/// input, the data streams' positions, the run's counters and evaluations, the tuner.
fn checkpoint_file<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &Engine<B>,
    run: &Run,
    tuner: Option<&AutoTuner>,
    guard: &Guard,
    opts: &RunOptions,
) -> Result<Option<CheckpointFile>, CliError> {
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
        let bytes = part.to_bytes().map_err(|e| CliError::run(e.to_string()))?;
        let parts = world.gather_bytes(0, &bytes)?;
        if world.rank() != 0 {
            return Ok(None);
        }
        let mut snaps = Vec::with_capacity(parts.len());
        let mut ranks = Vec::with_capacity(parts.len());
        for (r, b) in parts.iter().enumerate() {
            let from = PathBuf::from(format!("(rank {r}'s part of the checkpoint)"));
            let f = CheckpointFile::from_bytes(&from, b).map_err(|e| CliError::run(e.to_string()))?;
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
        o.insert("ranks".into(), serde_json::to_value(ranks).map_err(CliError::run)?);
    }
    snap.to_checkpoint(&mut file)?;
    file.tensors.insert("central/stats".into(), Tensor::vector(central_stats));
    Ok(Some(file))
}

/// Refuses to resume the run of `file` on other data than it trained on: the fingerprints
/// of the training and test sets ([`crossbow_data::Fingerprint`]) must equal the saved ones
/// (a checkpoint of an older version has none and is accepted). Where the files lie does not
/// matter: a moved data folder is the same data.
fn check_data(cfg: &TrainConfig, data: &Data, path: &Path, file: &CheckpointFile) -> Result<(), CliError> {
    let Some(saved) = file.state.get("data") else { return Ok(()) };
    for (split, now) in [("train", data.train.fingerprint()), ("test", data.test.fingerprint())] {
        let Some(was) = saved.get(split) else { continue };
        let was: crossbow_data::Fingerprint = serde_json::from_value(was.clone()).map_err(|e| {
            CliError::usage(format!("--resume {}: the data fingerprint is unreadable: {e}", path.display()))
        })?;
        if was != now {
            return Err(CliError::usage(format!(
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
struct RankState {
    /// The rank's devices (its slice of the checkpoint's, in order).
    devices: Vec<String>,
    /// Learners per device.
    layout: Vec<usize>,
    /// The id the rank numbers its next learner with.
    next_id: usize,
    /// The rank's auto-tuner.
    tuner: Value,
}

impl RankState {
    /// The ranks of `file` (empty for a checkpoint of one process).
    fn read(path: &Path, file: &CheckpointFile) -> Result<Vec<RankState>, CliError> {
        match file.state.get("ranks") {
            None | Some(Value::Null) => Ok(vec![]),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                CliError::usage(format!("--resume {}: the ranks' state is unreadable: {e}", path.display()))
            }),
        }
    }
}

/// The learners per device this rank starts with to continue `snap` exactly: its own from a
/// checkpoint of as many ranks with as many devices each, or its devices' slice of the
/// checkpoint's when all ranks together have the checkpoint's devices (2 ranks of 1 device
/// and 1 process of 2 devices continue each other's runs); none otherwise.
fn saved_layout(
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
fn rank_slice<B: Backend>(
    snap: &EngineSnapshot,
    ranks: &[RankState],
    engine: &Engine<B>,
    device_offset: usize,
) -> Result<EngineSnapshot, CliError> {
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
fn saved_tuner(file: &CheckpointFile, ranks: &[RankState], world: &dyn ProcessGroup) -> Value {
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

/// Puts `file`'s state into the engine, the run and the tuner.
#[allow(clippy::too_many_arguments)]
fn continue_from<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &mut Engine<B>,
    run: &mut Run,
    tuner: Option<&mut AutoTuner>,
    guard: &mut Guard,
    file: &CheckpointFile,
    snap: &EngineSnapshot,
    tuner_state: &Value,
) -> Result<Vec<String>, CliError> {
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

/// The auto-tuner of `cfg` (`--learners-per-device auto`: `--max-learners`,
/// `--tuner-threshold`) for `engine`, or `None` with a fixed learner count.
pub fn auto_tuner<B: Backend>(
    cfg: &TrainConfig,
    engine: &Engine<B>,
    train_len: usize,
) -> Result<Option<AutoTuner>, CliError> {
    match cfg.learners_per_device {
        LearnersPerDevice::Auto => {
            let tc = TunerConfig {
                max_learners: tuner_cap(cfg, engine, train_len),
                threshold: cfg.tuner_threshold,
                ..TunerConfig::default()
            };
            Ok(Some(AutoTuner::new(engine, tc, true).map_err(|e| CliError::usage(e.to_string()))?))
        }
        LearnersPerDevice::Fixed(_) => Ok(None),
    }
}

/// The most learners per device the tuner may use: `--max-learners`, and no more than make an
/// iteration (a batch per learner on every device) an epoch.
fn tuner_cap<B: Backend>(cfg: &TrainConfig, engine: &Engine<B>, train_len: usize) -> usize {
    let devices = (engine.devices().len() * engine.world().size()).max(1);
    cfg.max_learners.min((train_len / cfg.batch_size.max(1) / devices).max(1))
}

/// The engine for `cfg` with `layout[d]` learners on device `d`.
pub fn start_engine<B: Backend>(
    cfg: &TrainConfig,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    layout: &[usize],
) -> Result<Engine<B>, CliError> {
    start_engine_in(cfg, graph, factory, sync, layout, Arc::new(Solo))
}

/// [`start_engine`] as one rank of `world` (a collective).
pub fn start_engine_in<B: Backend>(
    cfg: &TrainConfig,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    layout: &[usize],
    world: Arc<dyn ProcessGroup>,
) -> Result<Engine<B>, CliError> {
    start_engine_planned(cfg, graph, None, factory, sync, layout, world)
}

/// [`start_engine_in`] with the training program already lowered and planned (by the memory
/// check), so that the graph is lowered once.
fn start_engine_planned<B: Backend>(
    cfg: &TrainConfig,
    graph: Graph,
    plan: Option<TrainPlan>,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    layout: &[usize],
    world: Arc<dyn ProcessGroup>,
) -> Result<Engine<B>, CliError> {
    let ecfg = EngineConfig {
        batch_size: cfg.batch_size,
        sgd: SgdConfig {
            lr: cfg.lr as f32,
            momentum: cfg.momentum as f32,
            weight_decay: cfg.weight_decay as f32,
            nesterov: cfg.nesterov,
        },
        schedule: cfg.schedule.clone(),
        seed: cfg.seed,
        eval_batch_size: cfg.eval_batch_size,
    };
    let plan = match plan {
        Some(p) => p,
        None => TrainPlan::new(&graph, cfg.batch_size)?,
    };
    let mut engine =
        Engine::in_world_planned(graph, plan, ecfg, factory, sync, Box::new(HostAllReduce), layout, world)?;
    engine.set_eval_first_learner_stats(cfg.bn_eval == BnEval::FirstLearner);
    engine.set_bn_group(cfg.bn_group);
    Ok(engine)
}

/// The two banner lines and the metrics file's `start` record.
fn announce<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &Engine<B>,
    run: &Run,
    run_id: &str,
    reporter: &mut Reporter,
) -> Result<(), CliError> {
    let (per_epoch, share) = (run.per_epoch, run.share);
    let (sync_name, sync_settings) = engine.synchroniser();
    let sync_line =
        if sync_settings.is_empty() { sync_name.to_string() } else { format!("{sync_name} ({sync_settings})") };
    let dev_names: Vec<String> = engine.devices().iter().map(|d| d.to_string()).collect();
    reporter.say(&format!(
        "{} ({} parameters, {:.1} MFLOP/image) on {} ({} train / {} test images, {} classes)",
        cfg.model,
        engine.graph().num_params(),
        engine.graph().forward_flops() / 1e6,
        cfg.dataset,
        data.train.len(),
        data.test.len(),
        data.train.num_classes()
    ));
    let learners = match cfg.learners_per_device {
        LearnersPerDevice::Auto => {
            format!("auto (starting at 1, tuner picks up to {})", tuner_cap(cfg, engine, data.train.len()))
        }
        LearnersPerDevice::Fixed(m) => {
            format!("{m} ({} in all)", crate::report::plural(engine.world_learners() as u64, "learner"))
        }
    };
    // Batch-norm settings only for a model that has batch norm.
    let bn = if engine.graph().stats_len == 0 {
        String::new()
    } else {
        format!(
            ", batch-norm evaluation {}{}",
            cfg.bn_eval,
            if cfg.bn_group == crossbow_replica::engine::BnGroup::Device {
                ", batch norm over each device's learners"
            } else {
                ""
            }
        )
    };
    reporter.say(&format!(
        "devices {} x learners {learners}, batch {} per learner, sync {sync_line}, lr {} {}, momentum {}, weight decay {}{bn}",
        dev_names.join(","),
        cfg.batch_size,
        cfg.lr,
        cfg.schedule,
        cfg.momentum,
        cfg.weight_decay,
    ));
    let world = engine.world();
    if world.size() > 1 {
        reporter.say(&format!(
            "processes: {}; learners per rank {:?} ({} in all, alpha and the data order count them all); rank 0 prints, every rank writes its own metrics file",
            world.describe(),
            engine.world_layout(),
            engine.world_learners()
        ));
    }
    reporter.record(
        "start",
        json!({
            "run": run_id,
            "ranks": world.size(),
            "pid": std::process::id(),
            "world_learners": engine.world_layout(),
            "config": cfg,
            "devices": dev_names,
            "learners": engine.layout(),
            "sync": { "name": sync_name, "settings": sync_settings.to_json() },
            "parameters": engine.graph().num_params(),
            "memory": engine.footprint(),
            "loss_read": engine.loss_read(),
            "samples_per_epoch": per_epoch,
            // The training batches this rank's pipeline prepares: of every `period`, `from..to`.
            "data_share": share.map(|s| json!({ "period": s.period, "from": s.from, "to": s.to })),
            // What loading left out (folder data: bad images skipped, files ignored, ...).
            "data_notes": data.train.notes().iter().chain(data.test.notes()).collect::<Vec<_>>(),
        }),
    )
}

/// The synchroniser's notes on its settings ([`Synchroniser::notes`]: SMA's stable range of
/// rates), said when the learner count differs from the one they were last said for (with
/// the tuner: once it has settled).
fn sync_notes<B: Backend>(engine: &Engine<B>, noted: &mut usize, reporter: &mut Reporter) -> Result<(), CliError> {
    let k = engine.world_learners();
    if k == *noted {
        return Ok(());
    }
    *noted = k;
    for n in engine.synchroniser_notes() {
        if n.warning {
            reporter.warn(&format!("warning: {}", n.text));
        } else {
            reporter.say(&n.text);
        }
        reporter.record(
            "sync_note",
            json!({ "iteration": engine.iteration(), "learners": k, "warning": n.warning, "text": n.text }),
        )?;
    }
    Ok(())
}

/// Training images, loss and time since the last evaluation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Window {
    loss: f64,
    correct: f64,
    images: usize,
    seconds: f64,
    /// Images `loss` and `correct` cover: fewer than `images` while losses are read one
    /// iteration late ([`LossRead::Lagged`]). None in a checkpoint written before losses
    /// could lag (then the same as `images`).
    #[serde(default)]
    loss_images: Option<usize>,
}

impl Window {
    /// Counts iteration `rec`, which took `seconds` (and the losses it carries, which may be
    /// of the iteration before).
    pub fn add(&mut self, rec: &IterationRecord, seconds: f64) {
        *self.loss_images.get_or_insert(self.images) += rec.loss_images;
        self.loss += rec.loss * rec.loss_images as f64;
        self.correct += rec.accuracy * rec.loss_images as f64;
        self.images += rec.images;
        self.seconds += seconds;
    }

    /// Counts losses read late ([`Engine::flush_losses`]).
    pub fn add_losses(&mut self, late: &LossRecord) {
        *self.loss_images.get_or_insert(self.images) += late.images;
        self.loss += late.loss * late.images as f64;
        self.correct += late.accuracy * late.images as f64;
    }

    /// Mean training loss and accuracy over the window's images whose losses were read.
    fn means(&self) -> (f64, f64) {
        let n = self.loss_images.unwrap_or(self.images).max(1) as f64;
        (self.loss / n, self.correct / n)
    }
}

/// What one evaluation of the central model needs besides the engine: the test set, the
/// batch-norm recalibration stream (when configured), the training window since the last
/// evaluation, and the training clock (recalibration counts as training time).
pub struct Evaluation<'a> {
    /// The test set.
    pub test: &'a mut TestSet,
    /// Batches per recalibration and their stream, when batch-norm statistics are
    /// recalibrated on the central model before each evaluation.
    pub calibration: Option<&'a mut (usize, PipelineSource)>,
    /// Training seconds so far (recalibration is added).
    pub train_seconds: &'a mut f64,
    /// When this process started the run, and the wall seconds before it (a resumed run):
    /// the line's wall time is taken when the evaluation ends.
    pub wall: (Instant, f64),
}

/// Evaluates the central model after iteration `rec` (recalibrating its batch-norm
/// statistics first when configured) and returns the line a run reports, with the training
/// figures of `window` (the iterations since the last evaluation). What `crossbow train` and
/// every configuration of `crossbow explore` evaluate with.
pub fn evaluate_central<B: Backend>(
    engine: &mut Engine<B>,
    rec: &IterationRecord,
    window: Window,
    ev: Evaluation<'_>,
) -> Result<EvalLine, CliError> {
    if let Some((n, cal)) = ev.calibration {
        let t0 = Instant::now();
        let batches = (0..*n).map(|_| cal.next_batch()).collect::<Result<Vec<_>, _>>()?;
        engine.recalibrate(batches)?;
        *ev.train_seconds += t0.elapsed().as_secs_f64();
    }
    let result = engine.evaluate(ev.test)?;
    let w = window;
    let (train_loss, train_accuracy) = w.means();
    Ok(EvalLine {
        iteration: rec.iteration,
        epoch: rec.epoch,
        train_seconds: *ev.train_seconds,
        wall_seconds: ev.wall.0.elapsed().as_secs_f64() + ev.wall.1,
        lr: rec.lr,
        train_loss,
        train_accuracy,
        test_loss: result.loss,
        test_accuracy: result.accuracy,
        images_per_sec: w.images as f64 / w.seconds.max(1e-9),
        learners: engine.layout(),
        diagnostics: None,
    })
}

/// The divergence watch: a NaN or exploded loss (more than [`EXPLODED_LOSS_FACTOR`] times
/// the first iteration's, or ln(classes) if larger), or a non-finite central model.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DivergenceWatch {
    /// The first iteration's loss (the scale an exploded loss is measured against).
    pub first_loss: Option<f64>,
}

impl DivergenceWatch {
    /// Why the run diverged at `rec`, if it did.
    pub fn check<B: Backend>(
        &mut self,
        engine: &Engine<B>,
        rec: &IterationRecord,
        classes: usize,
    ) -> Result<Option<String>, CliError> {
        // (No loss read yet: the first iteration with losses read one iteration late.)
        if rec.loss_images > 0 {
            let first = *self.first_loss.get_or_insert(rec.loss);
            let limit = EXPLODED_LOSS_FACTOR * first.max((classes.max(2) as f64).ln());
            // With several ranks every rank must decide alike: the mean loss over all ranks'
            // learners (the same number on every rank) stands for the per-learner losses.
            let losses = if engine.world().size() > 1 {
                vec![(format!("{} ranks", engine.world().size()), 0, rec.loss)]
            } else {
                engine.learner_losses()
            };
            for (dev, id, loss) in losses {
                if loss.is_nan() || loss > limit {
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

/// The state of a training run between iterations: data streams, the evaluation schedule,
/// the clock and what the evaluations found.
struct Run {
    source: PipelineSource,
    /// The batches of every iteration this rank's pipeline prepares (none: all of them).
    share: Option<Share>,
    test: TestSet,
    /// Batch-norm recalibration: batches per evaluation and their own stream (another seed,
    /// so the training batches are the same whichever statistics evaluation uses).
    calibration: Option<(usize, PipelineSource)>,
    per_epoch: usize,
    epochs: f64,
    target: Option<f64>,
    eval_every: f64,
    eval_every_iterations: Option<u64>,
    next_eval: f64,
    wall: Instant,
    /// Wall seconds before this process (a resumed run).
    wall_before: f64,
    /// Training time: iterations, and batch-norm recalibration for evaluation.
    train_secs: f64,
    /// Of that, waiting for training batches.
    input_wait_secs: f64,
    /// The last training loss read (what the progress line shows).
    shown_loss: f64,
    window: Window,
    evals: Vec<EvalLine>,
    best: f64,
    /// Training seconds and epochs when the target was first reached.
    reached: Option<(f64, f64)>,
    /// Seconds of each iteration's all-reduce between ranks (several processes only).
    rank_allreduce: Vec<f64>,
    /// `--diagnostics`: what they keep between evaluations.
    diagnostics: Option<crate::diagnostics::Tracker>,
    /// A streamed training set, and how many bad files a warning has reported so far.
    streamed: Option<(Arc<Dataset>, usize)>,
}

impl Run {
    fn new<B: Backend>(cfg: &TrainConfig, data: &Data, engine: &Engine<B>) -> Result<Self, CliError> {
        let n_dev = engine.devices().len();
        // Every rank draws the whole iteration's batches (and keeps its own).
        let max_k = match cfg.learners_per_device {
            LearnersPerDevice::Auto => cfg.max_learners,
            LearnersPerDevice::Fixed(m) => m,
        } * n_dev
            * engine.world().size();
        // With several ranks and a fixed number of learners, each rank's pipeline prepares
        // only its learners' batches of every iteration (the tuner may change the counts, so
        // with it every rank draws every batch and keeps its own).
        let share = match cfg.learners_per_device {
            LearnersPerDevice::Fixed(_) if engine.world().size() > 1 => {
                let from = engine.learner_offset() as u64;
                Some(Share { period: engine.world_learners() as u64, from, to: from + engine.learners() as u64 })
            }
            _ => None,
        };
        let prefetch = if share.is_some() { 2 * engine.learners() } else { 2 * max_k };
        let source =
            PipelineSource { pipeline: pipeline_for(cfg, data, prefetch, cfg.seed, Cursor::default(), share)? };
        let test = TestSet { dataset: Arc::clone(&data.test), normalize: source.pipeline.normalize().clone() };
        let calibration = match cfg.bn_eval {
            BnEval::Recalibrate(n) if engine.graph().stats_len > 0 => {
                Some((n, PipelineSource { pipeline: calibration_pipeline(cfg, data, n, Cursor::default())? }))
            }
            _ => None,
        };
        let per_epoch = source.samples_per_epoch();
        Ok(Run {
            source,
            share,
            test,
            calibration,
            per_epoch,
            epochs: cfg.epochs,
            target: cfg.target_accuracy,
            eval_every: cfg.eval_every,
            eval_every_iterations: cfg.eval_every_iterations,
            next_eval: cfg.eval_every,
            wall: Instant::now(),
            wall_before: 0.0,
            train_secs: 0.0,
            input_wait_secs: 0.0,
            shown_loss: 0.0,
            window: Window::default(),
            evals: vec![],
            best: 0.0,
            reached: None,
            rank_allreduce: vec![],
            diagnostics: cfg.diagnostics.then(crate::diagnostics::Tracker::default),
            streamed: data.train.is_streamed().then(|| {
                let known = data.train.streaming_report().map_or(0, |r| r.bad_images);
                (Arc::clone(&data.train), known)
            }),
        })
    }

    /// The run's counters, evaluations and data positions, for a checkpoint.
    fn save(&self) -> Value {
        json!({
            "train_cursor": self.source.pipeline.cursor(),
            "calibration_cursor": self.calibration.as_ref().map(|(_, c)| c.pipeline.cursor()),
            "next_eval": self.next_eval,
            "train_seconds": self.train_secs,
            "input_wait_seconds": self.input_wait_secs,
            "wall_seconds": self.wall.elapsed().as_secs_f64() + self.wall_before,
            "window": self.window,
            "evaluations": self.evals,
            "best": self.best,
            "reached": self.reached,
        })
    }

    /// Continues from what [`Run::save`] wrote: the data streams restart at their saved
    /// positions (the same batches as if they had not stopped).
    fn restore(&mut self, cfg: &TrainConfig, data: &Data, v: &Value) -> Result<(), CliError> {
        #[derive(Deserialize)]
        struct Saved {
            train_cursor: Cursor,
            calibration_cursor: Option<Cursor>,
            next_eval: f64,
            train_seconds: f64,
            // Absent from checkpoints of earlier versions.
            #[serde(default)]
            input_wait_seconds: f64,
            wall_seconds: f64,
            window: Window,
            evaluations: Vec<EvalLine>,
            best: f64,
            reached: Option<(f64, f64)>,
        }
        let s: Saved = serde_json::from_value(v.clone())
            .map_err(|e| CliError::usage(format!("checkpoint: the run's state is unreadable: {e}")))?;
        let prefetch = self.source.pipeline.batches_per_epoch().min(64) as usize;
        self.source = PipelineSource {
            pipeline: pipeline_for(cfg, data, prefetch.max(4), cfg.seed, s.train_cursor, self.share)?,
        };
        if let Some((n, cal)) = self.calibration.as_mut() {
            *cal = PipelineSource {
                pipeline: calibration_pipeline(cfg, data, *n, s.calibration_cursor.unwrap_or_default())?,
            };
        }
        self.next_eval = s.next_eval;
        self.train_secs = s.train_seconds;
        self.input_wait_secs = s.input_wait_seconds;
        self.wall_before = s.wall_seconds;
        self.wall = Instant::now();
        self.window = s.window;
        self.evals = s.evaluations;
        self.best = s.best;
        self.reached = s.reached;
        Ok(())
    }

    fn epoch<B: Backend>(&self, engine: &Engine<B>) -> f64 {
        engine.samples() as f64 / self.per_epoch as f64
    }

    /// The epoch limit is reached, or the target.
    fn finished<B: Backend>(&self, engine: &Engine<B>) -> bool {
        let next = (engine.world_learners() * engine.config().batch_size) as u64;
        crate::limits::epoch_limit_reached(engine.samples(), next, self.per_epoch, self.epochs)
            || self.reached.is_some()
    }

    /// One iteration with a batch per learner; its time counts as training time.
    fn step<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        reporter: &mut Reporter,
    ) -> Result<IterationRecord, StepError> {
        let t0 = Instant::now();
        // Every rank draws the iteration's batches of all ranks in the global learner order and
        // keeps its own slice, so each learner trains on the batch it would have had in one
        // process with all the learners.
        engine.sync_layout().map_err(|e| StepError::Other(e.to_string()))?;
        let (offset, mine, all) = (engine.learner_offset(), engine.learners(), engine.world_learners());
        let mut batches = Vec::with_capacity(mine);
        let waiting = Instant::now();
        match self.share {
            // The pipeline prepares only this rank's slice.
            Some(s) => {
                if (s.period, s.from, s.to) != (all as u64, offset as u64, (offset + mine) as u64) {
                    return Err(StepError::Other(format!(
                        "the learners changed ({mine} of {all} from {offset}) while the data pipeline prepares batches {}..{} of every {}",
                        s.from, s.to, s.period
                    )));
                }
                for _ in 0..mine {
                    batches.push(self.source.next_batch().map_err(|e| StepError::Other(e.to_string()))?);
                }
            }
            None => {
                for i in 0..all {
                    let b = self.source.next_batch().map_err(|e| StepError::Other(e.to_string()))?;
                    if (offset..offset + mine).contains(&i) {
                        batches.push(b);
                    }
                }
            }
        }
        self.input_wait_secs += waiting.elapsed().as_secs_f64();
        if let Some(d) = self.diagnostics.as_mut() {
            d.before_step(engine).map_err(|e| StepError::Other(e.to_string()))?;
        }
        let rec = match engine.step(batches, self.per_epoch) {
            Ok(r) => r,
            Err(ReplicaError::Diverged(why)) => return Err(StepError::Diverged(why)),
            Err(e) => return Err(StepError::Other(e.to_string())),
        };
        let secs = t0.elapsed().as_secs_f64();
        self.train_secs += secs;
        self.window.add(&rec, secs);
        if engine.world().size() > 1 {
            self.rank_allreduce.push(rec.rank_allreduce_seconds);
        }
        if rec.loss_images > 0 {
            self.shown_loss = rec.loss;
        }
        self.warn_bad_files(reporter);
        reporter.progress(rec.epoch, rec.images as f64 / secs.max(1e-9), self.shown_loss, &rec.learners);
        Ok(rec)
    }

    /// Streamed data: says when training meets files that no longer decode (as it happens,
    /// not only at the end): at the first, then each time their count has doubled.
    fn warn_bad_files(&mut self, reporter: &mut Reporter) {
        let Some((ds, warned)) = self.streamed.as_mut() else { return };
        let Some(r) = ds.streaming_report() else { return };
        let due = if *warned == 0 { r.bad_images > 0 } else { r.bad_images >= 2 * *warned };
        if due {
            *warned = r.bad_images;
            let first = r.first_bad.first().map_or_else(String::new, |(p, why)| format!(" (first: {p}: {why})"));
            reporter.warn(&format!(
                "warning: {} training image file(s) failed to decode while training{first}; each is replaced by the next file that decodes (the run stops if more than {}% go bad)",
                r.bad_images,
                100.0 * crossbow_data::MAX_BAD_SHARE
            ));
        }
    }

    /// Every `eval_every` epochs (or `eval_every_iterations`), and at the epoch limit.
    fn evaluation_due(&mut self, rec: &IterationRecord) -> bool {
        let done = rec.epoch >= self.epochs - 1e-9;
        let due = match self.eval_every_iterations {
            Some(n) => rec.iteration.is_multiple_of(n),
            None => rec.epoch >= self.next_eval - 1e-9,
        };
        if due || done {
            self.next_eval = crate::limits::next_evaluation(self.next_eval, rec.epoch, self.eval_every);
        }
        due || done
    }

    /// Evaluates the central model (after recalibrating its batch-norm statistics when
    /// configured, counted as training time), reports it and checks the target.
    fn evaluate<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        rec: &IterationRecord,
        reporter: &mut Reporter,
    ) -> Result<(), CliError> {
        let window = std::mem::take(&mut self.window);
        let mut line = evaluate_central(
            engine,
            rec,
            window,
            Evaluation {
                test: &mut self.test,
                calibration: self.calibration.as_mut(),
                train_seconds: &mut self.train_secs,
                wall: (self.wall, self.wall_before),
            },
        )?;
        if let Some(d) = self.diagnostics.as_mut() {
            line.diagnostics = Some(d.measure(engine, &mut self.test)?);
        }
        let ev = (line.test_accuracy, line.test_loss);
        reporter.eval(&line)?;
        self.best = self.best.max(ev.0);
        if let Some(target) = self.target
            && ev.0 >= target
            && self.reached.is_none()
        {
            self.reached = Some((self.train_secs, rec.epoch));
        }
        self.evals.push(line);
        Ok(())
    }

    fn summary<B: Backend>(&self, cfg: &TrainConfig, engine: &Engine<B>) -> Summary {
        let (sync_name, _) = engine.synchroniser();
        let world = engine.world();
        // With several ranks the job's learners (by rank), not only this rank's.
        let (devices, learners) = if world.size() > 1 {
            let local: Vec<String> = engine.devices().iter().map(|d| d.to_string()).collect();
            (vec![format!("{} ranks (this one: {})", world.size(), local.join(","))], engine.world_layout().to_vec())
        } else {
            (engine.devices().iter().map(|d| d.to_string()).collect(), engine.layout())
        };
        Summary {
            model: cfg.model.to_string(),
            dataset: cfg.dataset.to_string(),
            devices,
            learners,
            sync: sync_name.to_string(),
            target_accuracy: cfg.target_accuracy,
            reached_target: self.reached.is_some(),
            time_to_target_seconds: self.reached.map(|r| r.0),
            epochs_to_target: self.reached.map(|r| r.1),
            best_accuracy: self.best,
            final_accuracy: self.evals.last().map(|e| e.test_accuracy).unwrap_or(0.0),
            epochs: self.epoch(engine),
            iterations: engine.iteration(),
            train_seconds: self.train_secs,
            wall_seconds: self.wall.elapsed().as_secs_f64() + self.wall_before,
            images_per_sec: engine.samples() as f64 / self.train_secs.max(1e-9),
            input_wait_seconds: self.input_wait_secs,
            data_notes: [self.source.pipeline.dataset(), &self.test.dataset]
                .iter()
                .filter_map(|d| d.streaming_report().and_then(|r| r.summary(d.split())))
                .collect(),
            evaluations: self.evals.clone(),
        }
    }
}

/// The stream of batch-norm recalibration batches (its own seed, so the training batches are
/// the same whichever statistics evaluation uses).
pub fn calibration_pipeline(cfg: &TrainConfig, data: &Data, n: usize, start: Cursor) -> Result<Pipeline, CliError> {
    pipeline_for(cfg, data, n.min(8), cfg.seed ^ 0xB17_CA11B, start, None)
}

/// The normalisation `--normalize` gives for the training set `train` (the test set is
/// normalised with the same); the error names the setting.
pub fn normalize_for(cfg: &TrainConfig, train: &Dataset) -> Result<Normalize, CliError> {
    cfg.normalize.resolve(train).map_err(|e| {
        let why = match e {
            crossbow_data::DataError::InvalidConfig(why) => why,
            e => e.to_string(),
        };
        CliError::usage(format!("{} {}: {why}", cfg.name_of("normalize"), cfg.normalize))
    })
}
