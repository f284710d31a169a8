//! `crossbow bench`: training throughput per model, batch size and learner count, measured in
//! one process so the configurations can be compared; optionally, what the auto-tuner picks.
//!
//! Under `mpirun`/`srun` with several ranks (feature `mpi`) every rank joins the job and each
//! measured engine is one engine of all ranks ([`Engine::in_world`]: the global learner count,
//! one all-reduce per process and iteration); the row is the job's: its images over the
//! measured iterations (every rank's, [`crossbow_replica::engine::IterationRecord::images`]),
//! divided by the slowest rank's time between the same iterations, plus the all-reduce time
//! between ranks. Rank 0 alone prints and writes `--json`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Dataset, FolderOptions, Pipeline, PipelineConfig, load_folder};

use crossbow_kernels::Backend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_replica::engine::{AutoTuner, DeviceFactory, Engine, EngineConfig, LossRead, TrainBatch};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, ModelKind, ProcessGroup, Schedule, Solo, Synchroniser};
use crossbow_tensor::Rng;
use crossbow_tuner::TunerConfig;
use serde::Serialize;

use crate::error::SessionError;
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

/// Random batches for `graph` (deterministic): those of learners `0..count`.
pub fn random_batches(graph: &Graph, batch: usize, count: usize) -> Vec<MemBatch> {
    random_batches_from(graph, batch, 0, count)
}

/// Random batches of learners `from..from + count` in the global order (a rank's learners
/// follow the other ranks' learners, so every rank's batches differ).
pub fn random_batches_from(graph: &Graph, batch: usize, from: usize, count: usize) -> Vec<MemBatch> {
    let per: usize = graph.input_shape().dims().iter().product();
    (from..from + count)
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
    /// Learners on each device (of every rank).
    pub learners_per_device: usize,
    /// Number of devices (of each rank).
    pub devices: usize,
    /// Processes (MPI ranks) that trained together; 1 without a launcher.
    pub ranks: usize,
    /// Learners of all ranks together (the synchroniser's `k`).
    pub learners_total: usize,
    /// Training throughput over the measured iterations, images per second (all learners of
    /// all ranks).
    pub images_per_sec: f64,
    /// Images trained over the measured iterations by all learners of all ranks.
    pub images: usize,
    /// Iterations measured (warm-up excluded).
    pub iterations: usize,
    /// Wall time of the measured iterations, in seconds (with several ranks: the slowest
    /// rank's, between the same iterations).
    pub seconds: f64,
    /// With several ranks, the all-reduce between ranks in each measured iteration
    /// (download, MPI, upload, waiting for the slowest rank included): median and mean
    /// seconds over the iterations and the ranks. `None` for one process.
    pub rank_allreduce: Option<RankAllReduce>,
    /// When the learners' losses were read: `now` (every iteration) or `lagged` (one
    /// iteration late, the host never waiting for the devices).
    pub loss_read: LossRead,
    /// With `--folder`: images per second the input pipeline delivers alone at this batch
    /// size (its workers, the model idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_images_per_sec: Option<f64>,
    /// With `--folder`: `input` when the pipeline delivers fewer images per second than the
    /// model trains, else `model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<&'static str>,
}

/// `crossbow bench --folder`: the image folder the models take their inputs from, and the
/// pipeline measured beside them.
#[derive(Clone, Debug)]
pub struct FolderInput {
    /// The folder (`DIR/train/<class>/*`, `DIR/val/<class>/*`).
    pub dir: PathBuf,
    /// Side of the stored square images.
    pub image_size: usize,
    /// Worker threads of the pipeline.
    pub workers: usize,
}

