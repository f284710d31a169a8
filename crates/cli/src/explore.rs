//! `crossbow explore`: several configurations of one training job run as branches of one
//! job (a meta-dataflow), fed from one data pipeline, compared at rungs of their budget
//! (successive halving) and/or against a target accuracy; the losers stop early and the best
//! configuration is written as a config file `crossbow train --config` accepts.
//!
//! The file is a `crossbow train` config (the base) plus two tables:
//!
//! ```toml
//! model = "lenet5"
//! epochs = 2
//! learners-per-device = 1
//!
//! [space]                       # the cartesian product of these is explored
//! lr = [0.01, 0.05, 0.1]
//! momentum = { min = 0.5, max = 0.9, steps = 3 }              # linear
//! weight-decay = { min = 1e-5, max = 1e-3, steps = 3, scale = "log" }
//! batch-size = [16, 32]
//! sync = ["sma", "ssgd"]
//! learners-per-device = [1, 2, "auto"]
//!
//! [select]
//! eta = 2        # successive halving: keep the best 1/eta at each rung
//! top-k = 1      # halving stops at this many
//! target = 0.98  # stop at the first configuration that reaches this test accuracy
//! ```
//!
//! Every configuration is a group of learners with its own engine (its own central model).
//! All groups take their batches from ONE pipeline of unit batches of `g` images, `g` the
//! greatest common divisor of the batch sizes: a learner's batch of `b` images is `b / g`
//! consecutive units, so each sample is read, decoded and augmented once, and every group
//! sees the same augmented samples in the same order. With one batch size (`g = b`) the
//! units are exactly the batches `crossbow train` draws, so one configuration explored is
//! `crossbow train` with its settings, bit for bit (same evaluations). An epoch is one pass of
//! the unit stream (`floor(n / g) * g` samples) for every group.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use crossbow_data::{Batch, Cursor, Pipeline, PipelineConfig};
use crossbow_kernels::CpuBackend;
use crossbow_replica::engine::{AutoTuner, CpuDevices, Engine, IterationRecord, TrainBatch};
use plotters::prelude::*;
use serde_json::json;

use crate::config::{BnEval, LearnersPerDevice, TrainConfig, TrainFile};
use crate::error::CliError;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Reporter};
use crate::source::{PipelineSource, TestSet};
use crate::train::{
    Data, Hardware, auto_tuner, build_graph, calibration_pipeline, load_data, resolve_hardware, start_engine,
};

/// Most configurations one exploration runs (each is an engine held in memory at once).
pub const MAX_CONFIGS: usize = 64;

/// The keys a `[space]` may vary: the settings the table of [`crate::settings`] marks
/// explorable.
pub fn space_keys() -> Vec<&'static str> {
    crate::settings::SETTINGS.iter().filter(|s| s.explore == crate::settings::Explore::Yes).map(|s| s.key).collect()
}

/// Explorable keys whose values are real numbers (the only ones a `{ min, max, steps }`
/// range may give).
fn real_keys() -> Vec<&'static str> {
    crate::settings::SETTINGS
        .iter()
        .filter(|s| s.explore == crate::settings::Explore::Yes && s.number)
        .map(|s| s.key)
        .collect()
}

/// `crossbow explore`'s flags.
#[derive(Args, Debug)]
pub struct ExploreArgs {
    /// The TOML file: a `crossbow train` config plus `[space]` and `[select]` (docs/explore.md)
    #[arg(long)]
    pub config: PathBuf,
    /// Folder for best.toml, accuracy.svg and ranking.txt
    #[arg(long, default_value = "explore-out")]
    pub out: PathBuf,
    /// Write one JSON object per evaluation, rung, growth and the end to this file
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Run the configurations one after another instead, each with its own pipeline, to the
    /// full budget without pruning (what exploring saves is measured against this)
    #[arg(long)]
    pub sequential: bool,
    /// Print the configurations and exit
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the final ranking
    #[arg(long, short)]
    pub quiet: bool,
}

/// How the configurations are compared: `[select]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Select {
    /// Successive-halving factor (keep the best `ceil(live / eta)` at each rung), if halving.
    pub eta: Option<usize>,
    /// Number of rungs (the last at the full budget); default: enough to halve down to `top_k`.
    pub rungs: Option<usize>,
    /// How many configurations halving keeps at the end.
    pub top_k: usize,
    /// Stop at the first configuration whose test accuracy reaches this, 0..1.
    pub target: Option<f64>,
    /// Give the learners of pruned configurations to the survivors (fixed learner counts only).
    pub grow: bool,
}

/// One configuration: its settings from the space and the validated training config.
#[derive(Clone, Debug)]
pub struct Configuration {
    /// Its number, from 0, in the order of the cartesian product.
    pub id: usize,
    /// `(key, value)` of every `[space]` key, keys in alphabetical order.
    pub settings: Vec<(String, String)>,
    /// The validated settings it trains with.
    pub cfg: TrainConfig,
}

impl Configuration {
    /// `lr=0.05 batch-size=32`.
    pub fn label(&self) -> String {
        self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }
}

/// A read and validated exploration file.
#[derive(Debug)]
pub struct Exploration {
    /// The file it was read from.
    pub path: PathBuf,
    /// The configurations, validated.
    pub configs: Vec<Configuration>,
    /// The selection rule.
    pub select: Select,
}

fn bad(path: &Path, what: String) -> CliError {
    CliError::usage(format!("config file {}: {what}", path.display()))
}

fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

fn as_real(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Float(x) => Some(*x),
        toml::Value::Integer(i) => Some(*i as f64),
        _ => None,
    }
}

/// Puts `key = v` of the space into `f`: any setting the table of [`crate::settings`] marks
/// explorable; errors say what type the key takes.
fn apply(f: &mut TrainFile, key: &str, v: &toml::Value) -> Result<(), String> {
    match crate::settings::SettingInfo::of(key) {
        Some(s) if s.explore == crate::settings::Explore::Yes => f.set_toml(key, v),
        Some(_) => Err("not a setting an exploration may vary".into()),
        None => Err("unknown key".into()),
    }
}

