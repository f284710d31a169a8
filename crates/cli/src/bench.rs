//! `crossbow bench`: training throughput per model, batch size and learner count, measured in
//! one process so the configurations can be compared; optionally, what the auto-tuner picks.

use std::time::Instant;

use crossbow_kernels::Backend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_replica::engine::{AutoTuner, DeviceFactory, Engine, EngineConfig, TrainBatch};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, ModelKind, Schedule, Synchroniser};
use crossbow_tensor::Rng;
use crossbow_tuner::TunerConfig;
use serde::Serialize;

use crate::error::CliError;
use crate::registry::{SyncOptions, SyncRegistry};

/// A batch of random images kept in memory (the bench measures the engine, not the pipeline).
#[derive(Clone)]
pub struct MemBatch {
    x: Vec<f32>,
    y: Vec<f32>,
}

impl TrainBatch for MemBatch {
    fn images(&self) -> &[f32] {
        &self.x
    }
    fn labels(&self) -> &[f32] {
        &self.y
    }
}

/// Random batches for `graph` (deterministic).
pub fn random_batches(graph: &Graph, batch: usize, count: usize) -> Vec<MemBatch> {
    let per: usize = graph.input_shape().dims().iter().product();
    (0..count)
        .map(|j| {
            let mut r = Rng::new(j as u64 + 1);
            let x = (0..batch * per).map(|_| r.uniform_range(-1.0, 1.0)).collect();
            let y = (0..batch).map(|i| ((i * 7 + j * 3) % graph.classes) as f32).collect();
            MemBatch { x, y }
        })
        .collect()
}

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// Model name (`resnet32`, ...).
    pub model: String,
    /// Batch size per learner.
    pub batch: usize,
    /// Learners on each device.
    pub learners_per_device: usize,
    /// Number of devices.
    pub devices: usize,
    /// Training throughput over the measured iterations, images per second (all learners).
    pub images_per_sec: f64,
    /// Iterations measured (warm-up excluded).
    pub iterations: usize,
    /// Wall time of the measured iterations, in seconds.
    pub seconds: f64,
}

fn engine<B: Backend>(
    graph: &Graph,
    batch: usize,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    m: usize,
) -> Result<Engine<B>, CliError> {
    let n = factory.devices().len();
    let cfg = EngineConfig {
        batch_size: batch,
        sgd: SgdConfig { lr: 0.01, momentum: 0.9, weight_decay: 5e-4, nesterov: false },
        schedule: Schedule::Constant,
        seed: 1,
        eval_batch_size: 100,
    };
    Ok(Engine::new(graph.clone(), cfg, factory, sync, Box::new(HostAllReduce), &vec![m; n])?)
}

/// Measures `iterations` training iterations (after `warmup`) with `m` learners per device,
/// synchronised by `sync`.
#[allow(clippy::too_many_arguments)]
pub fn measure<B: Backend>(
    model: ModelKind,
    graph: &Graph,
    batch: usize,
    m: usize,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    warmup: usize,
    iterations: usize,
) -> Result<BenchRow, CliError> {
    let n = factory.devices().len();
    let mut e = engine(graph, batch, factory, sync, m)?;
    let k = m * n;
    let batches = random_batches(graph, batch, k);
    for _ in 0..warmup {
        e.step(batches.clone(), 1 << 30)?;
    }
    let t = Instant::now();
    let mut images = 0;
    for _ in 0..iterations {
        images += e.step(batches.clone(), 1 << 30)?.images;
    }
    let secs = t.elapsed().as_secs_f64();
    Ok(BenchRow {
        model: model.to_string(),
        batch,
        learners_per_device: m,
        devices: n,
        images_per_sec: images as f64 / secs,
        iterations,
        seconds: secs,
    })
}

/// What the tuner did in a bench run.
#[derive(Clone, Debug, Serialize)]
pub struct TunerRow {
    /// Model name (`resnet32`, ...).
    pub model: String,
    /// Batch size per learner.
    pub batch: usize,
    /// Learners per device the tuner settled on (device 0).
    pub picked: usize,
    /// Median images/s over the last windows at the picked count.
    pub images_per_sec: f64,
    /// Iterations until it settled.
    pub iterations_to_settle: usize,
    /// The tuner's decisions, one line each, prefixed with their iteration.
    pub decisions: Vec<String>,
}

/// Runs the engine under the auto-tuner ([`AutoTuner`], as `crossbow train` does) until it
/// settles (or `max_iterations`), from one learner per device, synchronised by `sync`. The
/// memory budget is each device's own ([`DeviceFactory::memory_budget`]).
pub fn tune<B: Backend>(
    model: ModelKind,
    graph: &Graph,
    batch: usize,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    max_learners: usize,
    max_iterations: usize,
) -> Result<TunerRow, CliError> {
    let n = factory.devices().len();
    let mut e = engine(graph, batch, factory, sync, 1)?;
    let tc = TunerConfig { max_learners, ..TunerConfig::default() };
    let mut t = AutoTuner::new(&e, tc, true)?;
    let pool = random_batches(graph, batch, max_learners * n);
    let mut decisions = vec![];
    let mut settled_at = None;
    let mut recent: Vec<f64> = vec![];
    for it in 0..max_iterations {
        let k = e.learners();
        let rec = e.step(pool[..k].to_vec(), 1 << 30)?;
        for ev in t.after_step(&mut e, &rec)? {
            decisions.push(format!("iteration {it}: {}", ev.line()));
        }
        if settled_at.is_none() && t.settled() {
            settled_at = Some(it);
        }
        if settled_at.is_some() {
            recent.push(rec.images as f64 / rec.seconds);
            if recent.len() >= 10 {
                break;
            }
        }
    }
    recent.sort_by(|a, b| a.total_cmp(b));
    let median = recent.get(recent.len() / 2).copied().unwrap_or(0.0);
    Ok(TunerRow {
        model: model.to_string(),
        batch,
        picked: e.layout()[0],
        images_per_sec: median,
        iterations_to_settle: settled_at.unwrap_or(max_iterations),
        decisions,
    })
}