/// Images per second the input pipeline delivers alone: training batches of `batch` from
/// `train` (its default augmentation and normalisation) on `workers` threads, two unmeasured
/// batches first, then up to an epoch (at most 200 batches).
pub fn measure_input(train: &Arc<Dataset>, batch: usize, workers: usize) -> Result<f64, SessionError> {
    let config = PipelineConfig { workers, prefetch: 2 * workers.max(1), ..PipelineConfig::new(batch, 1) };
    let mut p = Pipeline::new(Arc::clone(train), config)
        .map_err(|e| SessionError::usage(format!("--folder with --batch-size {batch}: {e}")))?;
    let batches = p.batches_per_epoch().clamp(1, 200);
    for _ in 0..2 {
        p.next_batch().map_err(SessionError::run)?;
    }
    let t = Instant::now();
    let mut images = 0;
    for _ in 0..batches {
        images += p.next_batch().map_err(SessionError::run)?.len();
    }
    Ok(images as f64 / t.elapsed().as_secs_f64())
}

/// The per-iteration all-reduce between ranks of a measured configuration.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RankAllReduce {
    /// Median over every rank's measured iterations, seconds.
    pub median_seconds: f64,
    /// Mean over every rank's measured iterations, seconds.
    pub mean_seconds: f64,
    /// Number of timings (iterations x ranks).
    pub count: usize,
    /// Bytes summed across ranks each iteration (the model's parameters, f32).
    pub bytes: usize,
}

/// Median and mean of `t` (0 for none).
pub fn median_mean(t: &[f64]) -> (f64, f64) {
    let mut s = t.to_vec();
    s.sort_by(f64::total_cmp);
    let median = s.get(s.len() / 2).copied().unwrap_or(0.0);
    (median, s.iter().sum::<f64>() / s.len().max(1) as f64)
}

/// Every rank's measured time in nanoseconds (gathered) as the job's seconds: the slowest rank's.
pub fn job_seconds(rank_nanos: &[u64]) -> f64 {
    rank_nanos.iter().copied().max().unwrap_or(0) as f64 * 1e-9
}

fn engine<B: Backend>(
    graph: &Graph,
    batch: usize,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    m: usize,
    world: Arc<dyn ProcessGroup>,
) -> Result<Engine<B>, SessionError> {
    let n = factory.devices().len();
    let cfg = EngineConfig {
        batch_size: batch,
        sgd: SgdConfig { lr: 0.01, momentum: 0.9, weight_decay: 5e-4, nesterov: false },
        schedule: Schedule::Constant,
        seed: 1,
        eval_batch_size: 100,
    };
    Ok(Engine::in_world(graph.clone(), cfg, factory, sync, Box::new(HostAllReduce), &vec![m; n], world)?)
}

/// One measurement: `learners` per device of `model` (its `graph`) at `batch` per learner,
/// `iterations` timed after `warmup`, losses read as `loss_read` says (by default as
/// `crossbow train` reads them).
#[derive(Clone, Copy)]
pub struct Measure<'a> {
    /// The model measured.
    pub model: ModelKind,
    /// Its graph.
    pub graph: &'a Graph,
    /// Batch per learner.
    pub batch: usize,
    /// Learners per device.
    pub learners: usize,
    /// Untimed iterations first.
    pub warmup: usize,
    /// Timed iterations.
    pub iterations: usize,
    /// When losses are read; `None`: as `crossbow train`.
    pub loss_read: Option<LossRead>,
}

/// Measures `spec` synchronised by `sync`, in one process.
pub fn measure<B: Backend>(
    spec: &Measure,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
) -> Result<BenchRow, SessionError> {
    measure_in(spec, factory, sync, Arc::new(Solo))
}

