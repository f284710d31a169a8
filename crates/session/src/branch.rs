//! A [`Branch`]: one configuration's learners on the CPU cores, fed batches from outside.
//!
//! A [`crate::Trainer`] draws its own batches. Some drivers run several configurations at
//! once from one stream (`crossbow explore` feeds every configuration the same augmented
//! samples, so each is read and decoded once): each configuration is then a branch, with its
//! own engine (its own central model), auto-tuner, divergence watch, batch-norm recalibration
//! stream and test set, stepped on the batches the driver hands it and evaluated as
//! `crossbow train` evaluates. A branch of one configuration fed the batches `crossbow train`
//! draws trains bit for bit as `crossbow train` does.
//!
//! ```no_run
//! use crossbow_replica::engine::CpuDevices;
//! use crossbow_session::{Branch, BranchStep, SyncRegistry, TrainConfig, TrainFile, load_data};
//!
//! let registry = SyncRegistry::builtin();
//! let file = TrainFile { model: Some("lenet5".into()), ..TrainFile::default() };
//! let cfg = TrainConfig::from_file_with(file, &registry)?;
//! let data = load_data(&cfg)?;
//! let cores = CpuDevices { count: 1, threads: 2 };
//! let normalize = Branch::normalize(&cfg, &data)?;
//! let mut branch = Branch::start(&cfg, &data, &registry, &cores, &normalize, None)?;
//! // ... hand it `branch.learners()` batches per step:
//! # let (batch, per_epoch): (Vec<crossbow_session::branch::OwnedBatch>, usize) = (vec![], 1);
//! if let BranchStep::Trained { record, .. } = branch.step(batch, per_epoch)? {
//!     let line = branch.evaluate(&record, (std::time::Instant::now(), 0.0))?;
//!     println!("{:.2}%", 100.0 * line.test_accuracy);
//! }
//! # Ok::<(), crossbow_session::SessionError>(())
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Cursor, Normalize};
use crossbow_kernels::CpuBackend;
use crossbow_replica::ReplicaError;
use crossbow_replica::checkpoint::CheckpointFile;
use crossbow_replica::engine::{
    AutoTuner, CpuDevices, Engine, EngineSnapshot, IterationRecord, TrainBatch, TuningEvent,
};
use serde::{Deserialize, Serialize};

use crate::config::{BnEval, LearnersPerDevice, TrainConfig};
use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::report::EvalLine;
use crate::source::{PipelineSource, TestSet};
use crate::train::{
    Data, DivergenceWatch, Evaluation, Window, auto_tuner, build_graph, calibration_pipeline, evaluate_central,
    normalize_for, start_engine,
};

/// One configuration's learners, engine, tuner and evaluation, fed batches from outside.
pub struct Branch {
    engine: Engine<CpuBackend>,
    tuner: Option<AutoTuner>,
    /// Batches per recalibration and their stream.
    calibration: Option<(usize, PipelineSource)>,
    test: TestSet,
    window: Window,
    watch: DivergenceWatch,
    train_secs: f64,
    calibration_samples: u64,
    batch_size: usize,
    max_learners: usize,
    classes: usize,
}

/// What one step of a branch did.
#[derive(Debug)]
pub enum BranchStep {
    /// It trained: the iteration's record and the auto-tuner's decisions worth logging.
    Trained {
        /// The iteration.
        record: IterationRecord,
        /// The tuner's changes, failures and first "settled" per device.
        tuning: Vec<TuningEvent>,
    },
    /// It diverged (why): a NaN or exploded loss, or a non-finite central model, as
    /// `crossbow train`'s divergence guard sees it. The branch should be dropped.
    Diverged(String),
}

/// What a stopped driver saves of a branch besides its engine ([`Branch::save`]), to
/// continue it exactly ([`Branch::resume`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BranchState {
    /// Learners per core group when saved.
    layout: Vec<usize>,
    window: Window,
    watch: DivergenceWatch,
    train_secs: f64,
    calibration_samples: u64,
    /// The recalibration stream's position.
    calibration_cursor: Option<Cursor>,
    /// The auto-tuner's state.
    tuner: Option<serde_json::Value>,
}

/// One learner's batch assembled by the driver.
#[derive(Clone, Debug, Default)]
pub struct OwnedBatch {
    /// Images, NCHW, normalised.
    pub images: Vec<f32>,
    /// One-hot labels.
    pub labels: Vec<f32>,
}

impl TrainBatch for OwnedBatch {
    fn images(&self) -> &[f32] {
        &self.images
    }
    fn labels(&self) -> &[f32] {
        &self.labels
    }
}