/// The values of one `[space]` key: a non-empty list, or a range table.
fn values_of(path: &Path, key: &str, v: &toml::Value) -> Result<Vec<toml::Value>, CliError> {
    let at = |what: String| bad(path, format!("[space] {key}: {what}"));
    let values = match v {
        toml::Value::Array(list) if list.is_empty() => {
            return Err(at("the list is empty; give at least one value".into()));
        }
        toml::Value::Array(list) => list.clone(),
        toml::Value::Table(t) => {
            if !real_keys().contains(&key) {
                return Err(at(format!("a range is only for {}; give a list", real_keys().join(", "))));
            }
            for k in t.keys() {
                if !["min", "max", "steps", "scale"].contains(&k.as_str()) {
                    return Err(at(format!("unknown range key '{k}' (a range has min, max, steps and scale)")));
                }
            }
            let num = |k: &str| -> Result<f64, CliError> {
                let x = t.get(k).ok_or_else(|| at(format!("the range needs '{k}'")))?;
                as_real(x)
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| at(format!("{k} = {}: not a finite number", show(x))))
            };
            let (min, max) = (num("min")?, num("max")?);
            if min > max {
                return Err(at(format!("inverted range: min = {min} is above max = {max}")));
            }
            let steps = match t.get("steps") {
                Some(toml::Value::Integer(s)) if *s >= 1 && *s <= MAX_CONFIGS as i64 => *s as usize,
                Some(s) => {
                    return Err(at(format!("steps = {}: must be a whole number from 1 to {MAX_CONFIGS}", show(s))));
                }
                None => return Err(at("the range needs 'steps'".into())),
            };
            let log = match t.get("scale") {
                None => false,
                Some(toml::Value::String(s)) if s == "linear" => false,
                Some(toml::Value::String(s)) if s == "log" => true,
                Some(s) => return Err(at(format!("scale = {}: must be \"linear\" or \"log\"", show(s)))),
            };
            if log && min <= 0.0 {
                return Err(at(format!("a log range needs min > 0, got min = {min}")));
            }
            if steps > 1 && min == max {
                return Err(at(format!("min = max = {min} with steps = {steps} gives the same value {steps} times")));
            }
            (0..steps)
                .map(|i| {
                    let t = if steps == 1 { 0.0 } else { i as f64 / (steps - 1) as f64 };
                    let x = if log { (min.ln() + t * (max.ln() - min.ln())).exp() } else { min + t * (max - min) };
                    // Print-friendly: 12 significant digits (0.1 stays 0.1, not 0.10000000000000002).
                    let x = format!("{x:.12e}").parse::<f64>().unwrap_or(x);
                    toml::Value::Float(if i + 1 == steps { max } else { x })
                })
                .collect()
        }
        other => return Err(at(format!("{}: give a list of values or a range {{ min, max, steps }}", show(other)))),
    };
    for (i, a) in values.iter().enumerate() {
        if values[..i].contains(a) {
            return Err(at(format!("the value {} appears twice", show(a))));
        }
    }
    Ok(values)
}

fn parse_select(path: &Path, v: Option<&toml::Value>) -> Result<Select, CliError> {
    let mut s = Select { eta: None, rungs: None, top_k: 1, target: None, grow: false };
    let Some(v) = v else { return Ok(s) };
    let t = v.as_table().ok_or_else(|| bad(path, "[select] must be a table".into()))?;
    let at = |k: &str, what: String| bad(path, format!("[select] {k}: {what}"));
    let count = |k: &str, x: &toml::Value, least: i64| match x {
        toml::Value::Integer(i) if *i >= least => Ok(*i as usize),
        _ => Err(at(k, format!("{} must be a whole number >= {least}", show(x)))),
    };
    for (k, x) in t {
        match k.as_str() {
            "eta" => s.eta = Some(count(k, x, 2)?),
            "rungs" => s.rungs = Some(count(k, x, 1)?),
            "top-k" => s.top_k = count(k, x, 1)?,
            "grow" => s.grow = x.as_bool().ok_or_else(|| at(k, format!("{} must be true or false", show(x))))?,
            "target" => {
                let a = as_real(x).ok_or_else(|| at(k, format!("{} is not a number", show(x))))?;
                s.target = Some(match a {
                    a if a > 0.0 && a <= 1.0 => a,
                    a if a > 1.0 && a <= 100.0 => a / 100.0,
                    _ => return Err(at(k, format!("{a} must be in (0, 1] or a percentage"))),
                });
            }
            _ => {
                return Err(at(k, "unknown key (the keys are eta, rungs, top-k, target and grow)".into()));
            }
        }
    }
    if s.rungs.is_some() && s.eta.is_none() {
        return Err(at("rungs", "rungs needs eta (the halving factor)".into()));
    }
    Ok(s)
}

/// Reads an exploration file: the base settings, the space and the selection rule, every
/// configuration validated as `crossbow train` would (nothing runs before all are good).
pub fn read(path: &Path, registry: &SyncRegistry) -> Result<Exploration, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
    // The TOML syntax (and the line of an error) as `crossbow train --config` reports it.
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| {
        let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        let line =
            e.span().map(|s| text.as_bytes()[..s.start.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1);
        bad(path, format!("{}{msg}", line.map(|l| format!("line {l}: ")).unwrap_or_default()))
    })?;
    let space = table.remove("space").ok_or_else(|| bad(path, "no [space] table: nothing to explore".into()))?;
    let select = parse_select(path, table.remove("select").as_ref())?;
    let base: TrainFile = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| bad(path, e.message().split_whitespace().collect::<Vec<_>>().join(" ")))?;
    if let Some(t) = base.target_accuracy {
        return Err(bad(path, format!("target-accuracy = {t}: in an exploration the target is [select] target")));
    }
    if base.metrics.is_some() {
        return Err(bad(path, "metrics: in an exploration the metrics file is --metrics".into()));
    }
    // The base alone must be a good config (its errors name the file and the key).
    TrainConfig::from_sources(Some((path, base.clone())), TrainFile::default(), registry)?;
    let space = space.as_table().ok_or_else(|| bad(path, "[space] must be a table of lists or ranges".into()))?;
    if space.is_empty() {
        return Err(bad(path, "[space] is empty: nothing to explore".into()));
    }
    let mut dims: Vec<(String, Vec<toml::Value>)> = vec![];
    for (key, v) in space {
        if !space_keys().contains(&key.as_str()) {
            return Err(bad(path, format!("[space] {key}: unknown key (the keys are {})", space_keys().join(", "))));
        }
        let values = values_of(path, key, v)?;
        for x in &values {
            apply(&mut TrainFile::default(), key, x).map_err(|e| bad(path, format!("[space] {key}: {e}")))?;
        }
        dims.push((key.clone(), values));
    }
    let total = dims.iter().try_fold(1usize, |n, (_, v)| n.checked_mul(v.len())).unwrap_or(usize::MAX);
    if total > MAX_CONFIGS {
        let sizes = dims.iter().map(|(k, v)| format!("{k} {}", v.len())).collect::<Vec<_>>().join(" x ");
        return Err(bad(
            path,
            format!("[space] gives {total} configurations ({sizes}); at most {MAX_CONFIGS} run together"),
        ));
    }
    let mut configs = vec![];
    for id in 0..total {
        let mut rest = id;
        let mut file = TrainFile::default();
        let mut picked = vec![];
        for (key, values) in dims.iter().rev() {
            let v = &values[rest % values.len()];
            rest /= values.len();
            apply(&mut file, key, v).map_err(|e| bad(path, format!("[space] {key}: {e}")))?;
            picked.push((key.clone(), v.clone()));
        }
        picked.reverse();
        let cfg =
            TrainConfig::from_sources(Some((path, base.clone().overridden_by(file))), TrainFile::default(), registry)
                .map_err(|e| blame(path, &base, &picked, e, registry))?;
        let settings = picked
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    match v {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                )
            })
            .collect();
        configs.push(Configuration { id, settings, cfg });
    }
    Ok(Exploration { path: path.to_path_buf(), configs, select })
}

