//! `crossbow train`: data, engine, synchroniser and tuner wired together.

use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Dataset, LoadOptions, Normalize, Pipeline, PipelineConfig};
use crossbow_kernels::Backend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_replica::engine::{
    AutoTuner, CpuDevices, DeviceFactory, Engine, EngineConfig, IterationRecord, TrainSource,
};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, Synchroniser};
use crossbow_tensor::{DeviceSpec, Shape};
use crossbow_tuner::TunerConfig;
use serde_json::json;

use crate::config::{BnEval, LearnersPerDevice, TrainConfig};
use crate::error::CliError;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Reporter, Summary};
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
    let opts = LoadOptions { seed: cfg.seed, train_size: cfg.train_size, test_size: cfg.test_size };
    let (train, test) = crossbow_data::load(cfg.dataset, &cfg.data_dir, &opts)?;
    Ok(Data { train: Arc::new(train), test: Arc::new(test) })
}

/// The model for a dataset's image shape and classes.
pub fn build_graph(cfg: &TrainConfig, data: &Data) -> Result<Graph, CliError> {
    let [c, h, w] = data.train.image_shape();
    Ok(cfg.model.build(&Shape::new(vec![c, h, w]), data.train.num_classes())?)
}

/// The hardware a device spec resolves to.
#[derive(Clone, Debug)]
pub enum Hardware {
    /// `count` CPU devices of `threads` threads each.
    Cpu {
        /// Number of CPU devices.
        count: usize,
        /// Threads per device, shared by its learners.
        threads: usize,
    },
    /// CUDA GPUs by ordinal.
    Cuda {
        /// CUDA device ordinals, as the driver numbers them.
        ordinals: Vec<usize>,
    },
}

/// Cores of this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Resolves `--devices`; `note` receives a line saying what `auto` chose.
pub fn resolve_hardware(
    spec: &DeviceSpec,
    threads: Option<usize>,
    note: &mut dyn FnMut(String),
) -> Result<Hardware, CliError> {
    let cpu = |count: usize| Hardware::Cpu { count, threads: threads.unwrap_or_else(|| (cores() / count).max(1)) };
    match spec {
        DeviceSpec::Cpu(n) => {
            crate::preflight::check_cpu_devices(*n, threads, cores(), &crate::preflight::DeviceNames::FLAGS)
                .map_err(CliError::usage)?;
            Ok(cpu(*n))
        }
        DeviceSpec::Auto => match crate::gpu::available_gpus() {
            Ok(gpus) if !gpus.is_empty() => {
                note(format!("--devices auto: using {} CUDA GPU(s): {}", gpus.len(), crate::gpu::describe(&gpus)));
                Ok(Hardware::Cuda { ordinals: gpus })
            }
            Ok(_) | Err(_) => {
                let hw = cpu(1);
                if let Hardware::Cpu { threads, .. } = &hw {
                    note(crate::gpu::cpu_fallback_note(*threads));
                }
                Ok(hw)
            }
        },
        DeviceSpec::CudaAll => {
            let gpus = crate::gpu::available_gpus().map_err(|e| CliError::usage(format!("--devices cuda: {e}")))?;
            if gpus.is_empty() {
                return Err(CliError::usage("--devices cuda: no CUDA GPU found"));
            }
            Ok(Hardware::Cuda { ordinals: gpus })
        }
        DeviceSpec::Cuda(list) => {
            let gpus = crate::gpu::available_gpus().map_err(|e| CliError::usage(format!("--devices {spec}: {e}")))?;
            for o in list {
                if !gpus.contains(o) {
                    return Err(CliError::usage(format!(
                        "--devices {spec}: there is no cuda:{o} (this machine has {} GPU(s))",
                        gpus.len()
                    )));
                }
            }
            Ok(Hardware::Cuda { ordinals: list.clone() })
        }
    }
}

/// Trains as configured, with the synchroniser `cfg.sync_name` of `registry` (for the
/// built-in ones: [`SyncRegistry::builtin`]), printing progress through `reporter`.
pub fn train(cfg: &TrainConfig, registry: &SyncRegistry, reporter: &mut Reporter) -> Result<Summary, CliError> {
    let sync = registry.build_for(cfg)?;
    let data = load_data(cfg)?;
    let graph = build_graph(cfg, &data)?;
    let hw = resolve_hardware(&cfg.devices, cfg.threads, &mut |l| reporter.say(&l))?;
    match hw {
        Hardware::Cpu { count, threads } => {
            train_with(cfg, &data, graph, Box::new(CpuDevices { count, threads }), sync.cpu(), reporter)
        }
        Hardware::Cuda { ordinals } => crate::gpu::train_cuda(cfg, &data, graph, &ordinals, sync.gpu(), reporter),
    }
}

/// Samples per pipeline epoch for `data` at `cfg`'s batch size.
fn pipeline_for(cfg: &TrainConfig, data: &Data, prefetch: usize, seed: u64) -> Result<Pipeline, CliError> {
    let mut pc = PipelineConfig::new(cfg.batch_size, seed);
    pc.workers = cfg.workers;
    pc.prefetch = prefetch.max(4);
    Ok(Pipeline::new(Arc::clone(&data.train), pc)?)
}