/// [`measure`] as one rank of `world` (a collective: every rank calls it with the same
/// arguments; `spec.learners` on each device of every rank). Every rank returns the same
/// row, the job's.
pub fn measure_in<B: Backend>(
    spec: &Measure,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    world: Arc<dyn ProcessGroup>,
) -> Result<BenchRow, SessionError> {
    let Measure { model, graph, batch, learners: m, warmup, iterations, loss_read } = *spec;
    let n = factory.devices().len();
    let mut e = engine(graph, batch, factory, sync, m, Arc::clone(&world))?;
    // As `crossbow train` does: one iteration late on GPUs, unless told.
    let auto = if e.asynchronous_devices() { LossRead::Lagged } else { LossRead::Now };
    e.set_loss_read(loss_read.unwrap_or(auto))?;
    let batches = random_batches_from(graph, batch, e.learner_offset(), e.learners());
    for _ in 0..warmup {
        e.step(batches.clone(), 1 << 30)?;
    }
    // Every step is a collective, so every rank's clock runs between the same iterations.
    let t = Instant::now();
    let mut images = 0;
    let mut allreduce = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let rec = e.step(batches.clone(), 1 << 30)?;
        images += rec.images;
        allreduce.push(rec.rank_allreduce_seconds);
    }
    // The last iteration's losses (with lagged reads): the clock stops when its work is done.
    e.flush_losses()?;
    let mut secs = t.elapsed().as_secs_f64();
    let ranks = world.size();
    let mut rank_allreduce = None;
    if ranks > 1 {
        secs = job_seconds(&world.all_gather_u64((secs * 1e9) as u64)?);
        // Every rank's timings, gathered as nanoseconds.
        let mut all = vec![];
        for &s in &allreduce {
            all.extend(world.all_gather_u64((s * 1e9) as u64)?.into_iter().map(|ns| ns as f64 * 1e-9));
        }
        let (median_seconds, mean_seconds) = median_mean(&all);
        rank_allreduce =
            Some(RankAllReduce { median_seconds, mean_seconds, count: all.len(), bytes: 4 * graph.param_len });
    }
    Ok(BenchRow {
        model: model.to_string(),
        batch,
        learners_per_device: m,
        devices: n,
        ranks,
        learners_total: e.world_learners(),
        images_per_sec: images as f64 / secs,
        images,
        iterations,
        seconds: secs,
        rank_allreduce,
        loss_read: e.loss_read(),
        input_images_per_sec: None,
        bound: None,
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
    /// Iterations until it settled (`max_iterations` when it did not).
    pub iterations_to_settle: usize,
    /// Whether it settled within `max_iterations` (when not, `images_per_sec` is the median
    /// of the last iterations at the count it had reached).
    pub settled: bool,
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
) -> Result<TunerRow, SessionError> {
    let n = factory.devices().len();
    let mut e = engine(graph, batch, factory, sync, 1, Arc::new(Solo))?;
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
        if settled_at.is_none() {
            // The last iterations before the cap, in case it never settles.
            recent.truncate(9);
            recent.insert(0, rec.images as f64 / rec.seconds);
            continue;
        }
        if settled_at == Some(it) {
            recent.clear();
        }
        recent.push(rec.images as f64 / rec.seconds);
        if recent.len() >= 10 {
            break;
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
        settled: settled_at.is_some(),
        decisions,
    })
}

