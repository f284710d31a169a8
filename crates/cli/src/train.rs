//! `crossbow train`: data, engine, synchroniser and tuner wired together.

use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Dataset, LoadOptions, Normalize, Pipeline, PipelineConfig};
use crossbow_kernels::Backend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_replica::engine::{CpuDevices, DeviceFactory, Engine, EngineConfig, TrainSource};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, Synchroniser};
use crossbow_tensor::{DeviceSpec, Shape};
use crossbow_tuner::{Decision, MemoryFigures, Sample, Tuner, TunerConfig};
use serde_json::json;

use crate::config::{BnEval, LearnersPerDevice, TrainConfig};
use crate::error::CliError;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Reporter, Summary};
use crate::source::{PipelineSource, TestSet};

/// The loaded training and test sets.
pub struct Data {
    pub train: Arc<Dataset>,
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
    Cpu { count: usize, threads: usize },
    /// CUDA GPUs by ordinal.
    Cuda { ordinals: Vec<usize> },
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
        DeviceSpec::Cpu(n) => Ok(cpu(*n)),
        DeviceSpec::Auto => match crate::gpu::available_gpus() {
            Ok(gpus) if !gpus.is_empty() => {
                note(format!("--devices auto: using {} CUDA GPU(s): {}", gpus.len(), crate::gpu::describe(&gpus)));
                Ok(Hardware::Cuda { ordinals: gpus })
            }
            Ok(_) | Err(_) => {
                let why = match crate::gpu::available_gpus() {
                    Err(e) => e.to_string(),
                    Ok(_) => "no CUDA GPU found".into(),
                };
                let hw = cpu(1);
                if let Hardware::Cpu { threads, .. } = &hw {
                    note(format!("--devices auto: {why}; using the CPU (cpu:1, {threads} threads)"));
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
    let devices = factory.devices();
    let n_dev = devices.len();
    let (initial, auto) = match cfg.learners_per_device {
        LearnersPerDevice::Auto => (1, true),
        LearnersPerDevice::Fixed(m) => (m, false),
    };
    let budgets: Vec<Option<u64>> = (0..n_dev).map(|d| factory.memory_budget(d)).collect();
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
    let mut engine = Engine::new(graph, ecfg, factory, sync, Box::new(HostAllReduce), &vec![initial; n_dev])?;
    let max_k = if auto { cfg.max_learners } else { initial } * n_dev;
    let mut source = PipelineSource { pipeline: pipeline_for(cfg, data, 2 * max_k, cfg.seed)? };
    let mut test = TestSet { dataset: Arc::clone(&data.test), normalize: source.pipeline.normalize().clone() };
    // Batch-norm recalibration draws its batches from a stream of its own (another seed), so
    // the training batches are the same whichever statistics evaluation uses.
    let mut calibration = match cfg.bn_eval {
        BnEval::Recalibrate(n) if engine.graph().stats_len > 0 => {
            Some((n, PipelineSource { pipeline: pipeline_for(cfg, data, n.min(8), cfg.seed ^ 0xB17_CA11B)? }))
        }
        _ => None,
    };
    let per_epoch = source.samples_per_epoch();
    let fp = engine.footprint();
    let (sync_name, sync_settings) = engine.synchroniser();
    let (sync_name, sync_settings) = (sync_name.to_string(), sync_settings);
    let sync_line = if sync_settings.is_empty() { sync_name.clone() } else { format!("{sync_name} ({sync_settings})") };
    let dev_names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();

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
    reporter.say(&format!(
        "devices {} x learners {} ({}), batch {} per learner, sync {}, lr {} {}, momentum {}, weight decay {}",
        dev_names.join(","),
        if auto { "auto".to_string() } else { initial.to_string() },
        if auto {
            format!("starting at 1, tuner picks up to {}", cfg.max_learners)
        } else {
            format!("{} learners in all", initial * n_dev)
        },
        cfg.batch_size,
        sync_line,
        cfg.lr,
        cfg.schedule,
        cfg.momentum,
        cfg.weight_decay
    ));
    reporter.record(
        "start",
        json!({
            "config": cfg,
            "devices": dev_names,
            "learners": engine.layout(),
            "sync": { "name": sync_name, "settings": sync_settings.to_json() },
            "parameters": engine.graph().num_params(),
            "memory": fp,
            "samples_per_epoch": per_epoch,
        }),
    )?;

    let mut tuner = if auto {
        let tc =
            TunerConfig { max_learners: cfg.max_learners, threshold: cfg.tuner_threshold, ..TunerConfig::default() };
        let mut t = Tuner::new(tc, n_dev).map_err(|e| CliError::usage(format!("tuner: {e}")))?;
        for (d, b) in budgets.iter().enumerate() {
            let budget = b.unwrap_or_else(|| cpu_memory_budget(n_dev));
            t.set_memory(d, MemoryFigures::new(fp.bytes_per_learner, fp.fixed_bytes_per_device, budget))
                .map_err(|e| CliError::run(format!("tuner: {e}")))?;
        }
        Some(t)
    } else {
        None
    };

    let mut last_logged: Vec<Option<Decision>> = vec![None; n_dev];
    let wall = Instant::now();
    let mut train_secs = 0.0;
    let mut next_eval = cfg.eval_every;
    let (mut win_loss, mut win_correct, mut win_images, mut win_secs) = (0.0f64, 0.0f64, 0usize, 0.0f64);
    let mut evals: Vec<EvalLine> = vec![];
    let mut best: f64 = 0.0;
    let mut reached: Option<(f64, f64)> = None;
    let mut last_eval_iter = u64::MAX;
    loop {
        let epoch_now = engine.samples() as f64 / per_epoch as f64;
        if epoch_now >= cfg.epochs - 1e-9 || reached.is_some() {
            break;
        }
        let k = engine.learners();
        let t0 = Instant::now();
        let batches = (0..k).map(|_| source.next_batch()).collect::<Result<Vec<_>, _>>()?;
        let rec = engine.step(batches, per_epoch)?;
        let secs = t0.elapsed().as_secs_f64();
        train_secs += secs;
        win_loss += rec.loss * rec.images as f64;
        win_correct += rec.accuracy * rec.images as f64;
        win_images += rec.images;
        win_secs += secs;
        reporter.progress(rec.epoch, rec.images as f64 / secs.max(1e-9), rec.loss, &rec.learners);

        if let Some(t) = tuner.as_mut() {
            let layout = rec.learners.clone();
            for (d, &m) in layout.iter().enumerate() {
                let sample = Sample::new(m, (m * cfg.batch_size) as u64, secs);
                let report = t.observe(d, &sample).map_err(|e| CliError::run(format!("tuner: {e}")))?;
                let applied = match report.decision {
                    Decision::AddLearner => Some(engine.add_learner(d)),
                    Decision::RemoveLearner => Some(engine.remove_learner(d)),
                    Decision::Keep | Decision::Settled => None,
                };
                if let Some(res) = applied
                    && let Err(e) = res
                {
                    reporter.say(&format!("tuner: {:?} on {}: could not apply ({e})", report.decision, devices[d]));
                    t.change_failed(d).map_err(|e| CliError::run(format!("tuner: {e}")))?;
                }
                let repeat_settled = report.decision == Decision::Settled && last_logged[d] == Some(Decision::Settled);
                if report.decision != Decision::Keep && !repeat_settled {
                    last_logged[d] = Some(report.decision);
                    reporter.say(&format!("tuner {}: {report}", devices[d]));
                    reporter.record(
                        "tuner",
                        json!({ "iteration": rec.iteration, "epoch": rec.epoch, "device": devices[d].to_string(), "report": report, "learners_after": engine.layout() }),
                    )?;
                }
            }
        }

        let done = rec.epoch >= cfg.epochs - 1e-9;
        let due = match cfg.eval_every_iterations {
            Some(n) => rec.iteration.is_multiple_of(n),
            None => rec.epoch >= next_eval - 1e-9,
        };
        if due || done {
            while next_eval <= rec.epoch + 1e-9 {
                next_eval += cfg.eval_every;
            }
            if let Some((n, cal)) = calibration.as_mut() {
                // Part of the cost of evaluating z: counted as training time.
                let t0 = Instant::now();
                let batches = (0..*n).map(|_| cal.next_batch()).collect::<Result<Vec<_>, _>>()?;
                engine.recalibrate(batches)?;
                train_secs += t0.elapsed().as_secs_f64();
            }
            let ev = engine.evaluate(&mut test)?;
            let line = EvalLine {
                iteration: rec.iteration,
                epoch: rec.epoch,
                train_seconds: train_secs,
                wall_seconds: wall.elapsed().as_secs_f64(),
                lr: rec.lr,
                train_loss: win_loss / win_images.max(1) as f64,
                train_accuracy: win_correct / win_images.max(1) as f64,
                test_loss: ev.loss,
                test_accuracy: ev.accuracy,
                images_per_sec: win_images as f64 / win_secs.max(1e-9),
                learners: engine.layout(),
            };
            (win_loss, win_correct, win_images, win_secs) = (0.0, 0.0, 0, 0.0);
            reporter.eval(&line)?;
            best = best.max(ev.accuracy);
            if let Some(target) = cfg.target_accuracy
                && ev.accuracy >= target
                && reached.is_none()
            {
                reached = Some((train_secs, rec.epoch));
            }
            last_eval_iter = rec.iteration;
            evals.push(line);
        }
    }
    if last_eval_iter != engine.iteration() {
        // Stopped between evaluations (cannot happen with the checks above, kept for safety).
        let ev = engine.evaluate(&mut test)?;
        best = best.max(ev.accuracy);
    }
    let final_acc = evals.last().map(|e| e.test_accuracy).unwrap_or(0.0);
    let summary = Summary {
        model: cfg.model.to_string(),
        dataset: cfg.dataset.to_string(),
        devices: dev_names,
        learners: engine.layout(),
        sync: sync_name,
        target_accuracy: cfg.target_accuracy,
        reached_target: reached.is_some(),
        time_to_target_seconds: reached.map(|r| r.0),
        epochs_to_target: reached.map(|r| r.1),
        best_accuracy: best,
        final_accuracy: final_acc,
        epochs: engine.samples() as f64 / per_epoch as f64,
        iterations: engine.iteration(),
        train_seconds: train_secs,
        wall_seconds: wall.elapsed().as_secs_f64(),
        images_per_sec: engine.samples() as f64 / train_secs.max(1e-9),
        evaluations: evals,
    };
    reporter.finish(&summary)?;
    Ok(summary)
}

/// Memory a CPU device may give its learners: half of the available memory, shared among the
/// CPU devices (read from /proc/meminfo; 4 GiB per device when unknown).
pub fn cpu_memory_budget(devices: usize) -> u64 {
    let avail = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
    });
    match avail {
        Some(kb) => kb * 1024 / 2 / devices.max(1) as u64,
        None => 4 << 30,
    }
}

/// Normalisation the pipeline uses for a dataset (exposed for the benchmark command).
pub fn normalize_for(d: &Dataset) -> Normalize {
    Normalize::from_dataset(d)
}