/// Trains `graph` on `data` with any backend and synchroniser: what `crossbow train` runs, and
/// the library entry point for a backend of your own (for a synchroniser of your own, a
/// [`SyncRegistry`] and [`crate::main_with`] give you the whole command line instead).
pub fn train_with<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    reporter: &mut Reporter,
) -> Result<Summary, CliError> {
    crate::preflight::check_run(cfg, data, &graph, &*factory, &*sync)?;
    let mut engine = start_engine(cfg, graph, factory, sync)?;
    let mut run = Run::new(cfg, data, &engine)?;
    announce(cfg, data, &engine, run.per_epoch, reporter)?;
    let mut tuner = match cfg.learners_per_device {
        LearnersPerDevice::Auto => {
            let tc = TunerConfig {
                max_learners: cfg.max_learners,
                threshold: cfg.tuner_threshold,
                ..TunerConfig::default()
            };
            Some(AutoTuner::new(&engine, tc, true).map_err(|e| CliError::usage(e.to_string()))?)
        }
        LearnersPerDevice::Fixed(_) => None,
    };
    let mut last = None;
    while !run.finished(&engine) {
        let rec = run.step(&mut engine, reporter)?;
        if let Some(t) = tuner.as_mut() {
            for ev in t.after_step(&mut engine, &rec)? {
                reporter.say(&ev.line());
                reporter.record("tuner", json!(ev))?;
            }
        }
        if run.evaluation_due(&rec) {
            run.evaluate(&mut engine, &rec, reporter)?;
        }
        last = Some(rec);
    }
    // The final accuracy is the model's at the end of the run.
    if let Some(rec) = last.filter(|r| run.evals.last().is_none_or(|e| e.iteration != r.iteration)) {
        run.evaluate(&mut engine, &rec, reporter)?;
    }
    if let Some(note) = crate::limits::short_limit_note(cfg, engine.iteration(), engine.samples(), run.per_epoch) {
        reporter.say(&note);
    }
    let summary = run.summary(cfg, &engine);
    reporter.finish(&summary)?;
    Ok(summary)
}

/// The engine for `cfg`: one learner per device when the tuner decides, else the fixed count.
fn start_engine<B: Backend>(
    cfg: &TrainConfig,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
) -> Result<Engine<B>, CliError> {
    let initial = match cfg.learners_per_device {
        LearnersPerDevice::Auto => 1,
        LearnersPerDevice::Fixed(m) => m,
    };
    let n_dev = factory.devices().len();
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
    Ok(Engine::new(graph, ecfg, factory, sync, Box::new(HostAllReduce), &vec![initial; n_dev])?)
}

/// The two banner lines and the metrics file's `start` record.
fn announce<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &Engine<B>,
    per_epoch: usize,
    reporter: &mut Reporter,
) -> Result<(), CliError> {
    let (sync_name, sync_settings) = engine.synchroniser();
    let sync_line =
        if sync_settings.is_empty() { sync_name.to_string() } else { format!("{sync_name} ({sync_settings})") };
    let dev_names: Vec<String> = engine.devices().iter().map(|d| d.to_string()).collect();
    let n_dev = dev_names.len();
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
        LearnersPerDevice::Auto => format!("auto (starting at 1, tuner picks up to {})", cfg.max_learners),
        LearnersPerDevice::Fixed(m) => format!("{m} ({} learners in all)", m * n_dev),
    };
    reporter.say(&format!(
        "devices {} x learners {learners}, batch {} per learner, sync {sync_line}, lr {} {}, momentum {}, weight decay {}, batch-norm evaluation {}",
        dev_names.join(","),
        cfg.batch_size,
        cfg.lr,
        cfg.schedule,
        cfg.momentum,
        cfg.weight_decay,
        cfg.bn_eval,
    ));
    reporter.record(
        "start",
        json!({
            "config": cfg,
            "devices": dev_names,
            "learners": engine.layout(),
            "sync": { "name": sync_name, "settings": sync_settings.to_json() },
            "parameters": engine.graph().num_params(),
            "memory": engine.footprint(),
            "samples_per_epoch": per_epoch,
        }),
    )
}

/// Training images, loss and time since the last evaluation.
#[derive(Default)]
struct Window {
    loss: f64,
    correct: f64,
    images: usize,
    seconds: f64,
}

/// The state of a training run between iterations: data streams, the evaluation schedule,
/// the clock and what the evaluations found.
struct Run {
    source: PipelineSource,
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
    /// Training time: iterations, and batch-norm recalibration for evaluation.
    train_secs: f64,
    window: Window,
    evals: Vec<EvalLine>,
    best: f64,
    /// Training seconds and epochs when the target was first reached.
    reached: Option<(f64, f64)>,
}