/// Refuses a `--json` path that cannot take the results: a folder, a path in a missing folder,
/// or a file that cannot be written (tried by opening it for appending, which changes
/// nothing).
fn check_json_path(p: &std::path::Path) -> Result<(), SessionError> {
    let bad = |why: String| SessionError::usage(format!("--json {}: {why}", p.display()));
    if p.is_dir() {
        return Err(bad("is a folder; give a file name for the results".into()));
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        return Err(bad(format!("its folder {} does not exist", parent.display())));
    }
    let existed = p.exists();
    std::fs::OpenOptions::new().append(true).create(true).open(p).map_err(|e| bad(format!("cannot write: {e}")))?;
    if !existed {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// What `crossbow bench` measures: its command line as values.
#[derive(Clone, Debug, Default)]
pub struct BenchRequest {
    /// The synchroniser; `None`: each model's default, as `crossbow train`.
    pub sync: Option<String>,
    /// Its options.
    pub sync_options: SyncOptions,
    /// Model names; empty: LeNet-5, ResNet-20 and ResNet-32.
    pub models: Vec<String>,
    /// Batches per learner.
    pub batches: Vec<usize>,
    /// Learners per device.
    pub learners: Vec<usize>,
    /// The devices (`--devices`).
    pub devices: String,
    /// CPU threads per device; `None`: the cores shared out.
    pub threads: Option<usize>,
    /// Timed iterations per configuration.
    pub iterations: usize,
    /// Untimed iterations first.
    pub warmup: usize,
    /// When losses are read; `None`: as `crossbow train`.
    pub loss_read: Option<LossRead>,
    /// Also run the auto-tuner's search.
    pub with_tuner: bool,
    /// The tuner's learner cap.
    pub max_learners: usize,
    /// Where rank 0 writes the rows as JSON.
    pub json: Option<PathBuf>,
    /// The image folder the models take their inputs from.
    pub folder: Option<FolderInput>,
}

/// `crossbow bench`: every (model, batch, learners) configuration in one process, then the
/// tuner's pick per (model, batch); prints markdown tables and optionally writes JSON. Every
/// engine is synchronised by `registry`'s synchroniser `sync` made from `sync_options`.
/// With several ranks in `world` (a collective: every rank calls it with the same arguments)
/// each configuration is measured by all ranks together, `learners` counting the learners on
/// each device of every rank; rank 0 alone prints and writes `json`. `with_tuner` is refused
/// with several ranks.
pub fn run_cli(registry: &SyncRegistry, req: &BenchRequest, world: Arc<dyn ProcessGroup>) -> Result<(), SessionError> {
    let BenchRequest {
        sync,
        sync_options,
        models,
        batches,
        learners,
        devices,
        threads,
        iterations,
        warmup,
        loss_read,
        with_tuner,
        max_learners,
        json,
        folder,
    } = req;
    let (sync, sync_options, json) = (sync.as_deref(), sync_options, json.as_deref());
    let (threads, iterations, warmup, loss_read, with_tuner, max_learners) =
        (*threads, *iterations, *warmup, *loss_read, *with_tuner, *max_learners);
    use crate::dispatch::{dispatch, resolve_hardware};
    use crossbow_replica::engine::AllReduceChoice;
    let models: Vec<ModelKind> = if models.is_empty() {
        vec![ModelKind::LeNet5, ModelKind::ResNetCifar(20), ModelKind::ResNetCifar(32)]
    } else {
        models
            .iter()
            .map(|m| m.parse().map_err(|e: String| SessionError::usage(format!("--model: {e}"))))
            .collect::<Result<_, _>>()?
    };
    if batches.contains(&0) || learners.contains(&0) || iterations == 0 || max_learners == 0 {
        return Err(SessionError::usage(
            "--batch-size, --learners, --iterations and --max-learners must be at least 1",
        ));
    }
    // Where the results go is checked before the benchmark, not after it (rank 0 writes).
    if let Some(p) = json
        && world.rank() == 0
    {
        check_json_path(p)?;
    }
    let ranks = world.size();
    if with_tuner && ranks > 1 {
        return Err(SessionError::usage(tuner_refusal(ranks)));
    }
    let spec: crossbow_tensor::DeviceSpec =
        devices.parse().map_err(|e: String| SessionError::usage(format!("--devices: {e}")))?;
    // Each model's synchroniser: the one given, or the model's default as in `crossbow train`
    // (S-SGD for batch-normalised models); checked with its options before measuring.
    let sync_of = |m: ModelKind| sync.unwrap_or(crossbow_session::settings::default_sync(m));
    let mut sync_names = vec![];
    for &m in &models {
        let name = registry.build(sync_of(m), sync_options)?.cpu().name().to_string();
        if !sync_names.contains(&name) {
            sync_names.push(name);
        }
    }
    let lead = world.rank() == 0;
    if folder.is_some() && ranks > 1 {
        return Err(SessionError::usage(format!(
            "--folder with {ranks} ranks: the input pipeline is measured in one process; run `crossbow bench --folder` \
             as one process"
        )));
    }
    let input = match &folder {
        Some(f) => Some(load_input(f)?),
        None => None,
    };
    let mut input_rates: HashMap<usize, f64> = HashMap::new();
    let hw = resolve_hardware(&spec, threads, &mut |l| {
        if lead {
            eprintln!("{l}")
        }
    })?;
    let mut rows = vec![];
    let mut tuned = vec![];
    if lead {
        match (sync, sync_names.as_slice()) {
            (_, [one]) => eprintln!("sync {one}"),
            _ => eprintln!(
                "sync: each model's default, as crossbow train ({})",
                models.iter().map(|&m| format!("{m}: {}", sync_of(m))).collect::<Vec<_>>().join(", ")
            ),
        }
        if ranks > 1 {
            eprintln!(
                "{}: each configuration is measured by all {ranks} ranks together, its learners per device \
                 on every device of every rank",
                world.describe()
            );
        }
        let header = table_header(ranks);
        match &input {
            Some(_) => {
                let mut lines = header.lines();
                let (names, rule) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
                println!("{names} input images/s | bound |\n{rule}---:|---|");
            }
            None => println!("{header}"),
        }
    }
    for &model in &models {
        let (shape, classes) = match &input {
            Some(train) => (crossbow_tensor::Shape::new(train.image_shape().to_vec()), train.num_classes()),
            None => model.default_input(),
        };
        let graph = model.build(&shape, classes)?;
        for &b in batches {
            let mut base = None;
            for &m in learners {
                let spec = Measure { model, graph: &graph, batch: b, learners: m, warmup, iterations, loss_read };
                let job = MeasureJob { spec, world: &world };
                let mut row = dispatch(&hw, registry.build(sync_of(model), sync_options)?, AllReduceChoice::Auto, job)?;
                let b0 = *base.get_or_insert(row.images_per_sec);
                let mut line = table_line(&row, &hw_name(&hw), b0);
                if let (Some(train), Some(f)) = (&input, &folder) {
                    let rate = match input_rates.get(&b) {
                        Some(&r) => r,
                        None => {
                            let r = measure_input(train, b, f.workers)?;
                            input_rates.insert(b, r);
                            r
                        }
                    };
                    let bound = if rate < row.images_per_sec { "input" } else { "model" };
                    line.push_str(&format!(" {rate:.1} | {bound} |"));
                    row.input_images_per_sec = Some(rate);
                    row.bound = Some(bound);
                }
                if lead {
                    println!("{line}");
                }
                rows.push(row);
            }
            if with_tuner {
                let job = TuneJob { model, graph: &graph, batch: b, max_learners };
                let t = dispatch(&hw, registry.build(sync_of(model), sync_options)?, AllReduceChoice::Auto, job)?;
                let how = if t.settled {
                    format!("settled after {} iterations", t.iterations_to_settle)
                } else {
                    format!("not settled within {} iterations (its last 10)", t.iterations_to_settle)
                };
                println!(
                    "| {} | {} | tuner picked {} | {} | {:.1} | {how} |",
                    t.model,
                    t.batch,
                    t.picked,
                    hw_name(&hw),
                    t.images_per_sec
                );
                tuned.push(t);
            }
        }
    }
    if let Some(p) = json
        && lead
    {
        let body = serde_json::json!({ "ranks": ranks, "rows": rows, "tuner": tuned });
        std::fs::write(p, serde_json::to_string_pretty(&body).map_err(SessionError::run)?)
            .map_err(|e| SessionError::usage(format!("--json {}: {e}", p.display())))?;
    }
    Ok(())
}

/// One throughput measurement ([`measure_in`]) as a job for [`crate::dispatch::dispatch`].
/// Loads `--folder`'s training images, saying how long it took.
fn load_input(f: &FolderInput) -> Result<Arc<Dataset>, SessionError> {
    let opts = FolderOptions { image_size: f.image_size, ..FolderOptions::default() };
    if f.workers == 0 {
        return Err(SessionError::usage("--workers must be at least 1"));
    }
    let t = Instant::now();
    let ((train, report), (test, _)) =
        load_folder(&f.dir, &opts, None, None).map_err(|e| SessionError::usage(format!("--folder: {e}")))?;
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "folder {}: {} training images of {} classes at {s}x{s}; with the {} evaluation images decoded and resized \
         in {secs:.1} s ({:.0} images/s \
         on {} threads); input images/s below: the pipeline alone on {} worker(s), the model idle",
        f.dir.display(),
        train.len(),
        train.num_classes(),
        test.len(),
        (train.len() + test.len()) as f64 / secs,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        f.workers,
        s = f.image_size,
    );
    if let Some(line) = report.summary(crossbow_data::Split::Train) {
        eprintln!("folder {}: {line}", f.dir.display());
    }
    Ok(Arc::new(train))
}

struct MeasureJob<'a> {
    spec: Measure<'a>,
    world: &'a Arc<dyn ProcessGroup>,
}