/// `crossbow bench`: every (model, batch, learners) configuration in one process, then the
/// tuner's pick per (model, batch); prints markdown tables and optionally writes JSON. Every
/// engine is synchronised by `registry`'s synchroniser `sync` made from `sync_options`.
#[allow(clippy::too_many_arguments)]
pub fn run_cli(
    registry: &SyncRegistry,
    sync: &str,
    sync_options: &SyncOptions,
    models: &[String],
    batches: &[usize],
    learners: &[usize],
    devices: &str,
    threads: Option<usize>,
    iterations: usize,
    warmup: usize,
    with_tuner: bool,
    max_learners: usize,
    json: Option<&std::path::Path>,
) -> Result<(), CliError> {
    use crate::train::{Hardware, resolve_hardware};
    let models: Vec<ModelKind> = if models.is_empty() {
        vec![ModelKind::LeNet5, ModelKind::ResNetCifar(20), ModelKind::ResNetCifar(32)]
    } else {
        models
            .iter()
            .map(|m| m.parse().map_err(|e: String| CliError::usage(format!("--model: {e}"))))
            .collect::<Result<_, _>>()?
    };
    if batches.contains(&0) || learners.contains(&0) || iterations == 0 || max_learners == 0 {
        return Err(CliError::usage("--batch-size, --learners, --iterations and --max-learners must be at least 1"));
    }
    let spec: crossbow_tensor::DeviceSpec =
        devices.parse().map_err(|e: String| CliError::usage(format!("--devices: {e}")))?;
    // Checks the synchroniser and its options before measuring anything.
    let sync_name = registry.build(sync, sync_options)?.cpu().name().to_string();
    let hw = resolve_hardware(&spec, threads, &mut |l| eprintln!("{l}"))?;
    eprintln!("sync {sync_name}");
    let mut rows = vec![];
    let mut tuned = vec![];
    println!("| model | batch | learners/device | devices | images/s | vs 1 learner |");
    println!("|---|---:|---:|---|---:|---:|");
    for &model in &models {
        let (input, classes) = crate::models_cmd::default_input(model);
        let graph = model.build(&input, classes)?;
        for &b in batches {
            let mut base = None;
            for &m in learners {
                let row = match &hw {
                    Hardware::Cpu { count, threads } => measure(
                        model,
                        &graph,
                        b,
                        m,
                        Box::new(crossbow_replica::engine::CpuDevices { count: *count, threads: *threads }),
                        registry.build(sync, sync_options)?.cpu(),
                        warmup,
                        iterations,
                    )?,
                    Hardware::Cuda { ordinals } => crate::gpu::measure_cuda(
                        model,
                        &graph,
                        b,
                        m,
                        ordinals,
                        registry.build(sync, sync_options)?.gpu(),
                        warmup,
                        iterations,
                    )?,
                };
                let b0 = *base.get_or_insert(row.images_per_sec);
                println!(
                    "| {} | {} | {} | {} | {:.1} | {:.2}x |",
                    row.model,
                    row.batch,
                    row.learners_per_device,
                    hw_name(&hw),
                    row.images_per_sec,
                    row.images_per_sec / b0
                );
                rows.push(row);
            }
            if with_tuner {
                let t = match &hw {
                    Hardware::Cpu { count, threads } => tune(
                        model,
                        &graph,
                        b,
                        Box::new(crossbow_replica::engine::CpuDevices { count: *count, threads: *threads }),
                        registry.build(sync, sync_options)?.cpu(),
                        max_learners,
                        400,
                    )?,
                    Hardware::Cuda { ordinals } => crate::gpu::tune_cuda(
                        model,
                        &graph,
                        b,
                        ordinals,
                        registry.build(sync, sync_options)?.gpu(),
                        max_learners,
                    )?,
                };
                println!(
                    "| {} | {} | tuner picked {} | {} | {:.1} | settled after {} iterations |",
                    t.model,
                    t.batch,
                    t.picked,
                    hw_name(&hw),
                    t.images_per_sec,
                    t.iterations_to_settle
                );
                tuned.push(t);
            }
        }
    }
    if let Some(p) = json {
        let body = serde_json::json!({ "rows": rows, "tuner": tuned });
        std::fs::write(p, serde_json::to_string_pretty(&body).map_err(CliError::run)?)
            .map_err(|e| CliError::usage(format!("--json {}: {e}", p.display())))?;
    }
    Ok(())
}

fn hw_name(hw: &crate::train::Hardware) -> String {
    match hw {
        crate::train::Hardware::Cpu { count, threads } => format!("cpu:{count} ({threads} threads each)"),
        crate::train::Hardware::Cuda { ordinals } => {
            format!("cuda:{}", ordinals.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(","))
        }
    }
}