impl Run {
    fn new<B: Backend>(cfg: &TrainConfig, data: &Data, engine: &Engine<B>) -> Result<Self, CliError> {
        let n_dev = engine.devices().len();
        let max_k = match cfg.learners_per_device {
            LearnersPerDevice::Auto => cfg.max_learners,
            LearnersPerDevice::Fixed(m) => m,
        } * n_dev;
        let source = PipelineSource { pipeline: pipeline_for(cfg, data, 2 * max_k, cfg.seed)? };
        let test = TestSet { dataset: Arc::clone(&data.test), normalize: source.pipeline.normalize().clone() };
        let calibration = match cfg.bn_eval {
            BnEval::Recalibrate(n) if engine.graph().stats_len > 0 => {
                Some((n, PipelineSource { pipeline: pipeline_for(cfg, data, n.min(8), cfg.seed ^ 0xB17_CA11B)? }))
            }
            _ => None,
        };
        let per_epoch = source.samples_per_epoch();
        Ok(Run {
            source,
            test,
            calibration,
            per_epoch,
            epochs: cfg.epochs,
            target: cfg.target_accuracy,
            eval_every: cfg.eval_every,
            eval_every_iterations: cfg.eval_every_iterations,
            next_eval: cfg.eval_every,
            wall: Instant::now(),
            train_secs: 0.0,
            window: Window::default(),
            evals: vec![],
            best: 0.0,
            reached: None,
        })
    }

    fn epoch<B: Backend>(&self, engine: &Engine<B>) -> f64 {
        engine.samples() as f64 / self.per_epoch as f64
    }

    /// The epoch limit is reached, or the target.
    fn finished<B: Backend>(&self, engine: &Engine<B>) -> bool {
        let next = (engine.learners() * engine.config().batch_size) as u64;
        crate::limits::epoch_limit_reached(engine.samples(), next, self.per_epoch, self.epochs)
            || self.reached.is_some()
    }

    /// One iteration with a batch per learner; its time counts as training time.
    fn step<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        reporter: &mut Reporter,
    ) -> Result<IterationRecord, CliError> {
        let t0 = Instant::now();
        let batches = (0..engine.learners()).map(|_| self.source.next_batch()).collect::<Result<Vec<_>, _>>()?;
        let rec = engine.step(batches, self.per_epoch)?;
        let secs = t0.elapsed().as_secs_f64();
        self.train_secs += secs;
        let w = &mut self.window;
        w.loss += rec.loss * rec.images as f64;
        w.correct += rec.accuracy * rec.images as f64;
        w.images += rec.images;
        w.seconds += secs;
        reporter.progress(rec.epoch, rec.images as f64 / secs.max(1e-9), rec.loss, &rec.learners);
        Ok(rec)
    }

    /// Every `eval_every` epochs (or `eval_every_iterations`), and at the epoch limit.
    fn evaluation_due(&mut self, rec: &IterationRecord) -> bool {
        let done = rec.epoch >= self.epochs - 1e-9;
        let due = match self.eval_every_iterations {
            Some(n) => rec.iteration.is_multiple_of(n),
            None => rec.epoch >= self.next_eval - 1e-9,
        };
        if due || done {
            while self.next_eval <= rec.epoch + 1e-9 {
                self.next_eval += self.eval_every;
            }
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
        if let Some((n, cal)) = self.calibration.as_mut() {
            let t0 = Instant::now();
            let batches = (0..*n).map(|_| cal.next_batch()).collect::<Result<Vec<_>, _>>()?;
            engine.recalibrate(batches)?;
            self.train_secs += t0.elapsed().as_secs_f64();
        }
        let ev = engine.evaluate(&mut self.test)?;
        let w = std::mem::take(&mut self.window);
        let line = EvalLine {
            iteration: rec.iteration,
            epoch: rec.epoch,
            train_seconds: self.train_secs,
            wall_seconds: self.wall.elapsed().as_secs_f64(),
            lr: rec.lr,
            train_loss: w.loss / w.images.max(1) as f64,
            train_accuracy: w.correct / w.images.max(1) as f64,
            test_loss: ev.loss,
            test_accuracy: ev.accuracy,
            images_per_sec: w.images as f64 / w.seconds.max(1e-9),
            learners: engine.layout(),
        };
        reporter.eval(&line)?;
        self.best = self.best.max(ev.accuracy);
        if let Some(target) = self.target
            && ev.accuracy >= target
            && self.reached.is_none()
        {
            self.reached = Some((self.train_secs, rec.epoch));
        }
        self.evals.push(line);
        Ok(())
    }

    fn summary<B: Backend>(&self, cfg: &TrainConfig, engine: &Engine<B>) -> Summary {
        let (sync_name, _) = engine.synchroniser();
        Summary {
            model: cfg.model.to_string(),
            dataset: cfg.dataset.to_string(),
            devices: engine.devices().iter().map(|d| d.to_string()).collect(),
            learners: engine.layout(),
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
            wall_seconds: self.wall.elapsed().as_secs_f64(),
            images_per_sec: engine.samples() as f64 / self.train_secs.max(1e-9),
            evaluations: self.evals.clone(),
        }
    }
}

/// Normalisation the pipeline uses for a dataset (exposed for the benchmark command).
pub fn normalize_for(d: &Dataset) -> Normalize {
    Normalize::from_dataset(d)
}