impl crate::dispatch::Job for MeasureJob<'_> {
    type Output = BenchRow;
    fn run<B: Backend>(
        self,
        factory: Box<dyn DeviceFactory<B>>,
        sync: Box<dyn Synchroniser<B>>,
        _about: Vec<String>,
    ) -> Result<BenchRow, SessionError> {
        measure_in(&self.spec, factory, sync, Arc::clone(self.world))
    }
}

/// One tuner search ([`tune`]) as a job for [`crate::dispatch::dispatch`].
struct TuneJob<'a> {
    model: ModelKind,
    graph: &'a Graph,
    batch: usize,
    max_learners: usize,
}

impl crate::dispatch::Job for TuneJob<'_> {
    type Output = TunerRow;
    fn run<B: Backend>(
        self,
        factory: Box<dyn DeviceFactory<B>>,
        sync: Box<dyn Synchroniser<B>>,
        _about: Vec<String>,
    ) -> Result<TunerRow, SessionError> {
        // LeNet-5's search pools its 3 ms steps into 50 ms windows: 300-400 iterations.
        tune(self.model, self.graph, self.batch, factory, sync, self.max_learners, 2000)
    }
}

/// Refuses `--tuner` (`with_tuner`) when a launcher started this process as one of several
/// ranks, before joining the MPI job (so no rank waits for another).
pub fn tuner_alone(with_tuner: bool) -> Result<(), SessionError> {
    let launch = crossbow_mpi::detect().map_err(|e| SessionError::usage(format!("launcher environment: {e}")))?;
    match launch {
        Some(l) if with_tuner && l.size > 1 => Err(crate::processes::refusal_of_rank(l.rank, tuner_refusal(l.size))),
        _ => Ok(()),
    }
}