impl Branch {
    /// Checks that `cfg` fits on `cores` (memory, batch size against the data), before any
    /// engine is allocated: what `crossbow train`'s preflight refuses.
    pub fn check(
        cfg: &TrainConfig,
        data: &Data,
        registry: &SyncRegistry,
        cores: &CpuDevices,
    ) -> Result<(), SessionError> {
        Self::no_global_batch(cfg)?;
        let sync = registry.build_for(cfg)?.cpu();
        let graph = build_graph(cfg, data)?;
        crate::preflight::check_run(cfg, data, &graph, cores, &*sync).map(|_| ())
    }

    /// An exploration's driver hands every learner a batch of `--batch-size` images: a global
    /// batch split among the learners is `crossbow train`'s alone.
    fn no_global_batch(cfg: &TrainConfig) -> Result<(), SessionError> {
        match cfg.global_batch_size {
            Some(n) => Err(SessionError::usage(format!(
                "{} {n}: crossbow explore gives every learner a batch of --batch-size images; a global batch split among the learners is crossbow train's (leave it out here)",
                cfg.name_of("global-batch-size")
            ))),
            None => Ok(()),
        }
    }

    /// The normalisation `cfg` trains with on `data` (the training set's per-channel
    /// statistics, or none): what the driver's stream and the test set use.
    pub fn normalize(cfg: &TrainConfig, data: &Data) -> Result<Normalize, SessionError> {
        normalize_for(cfg, &data.train)
    }

    /// Starts `cfg` on `cores`: `layout[d]` learners on core group `d` (by default one per
    /// device with `--learners-per-device auto`, else the fixed count), its tuner and its
    /// recalibration stream. The test set is normalised with `normalize`, the driver's
    /// stream's ([`Branch::normalize`]).
    pub fn start(
        cfg: &TrainConfig,
        data: &Data,
        registry: &SyncRegistry,
        cores: &CpuDevices,
        normalize: &Normalize,
        layout: Option<&[usize]>,
    ) -> Result<Branch, SessionError> {
        Self::no_global_batch(cfg)?;
        let sync = registry.build_for(cfg)?.cpu();
        let graph = build_graph(cfg, data)?;
        let factory = Box::new(CpuDevices { count: cores.count, threads: cores.threads });
        let layout = match (layout, cfg.learners_per_device) {
            (Some(l), _) => l.to_vec(),
            (None, LearnersPerDevice::Auto) => vec![1; cores.count],
            (None, LearnersPerDevice::Fixed(m)) => vec![m; cores.count],
        };
        let engine = start_engine(cfg, graph, factory, sync, &layout)?;
        let tuner = auto_tuner(cfg, &engine, data.train.len())?;
        let calibration = match cfg.bn_eval {
            BnEval::Recalibrate(n) if engine.graph().stats_len > 0 => Some((
                n,
                PipelineSource { pipeline: calibration_pipeline(cfg, data, cfg.batch_size, n, Cursor::default())? },
            )),
            _ => None,
        };
        Ok(Branch {
            engine,
            tuner,
            calibration,
            test: TestSet { dataset: Arc::clone(&data.test), normalize: normalize.clone() },
            window: Window::default(),
            watch: DivergenceWatch::default(),
            train_secs: 0.0,
            calibration_samples: 0,
            batch_size: cfg.batch_size,
            max_learners: cfg.max_learners,
            classes: data.train.num_classes(),
        })
    }

    /// Continues a branch [`Branch::save`] saved: its engine from `engine_file` (with the
    /// learner layout it had), tuner, recalibration stream, window and clocks.
    pub fn resume(
        cfg: &TrainConfig,
        data: &Data,
        registry: &SyncRegistry,
        cores: &CpuDevices,
        normalize: &Normalize,
        (saved, engine_file): (&BranchState, &Path),
    ) -> Result<Branch, SessionError> {
        let mut b = Self::start(cfg, data, registry, cores, normalize, Some(&saved.layout))?;
        let f = CheckpointFile::read(engine_file).map_err(|e| SessionError::usage(format!("--resume: {e}")))?;
        b.engine.restore(&EngineSnapshot::from_checkpoint(&f, engine_file)?)?;
        if let (Some(t), Some(v)) = (b.tuner.as_mut(), &saved.tuner) {
            t.restore(v)?;
        }
        if let (Some((n, cal)), Some(cursor)) = (b.calibration.as_mut(), saved.calibration_cursor) {
            *cal = PipelineSource { pipeline: calibration_pipeline(cfg, data, cfg.batch_size, *n, cursor)? };
        }
        b.window = saved.window.clone();
        b.watch = saved.watch.clone();
        b.train_secs = saved.train_secs;
        b.calibration_samples = saved.calibration_samples;
        Ok(b)
    }