/// The error of a configuration, naming the `[space]` key and value that make it bad (or all
/// of its settings, when only their combination is bad).
fn blame(path: &Path, base: &TrainFile, picked: &[(String, toml::Value)], e: CliError, reg: &SyncRegistry) -> CliError {
    let prefix = format!("config file {}: ", path.display());
    let strip = |e: CliError| e.to_string().strip_prefix(&prefix).map(String::from).unwrap_or_else(|| e.to_string());
    for (key, v) in picked {
        let mut one = TrainFile::default();
        if apply(&mut one, key, v).is_err() {
            continue;
        }
        if let Err(e) =
            TrainConfig::from_sources(Some((path, base.clone().overridden_by(one))), TrainFile::default(), reg)
        {
            return bad(path, format!("[space] {key} = {}: {}", show(v), strip(e)));
        }
    }
    let all = picked.iter().map(|(k, v)| format!("{k} = {}", show(v))).collect::<Vec<_>>().join(", ");
    bad(path, format!("[space] the configuration {all}: {}", strip(e)))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The budget fractions of the rungs (the last is 1) for `n` configurations.
pub fn rung_fractions(select: &Select, n: usize) -> Vec<f64> {
    let Some(eta) = select.eta else { return vec![1.0] };
    let rungs = select.rungs.unwrap_or_else(|| {
        let (mut live, mut r) = (n, 1);
        while live > select.top_k {
            live = live.div_ceil(eta).max(select.top_k);
            r += 1;
        }
        r
    });
    (0..rungs).map(|r| 1.0 / (eta as f64).powi((rungs - 1 - r) as i32)).collect()
}

/// The batches every group draws from: unit batches of `g` images from one pipeline, kept
/// from the slowest live group's position to the fastest's.
struct SharedStream {
    pipeline: Pipeline,
    /// Unit number of `units[0]`.
    first: u64,
    units: VecDeque<Batch>,
    /// Units taken from the pipeline (each decoded and augmented once).
    decoded: u64,
    /// Seconds the training thread waited for the pipeline.
    wait_secs: f64,
    /// Seconds spent assembling learners' batches from units.
    copy_secs: f64,
}

impl SharedStream {
    fn unit(&mut self, seq: u64) -> Result<&Batch, CliError> {
        while self.first + self.units.len() as u64 <= seq {
            let t0 = Instant::now();
            let b = self.pipeline.next_batch()?;
            self.wait_secs += t0.elapsed().as_secs_f64();
            self.decoded += 1;
            self.units.push_back(b);
        }
        let i = seq.checked_sub(self.first).ok_or_else(|| CliError::run(format!("unit {seq} was already dropped")))?;
        self.units.get(i as usize).ok_or_else(|| CliError::run(format!("unit {seq} is missing")))
    }

    /// One learner's batch: units `from..from + n`, concatenated.
    fn batch(&mut self, from: u64, n: usize) -> Result<OwnedBatch, CliError> {
        let mut out = OwnedBatch { images: vec![], labels: vec![] };
        for s in from..from + n as u64 {
            self.unit(s)?;
            let t0 = Instant::now();
            let u = self.unit(s)?;
            out.images.extend_from_slice(u.images());
            out.labels.extend_from_slice(u.labels());
            self.copy_secs += t0.elapsed().as_secs_f64();
        }
        Ok(out)
    }

    /// Drops the units before `seq` (no live group needs them).
    fn release(&mut self, seq: u64) {
        while self.first < seq && !self.units.is_empty() {
            self.units.pop_front();
            self.first += 1;
        }
    }
}

struct OwnedBatch {
    images: Vec<f32>,
    labels: Vec<f32>,
}

impl TrainBatch for OwnedBatch {
    fn images(&self) -> &[f32] {
        &self.images
    }
    fn labels(&self) -> &[f32] {
        &self.labels
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Status {
    Running,
    Pruned(usize),
    /// Diverged at this epoch (NaN or exploded loss, or a non-finite central model): stopped
    /// and ranked last; the others go on.
    Diverged(f64),
    ReachedTarget,
    Stopped,
    Finished,
    Winner,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Running => write!(f, "running"),
            Status::Pruned(r) => write!(f, "pruned at rung {}", r + 1),
            Status::Diverged(e) => write!(f, "diverged at epoch {e:.2}"),
            Status::ReachedTarget => write!(f, "reached target"),
            Status::Stopped => write!(f, "stopped (another reached the target)"),
            Status::Finished => write!(f, "finished"),
            Status::Winner => write!(f, "winner"),
        }
    }
}

/// One configuration while it runs.
struct Group {
    conf: Configuration,
    engine: Option<Engine<CpuBackend>>,
    tuner: Option<AutoTuner>,
    /// Units per learner batch (`batch size / g`).
    units: usize,
    next_unit: u64,
    calibration: Option<(usize, PipelineSource)>,
    test: TestSet,
    next_eval: f64,
    window: crate::train::Window,
    train_secs: f64,
    evals: Vec<EvalLine>,
    /// Accuracy at each rung reached.
    rungs: Vec<f64>,
    status: Status,
    samples: u64,
    iterations: u64,
    learners: Vec<usize>,
    calibration_samples: u64,
    /// Samples of one epoch of the unit stream.
    per_epoch: usize,
    /// The divergence watch of `crossbow train`.
    watch: crate::train::DivergenceWatch,
}

impl Group {
    fn epoch(&self) -> f64 {
        self.samples as f64 / self.per_epoch.max(1) as f64
    }

    fn live(&self) -> bool {
        self.status == Status::Running
    }

    fn last_accuracy(&self) -> f64 {
        self.evals.last().map(|e| e.test_accuracy).unwrap_or(0.0)
    }
}

/// What a set of groups run together did.
struct Outcome {
    groups: Vec<Group>,
    decoded_samples: u64,
    wait_secs: f64,
    copy_secs: f64,
    unit: usize,
    reached: Option<usize>,
    rung_fractions: Vec<f64>,
}

/// Shared context of one exploration.
struct Ctx<'a> {
    data: &'a Data,
    registry: &'a SyncRegistry,
    hw: (usize, usize),
    reporter: Reporter,
    wall: Instant,
    quiet: bool,
}