/// Why `--tuner` is refused with `ranks` processes.
pub fn tuner_refusal(ranks: usize) -> String {
    format!(
        "--tuner with {ranks} ranks: the bench's tuner run measures one process; run `crossbow bench --tuner` \
         as one process, or tune across ranks with `mpirun -np {ranks} crossbow train --learners-per-device auto`"
    )
}

/// The table's header (two lines): one process, or `ranks` of them with the learners of all
/// ranks and the all-reduce between ranks.
pub fn table_header(ranks: usize) -> String {
    if ranks > 1 {
        "| model | batch | learners/device | devices per rank | ranks | learners in all | images/s (job) | vs 1 learner | all-reduce between ranks, median ms |\n\
         |---|---:|---:|---|---:|---:|---:|---:|---:|"
            .to_string()
    } else {
        "| model | batch | learners/device | devices | images/s | vs 1 learner |\n|---|---:|---:|---|---:|---:|"
            .to_string()
    }
}

/// One row of the table; `base` is the images/s of the first learner count of its
/// (model, batch).
pub fn table_line(row: &BenchRow, hw: &str, base: f64) -> String {
    match &row.rank_allreduce {
        Some(a) if row.ranks > 1 => format!(
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.2}x | {:.3} |",
            row.model,
            row.batch,
            row.learners_per_device,
            hw,
            row.ranks,
            row.learners_total,
            row.images_per_sec,
            row.images_per_sec / base,
            1e3 * a.median_seconds
        ),
        _ => format!(
            "| {} | {} | {} | {} | {:.1} | {:.2}x |",
            row.model,
            row.batch,
            row.learners_per_device,
            hw,
            row.images_per_sec,
            row.images_per_sec / base
        ),
    }
}

