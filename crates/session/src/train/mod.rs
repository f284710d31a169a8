//! `crossbow train`: data, engine, synchroniser and tuner wired together.
//!
//! The run itself is a `Trainer` (`trainer.rs`) taking one iteration at a time; each policy
//! it applies lives in its own module: the data streams and the evaluation schedule
//! (`run.rs`), the divergence guard (`guard.rs`) and the rollback (`rollback.rs`),
//! checkpoints, signals and the ranks' agreement (`saving.rs`), resuming (`restore.rs`),
//! starting the engine and the tuner (`start.rs`), loading the data (`data.rs`).

use std::path::PathBuf;
use std::sync::Arc;

use crossbow_kernels::Backend;
use crossbow_replica::checkpoint::CheckpointFile;
use crossbow_replica::engine::{DeviceFactory, IterationRecord};
use crossbow_replica::{Graph, ProcessGroup, Solo, Synchroniser};

use crate::checkpoint::{CheckpointPolicy, DivergencePolicy, Line, OnDivergence};
use crate::config::TrainConfig;
use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Reporter, Summary};
use crate::signals::Interrupt;

mod data;
mod guard;
mod restore;
mod rollback;
mod run;
mod saving;
mod start;
#[cfg(test)]
mod tests;
mod trainer;

pub use data::{Data, build_graph, load_data};
// The engine-level pieces `Branch` and the trainer share; drivers outside the crate use
// `Session`, `Trainer` or `Branch`.
pub(crate) use data::{calibration_pipeline, normalize_for};
pub(crate) use guard::DivergenceWatch;
pub(crate) use run::{Evaluation, Window, evaluate_central};
pub(crate) use start::{auto_tuner, start_engine};

pub(crate) use crate::dispatch::{Hardware, cores, resolve_hardware};

/// Trains as configured, with the synchroniser `cfg.sync_name` of `registry` (for the
/// built-in ones: [`SyncRegistry::builtin`]), printing progress through `reporter`.
pub fn train(cfg: &TrainConfig, registry: &SyncRegistry, reporter: &mut Reporter) -> Result<Summary, SessionError> {
    train_with_opts(cfg, registry, reporter, RunOptions::default())
}

/// [`train`] with checkpoints, resume, divergence handling and signals ([`RunOptions`]).
pub fn train_with_opts(
    cfg: &TrainConfig,
    registry: &SyncRegistry,
    reporter: &mut Reporter,
    opts: RunOptions,
) -> Result<Summary, SessionError> {
    let (sync, data, graph, hw) = prepare(cfg, registry, reporter, &opts)?;
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
        ) -> Result<Summary, SessionError> {
            for line in &about {
                self.reporter.say(line);
            }
            train_with_options(self.cfg, self.data, self.graph, factory, sync, self.reporter, self.opts)
        }
    }
    crate::dispatch::dispatch(&hw, sync, cfg.all_reduce, TrainJob { cfg, data: &data, graph, reporter, opts })
}

/// [`train_with_opts`] started and handed back before its first iteration: a run that owns
/// its reporter, for a caller that takes it one iteration at a time ([`crate::Trainer`]).
pub(crate) fn start(
    cfg: &TrainConfig,
    registry: &SyncRegistry,
    mut reporter: Reporter,
    opts: RunOptions,
) -> Result<Box<dyn Steps>, SessionError> {
    let (sync, data, graph, hw) = prepare(cfg, registry, &mut reporter, &opts)?;
    struct StartJob {
        cfg: Arc<TrainConfig>,
        data: Arc<Data>,
        graph: Graph,
        reporter: Reporter,
        opts: RunOptions,
    }
    impl crate::dispatch::Job for StartJob {
        type Output = Box<dyn Steps>;
        fn run<B: Backend>(
            self,
            factory: Box<dyn DeviceFactory<B>>,
            sync: Box<dyn Synchroniser<B>>,
            about: Vec<String>,
        ) -> Result<Box<dyn Steps>, SessionError> {
            for line in &about {
                self.reporter.say(line);
            }
            let rep = Rep::Owned(Box::new(self.reporter));
            Ok(Box::new(trainer::Trainer::start(self.cfg, self.data, self.graph, factory, sync, rep, self.opts)?))
        }
    }
    let job = StartJob { cfg: Arc::new(cfg.clone()), data: Arc::new(data), graph, reporter, opts };
    crate::dispatch::dispatch(&hw, sync, cfg.all_reduce, job)
}

/// What every run needs before its engine starts: the synchroniser, the data (their notes
/// said), the model and the hardware.
fn prepare(
    cfg: &TrainConfig,
    registry: &SyncRegistry,
    reporter: &mut Reporter,
    opts: &RunOptions,
) -> Result<(crate::registry::BuiltSynchroniser, Data, Graph, Hardware), SessionError> {
    let sync = registry.build_for(cfg)?;
    let data = match &opts.data {
        Some(d) => d.clone(),
        None => load_data(cfg)?,
    };
    for note in data.train.notes().iter().chain(data.test.notes()) {
        reporter.warn(&format!("warning: {}: {note}", cfg.data_dir.display()));
    }
    opts.interrupt.during_startup("loading the data")?;
    normalize_for(cfg, &data.train)?;
    let graph = build_graph(cfg, &data)?;
    let hw = resolve_hardware(&cfg.devices, cfg.threads, &mut |l| reporter.say(&l))?;
    Ok((sync, data, graph, hw))
}

/// The reporter a run writes to: its caller's, or its own (a run handed back to its caller
/// between iterations, [`start`]).
pub(crate) enum Rep<'a> {
    Borrowed(&'a mut Reporter),
    Owned(Box<Reporter>),
}

impl std::ops::Deref for Rep<'_> {
    type Target = Reporter;
    fn deref(&self) -> &Reporter {
        match self {
            Rep::Borrowed(r) => r,
            Rep::Owned(r) => r,
        }
    }
}

impl std::ops::DerefMut for Rep<'_> {
    fn deref_mut(&mut self) -> &mut Reporter {
        match self {
            Rep::Borrowed(r) => r,
            Rep::Owned(r) => r,
        }
    }
}

/// A started run, whatever its backend (what [`crate::Trainer`] drives).
pub(crate) trait Steps {
    /// The epoch limit or the target is reached.
    fn finished(&self) -> bool;
    /// One iteration and the policies after it; `None` when a divergence was rolled back.
    fn step(&mut self) -> Result<Option<IterationRecord>, SessionError>;
    /// Evaluates the central model after `rec` (reported and recorded like a scheduled one).
    fn evaluate(&mut self, rec: &IterationRecord) -> Result<EvalLine, SessionError>;
    /// Writes a checkpoint of the run now and waits until it is on disk.
    fn save(&mut self) -> Result<std::path::PathBuf, SessionError>;
    /// The final evaluation and checkpoint, and the summary.
    fn finish(self: Box<Self>, last: Option<IterationRecord>) -> Result<Summary, SessionError>;
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
) -> Result<Summary, SessionError> {
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
    /// The datasets, already loaded (`None`: loaded from the settings).
    pub data: Option<Data>,
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
            data: None,
        }
    }
}

/// [`train_with`] with checkpoints, resume, divergence handling and signals.
pub fn train_with_options<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    reporter: &mut Reporter,
    opts: RunOptions,
) -> Result<Summary, SessionError> {
    let (cfg, data) = (Arc::new(cfg.clone()), Arc::new(data.clone()));
    trainer::Trainer::start(cfg, data, graph, factory, sync, Rep::Borrowed(reporter), opts)?.run()
}