/// `crossbow explore`.
pub fn run(args: &ExploreArgs, registry: &SyncRegistry) -> Result<(), CliError> {
    crate::processes::one_process_only("explore")?;
    let ex = read(&args.config, registry)?;
    let n = ex.configs.len();
    let fractions = if args.sequential { vec![1.0] } else { rung_fractions(&ex.select, n) };
    let first = &ex.configs[0].cfg;
    println!(
        "{n} configuration{} of {} on {} ({} epochs each); {}",
        if n == 1 { "" } else { "s" },
        first.model,
        first.dataset,
        first.epochs,
        if args.sequential {
            "one after another, each to the full budget".to_string()
        } else {
            describe_select(&ex.select, &fractions)
        }
    );
    for c in &ex.configs {
        println!("  #{:<3} {}", c.id, c.label());
    }
    if args.dry_run {
        return Ok(());
    }
    let data = load_data(first)?;
    for c in &ex.configs {
        if c.cfg.batch_size > data.train.len() {
            return Err(bad(
                &ex.path,
                format!(
                    "batch-size {} (configuration #{}) is larger than the {} train set ({} images)",
                    c.cfg.batch_size,
                    c.id,
                    first.dataset,
                    data.train.len()
                ),
            ));
        }
    }
    let mut notes = vec![];
    let hw = match resolve_hardware(&first.devices, first.threads, &mut |l| notes.push(l))? {
        Hardware::Cpu { count, threads } => (count, threads),
        Hardware::Cuda { .. } => {
            return Err(bad(
                &ex.path,
                format!(
                    "devices = \"{}\": crossbow explore runs on CPU devices only; set devices = \"cpu\"",
                    first.devices
                ),
            ));
        }
    };
    for c in &ex.configs {
        let sync = registry.build_for(&c.cfg)?.cpu();
        let graph = build_graph(&c.cfg, &data)?;
        let factory = CpuDevices { count: hw.0, threads: hw.1 };
        crate::preflight::check_run(&c.cfg, &data, &graph, &factory, &*sync)
            .map_err(|e| bad(&ex.path, format!("configuration #{} ({}): {e}", c.id, c.label())))?;
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::usage(format!("--out {}: cannot create: {e}", args.out.display())))?;
    let reporter = Reporter::new(args.metrics.as_deref(), true, first.epochs)?;
    let mut ctx = Ctx { data: &data, registry, hw, reporter, wall: Instant::now(), quiet: args.quiet };
    for l in notes {
        ctx.say(&l);
    }
    ctx.reporter.record(
        "start",
        json!({
            "file": ex.path, "mode": if args.sequential { "sequential" } else { "explore" },
            "configurations": ex.configs.iter().map(|c| json!({ "id": c.id, "settings": c.settings })).collect::<Vec<_>>(),
            "rung_fractions": fractions,
        }),
    )?;
    let outcome = if args.sequential {
        let mut all = Outcome {
            groups: vec![],
            decoded_samples: 0,
            wait_secs: 0.0,
            copy_secs: 0.0,
            unit: 0,
            reached: None,
            rung_fractions: vec![1.0],
        };
        for c in &ex.configs {
            let select = Select { eta: None, rungs: None, top_k: 1, target: None, grow: false };
            let o = run_groups(&mut ctx, std::slice::from_ref(c), &select, &[1.0])?;
            all.decoded_samples += o.decoded_samples;
            all.wait_secs += o.wait_secs;
            all.copy_secs += o.copy_secs;
            all.groups.extend(o.groups);
        }
        all
    } else {
        run_groups(&mut ctx, &ex.configs, &ex.select, &fractions)?
    };
    finish(&mut ctx, args, outcome)
}

fn describe_select(s: &Select, fractions: &[f64]) -> String {
    let mut parts = vec![];
    if let Some(eta) = s.eta {
        let f = fractions.iter().map(|f| format!("{f:.3}")).collect::<Vec<_>>().join(", ");
        parts.push(format!("successive halving (eta {eta}, top {}) at budget fractions {f}", s.top_k));
    } else {
        parts.push("all to the full budget, ranked at the end".to_string());
    }
    if let Some(t) = s.target {
        parts.push(format!("stop at the first to reach {:.2}%", 100.0 * t));
    }
    if s.grow {
        parts.push("survivors take the pruned configurations' learners".into());
    }
    parts.join("; ")
}