fn hw_name(hw: &crate::dispatch::Hardware) -> String {
    match hw {
        crate::dispatch::Hardware::Cpu { count, threads } => format!("cpu:{count} ({threads} threads each)"),
        crate::dispatch::Hardware::Cuda { ordinals } => {
            format!("cuda:{}", ordinals.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mean() {
        assert_eq!(median_mean(&[3.0, 1.0, 2.0]), (2.0, 2.0));
        assert_eq!(median_mean(&[4.0, 1.0, 2.0, 1.0]), (2.0, 2.0));
        assert_eq!(median_mean(&[]), (0.0, 0.0));
    }

    #[test]
    fn the_job_takes_the_slowest_ranks_time() {
        assert_eq!(job_seconds(&[1_000_000_000, 3_000_000_000, 2_000_000_000]), 3.0);
        assert_eq!(job_seconds(&[]), 0.0);
    }

    fn row(ranks: usize) -> BenchRow {
        BenchRow {
            model: "lenet5".into(),
            batch: 16,
            learners_per_device: 1,
            devices: 1,
            ranks,
            learners_total: ranks,
            images_per_sec: 100.0,
            images: 96,
            iterations: 3,
            seconds: 0.96,
            rank_allreduce: (ranks > 1).then_some(RankAllReduce {
                median_seconds: 0.002,
                mean_seconds: 0.003,
                count: 6,
                bytes: 4,
            }),
            loss_read: LossRead::Now,
            input_images_per_sec: None,
            bound: None,
        }
    }

    #[test]
    fn rows_have_the_headers_columns() {
        for ranks in [1, 2] {
            let header = table_header(ranks);
            let line = table_line(&row(ranks), "cpu:1", 50.0);
            let cols = |l: &str| l.matches('|').count();
            for h in header.lines() {
                assert_eq!(cols(h), cols(&line), "{header}\n{line}");
            }
            assert!(line.contains("2.00x"), "{line}");
        }
        assert!(table_line(&row(2), "cpu:1", 50.0).ends_with("| 2.000 |"));
        assert!(!table_header(1).contains("ranks"));
    }

    #[test]
    fn the_tuner_refusal_names_the_flag_and_the_ranks() {
        let m = tuner_refusal(3);
        assert!(m.contains("--tuner") && m.contains("3 ranks") && m.contains("one process"), "{m}");
    }

    #[test]
    fn one_process_measures_its_own_learners_images() {
        let model = ModelKind::LeNet5;
        let (input, classes) = model.default_input();
        let graph = model.build(&input, classes).unwrap();
        let devices = Box::new(crossbow_replica::engine::CpuDevices { count: 1, threads: 1 });
        let sync: Box<dyn Synchroniser<crossbow_kernels::CpuBackend>> =
            Box::new(crossbow_replica::sync::Independent::default());
        let spec = Measure { model, graph: &graph, batch: 4, learners: 2, warmup: 1, iterations: 3, loss_read: None };
        let r = measure(&spec, devices, sync).unwrap();
        // 2 learners x 4 images x 3 measured iterations (the warm-up is not counted).
        assert_eq!((r.images, r.ranks, r.learners_total), (24, 1, 2));
        assert!(r.rank_allreduce.is_none());
        assert!((r.images_per_sec - 24.0 / r.seconds).abs() < 1e-9);
    }

    /// A tuner that has not settled when the iterations run out says so, and its figure is
    /// the last iterations' images/s, not 0 (a table once printed "0.0, settled after 400").
    #[test]
    fn an_unsettled_tuner_reports_its_last_iterations() {
        let model = ModelKind::LeNet5;
        let (input, classes) = model.default_input();
        let graph = model.build(&input, classes).unwrap();
        let devices = Box::new(crossbow_replica::engine::CpuDevices { count: 1, threads: 1 });
        let sync: Box<dyn Synchroniser<crossbow_kernels::CpuBackend>> =
            Box::new(crossbow_replica::sync::Independent::default());
        let r = tune(model, &graph, 4, devices, sync, 4, 5).unwrap();
        assert!(!r.settled && r.iterations_to_settle == 5, "{:?}", r.decisions);
        assert!(r.images_per_sec > 0.0);
    }
}