    /// Writes the engine to `engine_file` (atomically, with `meta` as its header) and returns
    /// the rest of what [`Branch::resume`] needs.
    pub fn save(&self, engine_file: &Path, meta: serde_json::Value) -> Result<BranchState, SessionError> {
        let mut file = CheckpointFile::new(meta);
        self.engine.snapshot()?.to_checkpoint(&mut file)?;
        file.write_atomic(engine_file).map_err(|e| SessionError::run(e.to_string()))?;
        Ok(BranchState {
            layout: self.engine.layout(),
            window: self.window.clone(),
            watch: self.watch.clone(),
            train_secs: self.train_secs,
            calibration_samples: self.calibration_samples,
            calibration_cursor: self.calibration.as_ref().map(|(_, c)| c.pipeline.cursor()),
            tuner: self.tuner.as_ref().map(|t| t.save()).transpose()?,
        })
    }

    /// Learners in all: the batches one [`Branch::step`] takes.
    pub fn learners(&self) -> usize {
        self.engine.learners()
    }

    /// Learners per core group.
    pub fn layout(&self) -> Vec<usize> {
        self.engine.layout()
    }

    /// Samples trained on.
    pub fn samples(&self) -> u64 {
        self.engine.samples()
    }

    /// Iterations taken.
    pub fn iteration(&self) -> u64 {
        self.engine.iteration()
    }

    /// Whether the auto-tuner chooses its learners (`--learners-per-device auto`).
    pub fn auto_tuned(&self) -> bool {
        self.tuner.is_some()
    }

    /// Training seconds so far (steps and recalibration).
    pub fn train_seconds(&self) -> f64 {
        self.train_secs
    }

    /// Samples drawn for batch-norm recalibration so far.
    pub fn calibration_samples(&self) -> u64 {
        self.calibration_samples
    }

    /// One iteration on `batches`, one per learner ([`Branch::learners`]); an epoch is
    /// `per_epoch` samples. Then the divergence watch and the auto-tuner.
    pub fn step<T: TrainBatch>(&mut self, batches: Vec<T>, per_epoch: usize) -> Result<BranchStep, SessionError> {
        let t0 = Instant::now();
        let rec = match self.engine.step(batches, per_epoch) {
            Ok(r) => r,
            Err(ReplicaError::Diverged(why)) => return Ok(BranchStep::Diverged(why)),
            Err(e) => return Err(e.into()),
        };
        if let Some(why) = self.watch.check(&self.engine, &rec, self.classes)? {
            return Ok(BranchStep::Diverged(why));
        }
        let secs = t0.elapsed().as_secs_f64();
        self.train_secs += secs;
        self.window.add(&rec, secs);
        let tuning = match self.tuner.as_mut() {
            Some(t) => t.after_step(&mut self.engine, &rec)?,
            None => vec![],
        };
        Ok(BranchStep::Trained { record: rec, tuning })
    }

    /// Evaluates the central model after iteration `rec` as `crossbow train` does
    /// (recalibrating batch-norm statistics first when configured), with the training
    /// figures since the last evaluation; `wall` is when the driver started and its wall
    /// seconds before (a resumed driver).
    pub fn evaluate(&mut self, rec: &IterationRecord, wall: (Instant, f64)) -> Result<EvalLine, SessionError> {
        let window = std::mem::take(&mut self.window);
        let line = evaluate_central(
            &mut self.engine,
            rec,
            window,
            Evaluation {
                test: &mut self.test,
                calibration: self.calibration.as_mut(),
                train_seconds: &mut self.train_secs,
                wall,
            },
        )?;
        if let Some((n, _)) = &self.calibration {
            self.calibration_samples += (*n * self.batch_size) as u64;
        }
        Ok(line)
    }

    /// Adds a learner to the core group with the fewest, if the branch has a fixed learner
    /// count, stays within `--max-learners` and the group's memory budget. Whether it did.
    pub fn try_add_learner(&mut self) -> Result<bool, SessionError> {
        if self.tuner.is_some() {
            return Ok(false); // the auto-tuner decides its learners
        }
        let layout = self.engine.layout();
        let Some((d, &k)) = layout.iter().enumerate().min_by_key(|(_, k)| **k) else { return Ok(false) };
        let fp = self.engine.footprint();
        let fits = self
            .engine
            .memory_budget(d)
            .is_none_or(|b| fp.fixed_bytes_per_device + fp.bytes_per_learner * (k as u64 + 1) <= b);
        if k >= self.max_learners || !fits {
            return Ok(false);
        }
        self.engine.add_learner(d)?;
        Ok(true)
    }
}