impl Ctx<'_> {
    fn say(&self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    fn start_group(
        &self,
        conf: &Configuration,
        g: usize,
        per_epoch: usize,
        stream_norm: &crossbow_data::Normalize,
    ) -> Result<Group, CliError> {
        let cfg = &conf.cfg;
        let sync = self.registry.build_for(cfg)?.cpu();
        let graph = build_graph(cfg, self.data)?;
        let factory = Box::new(CpuDevices { count: self.hw.0, threads: self.hw.1 });
        let layout = match cfg.learners_per_device {
            LearnersPerDevice::Auto => vec![1; self.hw.0],
            LearnersPerDevice::Fixed(m) => vec![m; self.hw.0],
        };
        let engine = start_engine(cfg, graph, factory, sync, &layout)?;
        let tuner = auto_tuner(cfg, &engine)?;
        let calibration = match cfg.bn_eval {
            BnEval::Recalibrate(n) if engine.graph().stats_len > 0 => {
                Some((n, PipelineSource { pipeline: calibration_pipeline(cfg, self.data, n, Cursor::default())? }))
            }
            _ => None,
        };
        Ok(Group {
            conf: conf.clone(),
            learners: engine.layout(),
            engine: Some(engine),
            tuner,
            units: cfg.batch_size / g,
            next_unit: 0,
            calibration,
            test: TestSet { dataset: Arc::clone(&self.data.test), normalize: stream_norm.clone() },
            next_eval: cfg.eval_every,
            window: crate::train::Window::default(),
            train_secs: 0.0,
            evals: vec![],
            rungs: vec![],
            status: Status::Running,
            samples: 0,
            iterations: 0,
            calibration_samples: 0,
            per_epoch,
            watch: crate::train::DivergenceWatch::default(),
        })
    }

    /// One iteration of group `g`.
    fn step(&mut self, g: &mut Group, stream: &mut SharedStream, per_epoch: usize) -> Result<Stepped, CliError> {
        let Some(engine) = g.engine.as_mut() else { return Err(CliError::run("stepping a stopped configuration")) };
        let t0 = Instant::now();
        let mut batches = Vec::with_capacity(engine.learners());
        for _ in 0..engine.learners() {
            batches.push(stream.batch(g.next_unit, g.units)?);
            g.next_unit += g.units as u64;
        }
        let rec = match engine.step(batches, per_epoch) {
            Ok(r) => r,
            Err(crossbow_replica::ReplicaError::Diverged(why)) => return Ok(Stepped::Diverged(why)),
            Err(e) => return Err(CliError::run(format!("configuration #{} ({}): {e}", g.conf.id, g.conf.label()))),
        };
        // The divergence watch of `crossbow train`.
        if let Some(why) = g.watch.check(engine, &rec, self.data.train.num_classes())? {
            return Ok(Stepped::Diverged(why));
        }
        let secs = t0.elapsed().as_secs_f64();
        g.train_secs += secs;
        g.window.add(&rec, secs);
        g.samples = engine.samples();
        g.iterations = engine.iteration();
        if let Some(t) = g.tuner.as_mut() {
            for ev in t.after_step(engine, &rec)? {
                self.say(&format!("#{} {}", g.conf.id, ev.line()));
                self.reporter.record("tuner", json!({ "id": g.conf.id, "event": ev }))?;
            }
        }
        g.learners = engine.layout();
        Ok(Stepped::Ok(rec))
    }

    /// Evaluates group `g`'s central model as `crossbow train` does (recalibrating batch-norm
    /// statistics first when configured).
    fn evaluate(&mut self, g: &mut Group, rec: &IterationRecord) -> Result<f64, CliError> {
        let Some(engine) = g.engine.as_mut() else { return Err(CliError::run("evaluating a stopped configuration")) };
        let window = std::mem::take(&mut g.window);
        let line = crate::train::evaluate_central(
            engine,
            rec,
            window,
            crate::train::Evaluation {
                test: &mut g.test,
                calibration: g.calibration.as_mut(),
                train_seconds: &mut g.train_secs,
                wall: (self.wall, 0.0),
            },
        )?;
        if let Some((n, _)) = &g.calibration {
            g.calibration_samples += (*n * g.conf.cfg.batch_size) as u64;
        }
        let ev = (line.test_accuracy, line.test_loss);
        self.say(&format!(
            "#{:<3} {:<40} epoch {:6.2}  test acc {:6.2}%  {}",
            g.conf.id,
            g.conf.label(),
            rec.epoch,
            100.0 * ev.0,
            g.status
        ));
        let mut body = serde_json::to_value(&line).map_err(CliError::run)?;
        if let Some(o) = body.as_object_mut() {
            o.insert("id".into(), json!(g.conf.id));
        }
        self.reporter.record("eval", body)?;
        g.evals.push(line);
        Ok(ev.0)
    }
}

/// What one iteration of a configuration gave.
enum Stepped {
    Ok(IterationRecord),
    /// The configuration diverged (why).
    Diverged(String),
}

/// Marks group `g` diverged and frees its engine; the others go on.
fn mark_diverged(ctx: &mut Ctx<'_>, g: &mut Group, why: &str) -> Result<(), CliError> {
    g.status = Status::Diverged(g.epoch());
    g.engine = None;
    g.tuner = None;
    g.calibration = None;
    ctx.say(&format!("#{} {}: diverged ({why}); stopped, the others go on", g.conf.id, g.conf.label()));
    ctx.reporter.record("diverged", json!({ "id": g.conf.id, "epoch": g.epoch(), "why": why }))
}

