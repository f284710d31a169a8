//! The typed way in: a [`Config`] built from typed values, and a [`Trainer`] that trains it
//! one iteration at a time or to the end.
//!
//! ```no_run
//! use crossbow_session::{Config, Learners, ModelKind, Trainer};
//!
//! let config = Config::new(ModelKind::LeNet5).learners(Learners::Fixed(2)).epochs(1.0);
//! let mut trainer = Trainer::new(config)?;
//! while let Some(step) = trainer.step()? {
//!     if step.iteration % 100 == 0 {
//!         println!("{:.3}: {:.2}%", step.epoch, 100.0 * trainer.evaluate()?.test_accuracy);
//!     }
//! }
//! let summary = trainer.finish()?;
//! # Ok::<(), crossbow_session::SessionError>(())
//! ```
//!
//! A [`Config`] holds the same settings as `crossbow train`'s flags and config files (the
//! settings table, [`crate::settings`]): the typed setters write them, [`Config::settings`]
//! sets any other, and they are validated when the trainer starts, with the same checks and
//! messages as the command line's.

use std::path::PathBuf;

use crossbow_data::DatasetKind;
use crossbow_replica::ModelKind;
use crossbow_replica::engine::IterationRecord;
use crossbow_replica::schedule::Schedule;
use crossbow_tensor::DeviceSpec;

use crate::config::{LearnersPerDevice, TrainFile};
use crate::error::SessionError;
use crate::processes::World;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Summary};
use crate::session::Session;
use crate::train::Steps;

/// How many learners each device runs: [`Learners::Auto`] lets the auto-tuner choose.
pub type Learners = LearnersPerDevice;

/// A training run's settings, from typed values (unset ones take `crossbow train`'s defaults).
pub struct Config {
    session: Session,
    settings: TrainFile,
}

impl Config {
    /// `model` on the built-in synthetic digits, on the CPU, with every other setting at its
    /// default.
    pub fn new(model: ModelKind) -> Self {
        let settings = TrainFile { model: Some(model.to_string()), ..TrainFile::default() };
        Config { session: Session::from_settings(TrainFile::default()), settings }
    }

    /// The dataset (`dir`: where its files are, for the datasets read from files; the
    /// synthetic ones are generated).
    pub fn dataset(mut self, kind: DatasetKind, dir: impl Into<PathBuf>) -> Self {
        self.settings.dataset = Some(kind.to_string());
        self.settings.data_dir = Some(dir.into());
        self
    }

    /// At most this many training and test images (the synthetic datasets: this many).
    pub fn sizes(mut self, train: usize, test: usize) -> Self {
        self.settings.train_size = Some(train);
        self.settings.test_size = Some(test);
        self
    }

    /// Learners per device.
    pub fn learners(mut self, learners: Learners) -> Self {
        self.settings.learners_per_device = Some(learners.to_string().into());
        self
    }

    /// The devices (the CPU, or CUDA GPUs).
    pub fn devices(mut self, devices: DeviceSpec) -> Self {
        self.settings.devices = Some(devices.to_string());
        self
    }

    /// The synchroniser, by its registry name (`ssgd`, `sma`, `easgd`, `ako`,
    /// `independent`, or yours: [`Config::registry`]).
    pub fn sync(mut self, name: &str) -> Self {
        self.settings.sync = Some(name.to_string());
        self
    }

    /// Images per learner per iteration.
    pub fn batch_size(mut self, b: usize) -> Self {
        self.settings.batch_size = Some(b);
        self
    }

    /// The base learning rate and its schedule.
    pub fn lr(mut self, lr: f64, schedule: Schedule) -> Self {
        self.settings.lr = Some(lr);
        self.settings.schedule = Some(schedule.to_string());
        self
    }

    /// The epoch limit.
    pub fn epochs(mut self, epochs: f64) -> Self {
        self.settings.epochs = Some(epochs);
        self
    }

    /// Stop at the first evaluation at or above this test accuracy (0..1).
    pub fn target(mut self, accuracy: f64) -> Self {
        self.settings.target_accuracy = Some(accuracy);
        self
    }

    /// The seed of initialisation, data order, augmentation and dropout.
    pub fn seed(mut self, seed: u64) -> Self {
        self.settings.seed = Some(seed);
        self
    }