/// Runs `confs` together from one stream, with rungs at `fractions` of the budget.
fn run_groups(
    ctx: &mut Ctx<'_>,
    confs: &[Configuration],
    select: &Select,
    fractions: &[f64],
) -> Result<Outcome, CliError> {
    let first = &confs[0].cfg;
    let g = confs.iter().map(|c| c.cfg.batch_size).fold(0, gcd);
    let most = confs
        .iter()
        .map(|c| {
            let k = match c.cfg.learners_per_device {
                LearnersPerDevice::Auto => c.cfg.max_learners,
                LearnersPerDevice::Fixed(m) => m,
            };
            k * ctx.hw.0 * c.cfg.batch_size / g
        })
        .max()
        .unwrap_or(1);
    let mut pc = PipelineConfig::new(g, first.seed);
    pc.workers = first.workers;
    pc.prefetch = (2 * most).max(4);
    if let crate::config::AugmentChoice::Set(a) = first.augment {
        pc.augment = Some(a);
    }
    pc.normalize = Some(crate::train::normalize_for(first, &ctx.data.train)?);
    let pipeline = Pipeline::new(Arc::clone(&ctx.data.train), pc)?;
    let per_epoch = pipeline.batches_per_epoch() as usize * g;
    let norm = pipeline.normalize().clone();
    let mut stream =
        SharedStream { pipeline, first: 0, units: VecDeque::new(), decoded: 0, wait_secs: 0.0, copy_secs: 0.0 };
    let mut groups = confs.iter().map(|c| ctx.start_group(c, g, per_epoch, &norm)).collect::<Result<Vec<_>, _>>()?;
    let epochs = first.epochs;
    let mut last: Vec<Option<IterationRecord>> = vec![None; groups.len()];
    let mut reached = None;
    let mut rung = 0;
    'run: loop {
        let limit = fractions[rung] * epochs;
        let final_rung = rung + 1 == fractions.len();
        // The live group furthest behind that has not reached the rung steps next. The last
        // rung is the epoch limit (the nearest iteration boundary, as `crossbow train` ends);
        // an earlier one is reached at the first iteration at or past it, where `crossbow
        // train` evaluates when an evaluation is due there (the same evaluations).
        let next = groups
            .iter()
            .enumerate()
            .filter(|(_, gr)| gr.live())
            .filter(|(_, gr)| {
                let k = gr.engine.as_ref().map(|e| e.learners()).unwrap_or(1);
                if final_rung {
                    !crate::limits::epoch_limit_reached(
                        gr.samples,
                        (k * gr.conf.cfg.batch_size) as u64,
                        per_epoch,
                        limit,
                    )
                } else {
                    (gr.samples as f64) < limit * per_epoch as f64 - 1e-9 * per_epoch as f64
                }
            })
            .min_by(|a, b| a.1.samples.cmp(&b.1.samples).then(a.0.cmp(&b.0)))
            .map(|(i, _)| i);
        if let Some(i) = next {
            let rec = match ctx.step(&mut groups[i], &mut stream, per_epoch)? {
                Stepped::Ok(rec) => rec,
                Stepped::Diverged(why) => {
                    mark_diverged(ctx, &mut groups[i], &why)?;
                    if let Some(low) = groups.iter().filter(|gr| gr.live()).map(|gr| gr.next_unit).min() {
                        stream.release(low);
                    }
                    continue;
                }
            };
            let due = match groups[i].conf.cfg.eval_every_iterations {
                Some(n) => rec.iteration.is_multiple_of(n),
                None => rec.epoch >= groups[i].next_eval - 1e-9,
            };
            let done = rec.epoch >= epochs - 1e-9;
            if due || done {
                groups[i].next_eval =
                    crate::limits::next_evaluation(groups[i].next_eval, rec.epoch, groups[i].conf.cfg.eval_every);
                let acc = ctx.evaluate(&mut groups[i], &rec)?;
                if select.target.is_some_and(|t| acc >= t) {
                    reached = Some(i);
                    groups[i].status = Status::ReachedTarget;
                    last[i] = Some(rec);
                    break 'run;
                }
            }
            last[i] = Some(rec);
            if let Some(low) = groups.iter().filter(|gr| gr.live()).map(|gr| gr.next_unit).min() {
                stream.release(low);
            }
            continue;
        }
        // Every live group is at the rung: evaluate where not just evaluated, rank, prune.
        let live: Vec<usize> = (0..groups.len()).filter(|&i| groups[i].live()).collect();
        for &i in &live {
            let Some(rec) = last[i].clone() else { continue };
            let acc = if groups[i].evals.last().is_some_and(|e| e.iteration == rec.iteration) {
                groups[i].last_accuracy()
            } else {
                let acc = ctx.evaluate(&mut groups[i], &rec)?;
                // The rung stops a group at the iteration nearest to it, which may fall just
                // short of an evaluation that is due there: this evaluation stands for it (not
                // a second one an iteration later at the "same" epoch).
                let k = groups[i].engine.as_ref().map(|e| e.learners()).unwrap_or(1);
                let step_epochs = (k * groups[i].conf.cfg.batch_size) as f64 / per_epoch.max(1) as f64;
                if groups[i].conf.cfg.eval_every_iterations.is_none() && groups[i].next_eval - rec.epoch < step_epochs {
                    let every = groups[i].conf.cfg.eval_every;
                    let next = groups[i].next_eval;
                    groups[i].next_eval = crate::limits::next_evaluation(next, next, every);
                }
                if select.target.is_some_and(|t| acc >= t) {
                    reached = Some(i);
                    groups[i].status = Status::ReachedTarget;
                    break 'run;
                }
                acc
            };
            groups[i].rungs.push(acc);
        }
        let mut ranked = live.clone();
        ranked.sort_by(|&a, &b| groups[b].rungs[rung].total_cmp(&groups[a].rungs[rung]).then(a.cmp(&b)));
        let is_last = final_rung;
        let keep = match select.eta {
            Some(eta) if !is_last => ranked.len().div_ceil(eta).max(select.top_k).min(ranked.len()),
            _ => ranked.len(),
        };
        let mut freed = 0;
        for &i in &ranked[keep..] {
            groups[i].status = Status::Pruned(rung);
            freed += groups[i].learners.iter().sum::<usize>();
            // Dropping the engine frees its memory now.
            groups[i].engine = None;
            groups[i].tuner = None;
            groups[i].calibration = None;
        }
        ctx.reporter.record(
            "rung",
            json!({
                "rung": rung, "fraction": fractions[rung], "epoch": limit,
                "results": ranked.iter().map(|&i| json!({
                    "id": groups[i].conf.id, "accuracy": groups[i].rungs[rung], "kept": groups[i].live(),
                    "epoch": groups[i].epoch(), "learners": groups[i].learners,
                })).collect::<Vec<_>>(),
            }),
        )?;
        if !ctx.quiet {
            eprintln!(
                "rung {} of {} at {:.3} epochs (budget fraction {:.3}):",
                rung + 1,
                fractions.len(),
                limit,
                fractions[rung]
            );
            print_table(&groups);
        }
        if is_last {
            break;
        }
        if select.grow && freed > 0 {
            grow(ctx, &mut groups, &ranked[..keep], freed)?;
        }
        if let Some(low) = groups.iter().filter(|gr| gr.live()).map(|gr| gr.next_unit).min() {
            stream.release(low);
        }
        rung += 1;
    }
    // Every run's final evaluation: at its last iteration (as `crossbow train` ends).
    for (i, gr) in groups.iter_mut().enumerate() {
        if gr.status == Status::Running {
            gr.status = if reached.is_some() { Status::Stopped } else { Status::Finished };
        }
        if reached.is_none()
            && gr.status == Status::Finished
            && let Some(rec) = last[i].clone()
            && gr.evals.last().is_none_or(|e| e.iteration != rec.iteration)
        {
            ctx.evaluate(gr, &rec)?;
        }
        gr.engine = None;
        gr.tuner = None;
    }
    Ok(Outcome {
        groups,
        decoded_samples: stream.decoded * g as u64,
        wait_secs: stream.wait_secs,
        copy_secs: stream.copy_secs,
        unit: g,
        reached,
        rung_fractions: fractions.to_vec(),
    })
}