    /// Write checkpoints into this folder (and let [`Trainer::save`] write one).
    pub fn checkpoint_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.settings.checkpoint_dir = Some(dir.into());
        self
    }

    /// Any other setting, as `crossbow train`'s TOML keys name them: the values set here
    /// override the typed ones.
    pub fn settings(mut self, more: TrainFile) -> Self {
        self.settings = std::mem::take(&mut self.settings).overridden_by(more);
        self
    }

    /// Trains on these datasets instead of loading them ([`Session::data`]).
    pub fn data(mut self, data: crate::Data) -> Self {
        self.session = self.session.data(data);
        self
    }

    /// The synchronisers [`Config::sync`] may name (yours among them).
    pub fn registry(mut self, registry: SyncRegistry) -> Self {
        self.session = self.session.registry(registry);
        self
    }

    /// Continue the run of this checkpoint file, or of the newest good checkpoint in this
    /// folder; the settings given change the saved ones where a resume may change them.
    pub fn resume(mut self, from: impl Into<PathBuf>) -> Self {
        self.session = self.session.resume(from);
        self
    }

    /// Every progress line goes to `f` instead of the terminal.
    pub fn on_progress(mut self, f: impl FnMut(&str) + Send + 'static) -> Self {
        self.session = self.session.on_progress(f);
        self
    }

    /// Print nothing but the summary.
    pub fn quiet(mut self, quiet: bool) -> Self {
        self.session = self.session.quiet(quiet);
        self
    }

    /// Stop cleanly on Ctrl-C and SIGTERM, as `crossbow train` does (off by default).
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.session = self.session.handle_signals(on);
        self
    }

    /// The session these settings make.
    fn into_session(self) -> Session {
        self.session.with_settings(self.settings)
    }
}

/// A started training run: [`Trainer::step`] takes one iteration (and what follows it on
/// the run's schedule: evaluations, checkpoints, the tuner, the divergence guard),
/// [`Trainer::evaluate`] and [`Trainer::save`] act now, [`Trainer::finish`] ends the run
/// (final evaluation, checkpoint and summary), [`Trainer::run`] does all of it.
pub struct Trainer {
    steps: Option<Box<dyn Steps>>,
    last: Option<IterationRecord>,
    world: World,
}

impl Trainer {
    /// Checks the settings, loads the data, starts the engine (and resumes, with
    /// [`Config::resume`]): a run ready for its first iteration.
    pub fn new(config: Config) -> Result<Trainer, SessionError> {
        config.into_session().start()
    }

    pub(crate) fn started(steps: Box<dyn Steps>, world: World) -> Trainer {
        Trainer { steps: Some(steps), last: None, world }
    }

    fn steps(&mut self) -> Result<&mut Box<dyn Steps>, SessionError> {
        self.steps.as_mut().ok_or_else(|| SessionError::run("the run has ended"))
    }

    /// One iteration; `None` once the run has reached its epoch limit or its target (then
    /// [`Trainer::finish`]). A divergence rolled back (`--on-divergence rollback`) is not an
    /// iteration: the next one after it is returned.
    pub fn step(&mut self) -> Result<Option<IterationRecord>, SessionError> {
        loop {
            let steps = self.steps()?;
            if steps.finished() {
                return Ok(None);
            }
            match steps.step() {
                Ok(Some(rec)) => {
                    self.last = Some(rec.clone());
                    return Ok(Some(rec));
                }
                Ok(None) => continue,
                Err(e) => return Err(self.failed(e)),
            }
        }
    }

    /// Evaluates the central model now (reported and recorded like the scheduled
    /// evaluations; an iteration the schedule evaluated is not evaluated again).
    pub fn evaluate(&mut self) -> Result<EvalLine, SessionError> {
        let Some(rec) = self.last.clone() else {
            return Err(SessionError::usage("evaluate: no iteration has run yet (call step first)"));
        };
        let r = self.steps()?.evaluate(&rec);
        r.map_err(|e| self.failed(e))
    }

    /// Writes a checkpoint of the run now and returns its path once it is on disk. Without
    /// a checkpoint folder ([`Config::checkpoint_dir`]) it is refused and the run goes on.
    pub fn save(&mut self) -> Result<PathBuf, SessionError> {
        match self.steps()?.save() {
            Err(e) if e.is_usage() => Err(e),
            r => r.map_err(|e| self.failed(e)),
        }
    }

    /// Ends the run: the final evaluation (unless the last iteration was evaluated), the
    /// final checkpoint, and the summary.
    pub fn finish(mut self) -> Result<Summary, SessionError> {
        let steps = self.steps.take().ok_or_else(|| SessionError::run("the run has ended"))?;
        steps.finish(self.last.take()).map_err(|e| self.failed(e))
    }

    /// Steps to the end, then [`Trainer::finish`].
    pub fn run(mut self) -> Result<Summary, SessionError> {
        while self.step()?.is_some() {}
        self.finish()
    }

    /// An error ends the run: with several ranks every other rank is stopped with it (a
    /// signal's stop excepted: the ranks agree on that one themselves).
    fn failed(&mut self, e: SessionError) -> SessionError {
        self.steps = None;
        if !matches!(e, SessionError::Interrupted { .. }) {
            self.world.stop_all(&format!("error: {e}"), e.exit_code() as u8);
        }
        e
    }
}