/// Gives `freed` learners of pruned configurations to the survivors with a fixed learner
/// count, one at a time in rank order, while each stays within max-learners and its device's
/// memory budget.
fn grow(ctx: &mut Ctx<'_>, groups: &mut [Group], survivors: &[usize], mut freed: usize) -> Result<(), CliError> {
    let mut progress = true;
    while freed > 0 && progress {
        progress = false;
        for &i in survivors {
            if freed == 0 {
                break;
            }
            let gr = &mut groups[i];
            if gr.tuner.is_some() {
                continue; // the auto-tuner decides its learners
            }
            let Some(engine) = gr.engine.as_mut() else { continue };
            let layout = engine.layout();
            let Some((d, &k)) = layout.iter().enumerate().min_by_key(|(_, k)| **k) else { continue };
            let fp = engine.footprint();
            let fits = engine
                .memory_budget(d)
                .is_none_or(|b| fp.fixed_bytes_per_device + fp.bytes_per_learner * (k as u64 + 1) <= b);
            if k >= gr.conf.cfg.max_learners || !fits {
                continue;
            }
            engine.add_learner(d)?;
            gr.learners = engine.layout();
            freed -= 1;
            progress = true;
            let line = format!("#{} {}: takes a freed learner, now {:?}", gr.conf.id, gr.conf.label(), gr.learners);
            ctx.say(&line);
            ctx.reporter.record("grow", json!({ "id": gr.conf.id, "learners": gr.learners }))?;
        }
    }
    Ok(())
}

fn print_table(groups: &[Group]) {
    eprintln!("  {:<4} {:<44} {:>7} {:>9}  status", "id", "settings", "epoch", "accuracy");
    for g in groups {
        eprintln!(
            "  #{:<3} {:<44} {:>7.3} {:>8.2}%  {}",
            g.conf.id,
            g.conf.label(),
            g.epoch(),
            100.0 * g.last_accuracy(),
            g.status
        );
    }
}

/// The ranking: the target's winner first; then by the last rung reached and the accuracy
/// there (or, for runs to the end, the final accuracy); ties by id.
fn ranking(o: &Outcome) -> Vec<usize> {
    let key = |g: &Group| -> (usize, f64) {
        let depth = match g.status {
            Status::ReachedTarget => usize::MAX,
            Status::Pruned(r) => r + 1,
            Status::Diverged(_) => 0,
            _ => g.rungs.len() + 1,
        };
        let acc = if g.rungs.len() == o.rung_fractions.len() || g.rungs.is_empty() {
            g.last_accuracy()
        } else {
            g.rungs.last().copied().unwrap_or(0.0)
        };
        (depth, acc)
    };
    let mut order: Vec<usize> = (0..o.groups.len()).collect();
    order.sort_by(|&a, &b| {
        let (ka, kb) = (key(&o.groups[a]), key(&o.groups[b]));
        kb.0.cmp(&ka.0).then(kb.1.total_cmp(&ka.1)).then(a.cmp(&b))
    });
    order
}

fn finish(ctx: &mut Ctx<'_>, args: &ExploreArgs, mut o: Outcome) -> Result<(), CliError> {
    let wall = ctx.wall.elapsed().as_secs_f64();
    let order = ranking(&o);
    let budget = o.groups.first().map(|g| g.conf.cfg.epochs).unwrap_or(0.0);
    let winner = order[0];
    let all_diverged = o.groups.iter().all(|g| matches!(g.status, Status::Diverged(_)));
    if o.reached.is_none() && !all_diverged {
        o.groups[winner].status = Status::Winner;
    }
    let consumed: u64 = o.groups.iter().map(|g| g.samples).sum();
    let calibration: u64 = o.groups.iter().map(|g| g.calibration_samples).sum();
    let mut text = String::new();
    text.push_str(&format!(
        "{:<5} {:<4} {:<44} {:>7} {:>10} {:>9}  status\n",
        "rank", "id", "settings", "epochs", "accuracy", "learners"
    ));
    for (r, &i) in order.iter().enumerate() {
        let g = &o.groups[i];
        let learners = format!("{:?}", g.learners);
        text.push_str(&format!(
            "{:<5} #{:<3} {:<44} {:>7.3} {:>9.2}% {:>9}  {}\n",
            r + 1,
            g.conf.id,
            g.conf.label(),
            g.epoch(),
            100.0 * g.last_accuracy(),
            learners,
            g.status
        ));
    }
    let w = &o.groups[winner];
    let best_path = args.out.join("best.toml");
    if all_diverged {
        // Nothing to recommend: the ranking and the plot say what happened.
        let text = text + "\nevery configuration diverged: no best.toml; lower the learning rates of the search\n";
        print!("{text}");
        let rank_path = args.out.join("ranking.txt");
        std::fs::write(&rank_path, &text)
            .map_err(|e| CliError::run(format!("{}: cannot write: {e}", rank_path.display())))?;
        plot(&args.out.join("accuracy.svg"), &o.groups)?;
        ctx.reporter.record("end", json!({ "winner": null, "all_diverged": true }))?;
        return Err(CliError::run(format!(
            "every configuration diverged (ranking in {}); lower the learning rates of the search",
            rank_path.display()
        )));
    }
    let best = toml::to_string(&crate::resume::config_to_file(&w.conf.cfg)).map_err(CliError::run)?;
    let header = format!(
        "# The best of {} configurations explored from {} (#{}: {}), test accuracy {:.2}%.\n# crossbow train --config {}\n",
        o.groups.len(),
        args.config.display(),
        w.conf.id,
        w.conf.label(),
        100.0 * w.last_accuracy(),
        best_path.display()
    );
    std::fs::write(&best_path, header + &best)
        .map_err(|e| CliError::run(format!("{}: cannot write: {e}", best_path.display())))?;
    let share = format!(
        "pipeline: {} samples decoded and augmented ({}) for the {} the configurations trained on (what running them one after another decodes): {:.2}x fewer; waited {:.2} s for it, {:.2} s assembling batches; batch-norm recalibration drew {} more samples, per configuration (not shared)",
        o.decoded_samples,
        if o.unit == 0 {
            "each configuration its own pipeline".to_string()
        } else {
            format!("unit batches of {}", o.unit)
        },
        consumed,
        consumed as f64 / o.decoded_samples.max(1) as f64,
        o.wait_secs,
        o.copy_secs,
        calibration
    );
    text.push_str(&format!(
        "\n{share}\nwall time {wall:.1} s for a budget of {budget} epochs\nbest: {}\n",
        best_path.display()
    ));
    print!("{text}");
    let rank_path = args.out.join("ranking.txt");
    std::fs::write(&rank_path, &text)
        .map_err(|e| CliError::run(format!("{}: cannot write: {e}", rank_path.display())))?;
    plot(&args.out.join("accuracy.svg"), &o.groups)?;
    ctx.reporter.record(
        "end",
        json!({
            "winner": w.conf.id,
            "winner_settings": w.conf.settings,
            "reached_target": o.reached.map(|i| o.groups[i].conf.id),
            "ranking": order.iter().map(|&i| {
                let g = &o.groups[i];
                json!({ "id": g.conf.id, "status": g.status.to_string(), "accuracy": g.last_accuracy(),
                        "rungs": g.rungs, "samples": g.samples, "iterations": g.iterations, "learners": g.learners })
            }).collect::<Vec<_>>(),
            "decoded_samples": o.decoded_samples,
            "consumed_samples": consumed,
            "calibration_samples": calibration,
            "unit_batch": o.unit,
            "pipeline_wait_seconds": o.wait_secs,
            "batch_copy_seconds": o.copy_secs,
            "wall_seconds": wall,
            "best": best_path,
        }),
    )?;
    Ok(())
}

/// Test accuracy against wall time of the exploration, one line per configuration with a
/// marker at every evaluation (so a configuration evaluated once still shows), and the legend
/// in a panel of its own beside the chart (it never covers a curve).
fn plot(path: &Path, groups: &[Group]) -> Result<(), CliError> {
    let err = |e: &dyn std::fmt::Display| CliError::run(format!("{}: {e}", path.display()));
    let legend_rows = groups.len().max(1) as u32;
    let height = (480u32).max(40 + 18 * legend_rows);
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(640);
    let xmax = groups.iter().flat_map(|g| g.evals.iter().map(|e| e.wall_seconds)).fold(1e-3f64, f64::max);
    let mut chart = ChartBuilder::on(&left)
        .caption("test accuracy of each configuration", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(44)
        .build_cartesian_2d(0f64..xmax * 1.02, 0f64..1f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the exploration started")
        .y_desc("test accuracy (central model)")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, g) in groups.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = g.evals.iter().map(|e| (e.wall_seconds, e.test_accuracy)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), ShapeStyle::from(&color).stroke_width(2)))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, ShapeStyle::from(&color).filled())))
            .map_err(|e| err(&e))?;
    }
    for (i, g) in groups.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let y = 30 + 18 * i as i32;
        right
            .draw(&PathElement::new(vec![(4, y), (24, y)], ShapeStyle::from(&color).stroke_width(3)))
            .map_err(|e| err(&e))?;
        right
            .draw(&Text::new(
                format!("#{} {} ({})", g.conf.id, g.conf.label(), g.status),
                (30, y - 6),
                ("sans-serif", 12),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(eta: Option<usize>, top_k: usize) -> Select {
        Select { eta, rungs: None, top_k, target: None, grow: false }
    }

    #[test]
    fn rungs_halve_down_to_top_k() {
        assert_eq!(rung_fractions(&sel(Some(2), 1), 8), vec![0.125, 0.25, 0.5, 1.0]);
        assert_eq!(rung_fractions(&sel(Some(2), 1), 4), vec![0.25, 0.5, 1.0]);
        assert_eq!(rung_fractions(&sel(Some(3), 1), 9), vec![1.0 / 9.0, 1.0 / 3.0, 1.0]);
        assert_eq!(rung_fractions(&sel(Some(2), 2), 8), vec![0.25, 0.5, 1.0]);
        assert_eq!(rung_fractions(&sel(None, 1), 8), vec![1.0]);
        let fixed = Select { rungs: Some(2), ..sel(Some(4), 1) };
        assert_eq!(rung_fractions(&fixed, 8), vec![0.25, 1.0]);
    }

    #[test]
    fn ranges_are_even_in_their_scale() {
        let p = Path::new("x.toml");
        let v: toml::Value = toml::from_str::<toml::Table>("r = { min = 0.01, max = 1.0, steps = 3, scale = \"log\" }")
            .unwrap()["r"]
            .clone();
        let xs: Vec<f64> = values_of(p, "lr", &v).unwrap().iter().map(|x| as_real(x).unwrap()).collect();
        assert_eq!(xs, vec![0.01, 0.1, 1.0]);
        let v: toml::Value =
            toml::from_str::<toml::Table>("r = { min = 0.5, max = 0.9, steps = 5 }").unwrap()["r"].clone();
        let xs: Vec<f64> = values_of(p, "momentum", &v).unwrap().iter().map(|x| as_real(x).unwrap()).collect();
        assert_eq!(xs, vec![0.5, 0.6, 0.7, 0.8, 0.9]);
    }

    #[test]
    fn gcd_of_batch_sizes() {
        assert_eq!([16, 32, 24].iter().fold(0, |a, &b| gcd(a, b)), 8);
        assert_eq!(gcd(0, 32), 32);
    }
}
