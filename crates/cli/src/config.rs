//! The training configuration: a TOML file and command-line flags (flags win), validated into
//! typed settings. Every bad value is an error naming the flag (or key) and the value.
//!
//! The synchroniser is chosen by name (`sync = "sma"`, `--sync sma`) from a
//! [`SyncRegistry`]; its generic options are the `[sync-options]` table of the file and the
//! `--sync-opt KEY=VALUE` flags (a flag replaces the file's value of the same key):
//!
//! ```toml
//! sync = "periodic"
//! learners-per-device = 4
//!
//! [sync-options]
//! period = 16
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crossbow_data::DatasetKind;
use crossbow_replica::engine::{AllReduceChoice, BnGroup};
use crossbow_replica::{ModelKind, Schedule};
use crossbow_sma::{SmaForm, SyncKind};
use crossbow_tensor::DeviceSpec;
use serde::{Deserialize, Serialize};

use crate::error::CliError;
use crate::registry::SyncRegistry;

/// How many learners each device runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LearnersPerDevice {
    /// Chosen at run time by the auto-tuner.
    Auto,
    /// A fixed count.
    Fixed(usize),
}

impl FromStr for LearnersPerDevice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(LearnersPerDevice::Auto),
            t => match t.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(LearnersPerDevice::Fixed(n)),
                _ => Err(format!("must be 'auto' or a whole number >= 1, got '{s}'")),
            },
        }
    }
}

/// As the flag takes it: `auto` or the count.
impl std::fmt::Display for LearnersPerDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LearnersPerDevice::Auto => write!(f, "auto"),
            LearnersPerDevice::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// As the config file takes it: `"auto"` or the count as a number.
impl Serialize for LearnersPerDevice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LearnersPerDevice::Auto => s.serialize_str("auto"),
            LearnersPerDevice::Fixed(n) => s.serialize_u64(*n as u64),
        }
    }
}

/// `learners-per-device` in a config file: a string (`"auto"`, `"4"`) or a whole number.
fn string_or_integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Int(i64),
        Str(String),
    }
    match Option::<Text>::deserialize(d) {
        Ok(v) => Ok(v.map(|t| match t {
            Text::Int(i) => i.to_string(),
            Text::Str(s) => s,
        })),
        Err(_) => Err(serde::de::Error::custom("expected \"auto\" or a whole number of learners")),
    }
}

/// Every setting of `crossbow train`, as read from a TOML file (keys are the flag names without
/// the leading dashes, e.g. `batch-size = 64`). Unset values take their defaults.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TrainFile {
    /// Model name: `lenet5`, `resnet20`/32/44/56/110 (any 6n+2), `vgg16`, `resnet50`.
    pub model: Option<String>,
    /// Dataset name: `mnist`, `cifar10`, `cifar100`, `synthetic-digits`, `synthetic-shapes`.
    pub dataset: Option<String>,
    /// Directory holding the dataset files (file-based datasets only).
    pub data_dir: Option<PathBuf>,
    /// Images per learner per iteration, >= 1.
    pub batch_size: Option<usize>,
    /// Base learning rate, > 0.
    pub lr: Option<f64>,
    /// Momentum of each learner's SGD, in `[0, 1)`.
    pub momentum: Option<f64>,
    /// L2 weight decay, >= 0.
    pub weight_decay: Option<f64>,
    /// Use Nesterov momentum (needs `momentum` > 0).
    pub nesterov: Option<bool>,
    /// Learning-rate schedule as text (`constant`, `multistep:E1,E2[:GAMMA]`, ...).
    pub schedule: Option<String>,
    /// Epoch limit, > 0 (fractions allowed).
    pub epochs: Option<f64>,
    /// Stop when the central model's test accuracy reaches this (0..1, or a percentage).
    pub target_accuracy: Option<f64>,
    /// Seed of initialisation, data order, augmentation and dropout.
    pub seed: Option<u64>,
    /// Threads per CPU device, >= 1.
    pub threads: Option<usize>,
    /// File to write one JSON object per evaluation (and start, tuner decisions, end) to.
    pub metrics: Option<PathBuf>,
    /// Devices as text: `auto`, `cpu`, `cpu:N`, `cuda`, `cuda:0,1`.
    pub devices: Option<String>,
    /// Learners per device: a whole number >= 1, or `auto` for the auto-tuner (in a file, a
    /// number or a string).
    #[serde(default, deserialize_with = "string_or_integer")]
    pub learners_per_device: Option<String>,
    /// The synchroniser's name in the registry (`sma`, `ssgd`, `easgd`, ...).
    pub sync: Option<String>,
    /// SMA/EA-SGD pull towards the central model, >= 0 (unset: `1/k` or `0.9/k`).
    pub alpha: Option<f64>,
    /// SMA central momentum, in `[0, 1)`.
    pub central_momentum: Option<f64>,
    /// SMA learner update: `paper` or `local-momentum`.
    pub sma_form: Option<String>,
    /// Batch-norm statistics for evaluation: `mean`, `learner`, `recalibrate` or `recalibrate:N`.
    pub bn_eval: Option<String>,
    /// Whose batch statistics batch norm uses in training: `learner` or `device`.
    pub bn_group: Option<String>,
    /// Evaluate the central model every this many epochs, > 0.
    pub eval_every: Option<f64>,
    /// Evaluate every this many iterations instead of by epochs, >= 1.
    pub eval_every_iterations: Option<u64>,
    /// Batch size of evaluation, >= 1.
    pub eval_batch_size: Option<usize>,
    /// Training images to use (synthetic: generated; files: the first N), >= 1.
    pub train_size: Option<usize>,
    /// Test images to use, >= 1.
    pub test_size: Option<usize>,
    /// Data pipeline worker threads, >= 1.
    pub workers: Option<usize>,
    /// Most learners per device the auto-tuner may use, >= 1.
    pub max_learners: Option<usize>,
    /// Relative throughput gain the tuner needs to keep an added learner, >= 0 (0.05 = 5%).
    pub tuner_threshold: Option<f64>,
    /// How GPU contributions are summed: `auto`, `host` or `nccl`.
    pub all_reduce: Option<String>,
    /// Checkpoint folder (`--checkpoint-dir`).
    pub checkpoint_dir: Option<PathBuf>,
    /// How often checkpoints are written: `N` iterations or `Nm` minutes.
    pub checkpoint_every: Option<String>,
    /// How many checkpoints to keep, >= 1.
    pub keep_checkpoints: Option<usize>,
    /// What a failed checkpoint (or metrics) write does: `warn` or `fatal`.
    pub checkpoint_errors: Option<String>,
    /// What a diverged run does: `stop` or `rollback`.
    pub on_divergence: Option<String>,
    /// Most rollbacks before giving up.
    pub max_rollbacks: Option<u32>,
    /// The checkpoint folder may hold other runs' checkpoints.
    pub share_checkpoint_dir: Option<bool>,
    /// Seconds a collective between ranks may take (several processes).
    pub mpi_timeout: Option<f64>,
    /// The synchroniser's generic options (`[sync-options]`; `--sync-opt KEY=VALUE`).
    pub sync_options: Option<BTreeMap<String, toml::Value>>,
}

impl TrainFile {
    /// Reads a TOML config file; errors name the file (and the line and key, for bad values).
    pub fn read(path: &Path) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::usage(format!("config file {}: {e}", path.display())))?;
        Self::parse(&text, path)
    }

    /// Parses the text of a TOML config file read from `path` (named in errors). An error is
    /// one line: the file, the line number and the key (or the text) there, and what is wrong.
    pub fn parse(text: &str, path: &Path) -> Result<Self, CliError> {
        toml::from_str(text).map_err(|e| {
            let at = e.span().map(|span| {
                let start = span.start.min(text.len());
                let line_no = text.as_bytes()[..start].iter().filter(|&&b| b == b'\n').count() + 1;
                let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
                let key = match line.split_once('=') {
                    Some((k, _)) => format!("key {}", k.trim()),
                    None => format!("'{}'", line.chars().take(60).collect::<String>()),
                };
                format!("line {line_no}, {key}: ")
            });
            let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
            CliError::usage(format!("config file {}: {}{message}", path.display(), at.unwrap_or_default()))
        })
    }

    /// The keys this file sets, as written in a file (`batch-size`); `[sync-options]` is not
    /// among them (see [`TrainFile::sync_options`]).
    pub fn keys(&self) -> Vec<String> {
        let mut keys = vec![];
        macro_rules! set {
            ($($f:ident),*) => { $( if self.$f.is_some() { keys.push(stringify!($f).replace('_', "-")); } )* };
        }
        set!(
            model,
            dataset,
            data_dir,
            batch_size,
            lr,
            momentum,
            weight_decay,
            nesterov,
            schedule,
            epochs,
            target_accuracy,
            seed,
            threads,
            metrics,
            devices,
            learners_per_device,
            sync,
            alpha,
            central_momentum,
            sma_form,
            bn_eval,
            bn_group,
            eval_every,
            eval_every_iterations,
            eval_batch_size,
            train_size,
            test_size,
            workers,
            max_learners,
            tuner_threshold,
            all_reduce,
            checkpoint_dir,
            checkpoint_every,
            keep_checkpoints,
            checkpoint_errors,
            on_divergence,
            max_rollbacks,
            share_checkpoint_dir,
            mpi_timeout
        );
        keys
    }

    /// `other`'s values where set, else `self`'s; the sync options are merged key by key.
    pub fn overridden_by(self, other: TrainFile) -> TrainFile {
        let sync_options = match (self.sync_options, other.sync_options) {
            (Some(mut mine), Some(theirs)) => {
                mine.extend(theirs);
                Some(mine)
            }
            (mine, theirs) => theirs.or(mine),
        };
        macro_rules! pick {
            ($($f:ident),*) => { TrainFile { $($f: other.$f.or(self.$f),)* sync_options } };
        }
        pick!(
            model,
            dataset,
            data_dir,
            batch_size,
            lr,
            momentum,
            weight_decay,
            nesterov,
            schedule,
            epochs,
            target_accuracy,
            seed,
            threads,
            metrics,
            devices,
            learners_per_device,
            sync,
            alpha,
            central_momentum,
            sma_form,
            bn_eval,
            bn_group,
            eval_every,
            eval_every_iterations,
            eval_batch_size,
            train_size,
            test_size,
            workers,
            max_learners,
            tuner_threshold,
            all_reduce,
            checkpoint_dir,
            checkpoint_every,
            keep_checkpoints,
            checkpoint_errors,
            on_divergence,
            max_rollbacks,
            share_checkpoint_dir,
            mpi_timeout
        )
    }
}

/// The validated settings of a training run.
#[derive(Clone, Debug, Serialize)]
pub struct TrainConfig {
    /// The model to train.
    pub model: ModelKind,
    /// The dataset to train and evaluate on.
    pub dataset: DatasetKind,
    /// Directory of the dataset files (unused by the synthetic datasets).
    pub data_dir: PathBuf,
    /// Images per learner per iteration, >= 1.
    pub batch_size: usize,
    /// Base learning rate, > 0 (before the schedule).
    pub lr: f64,
    /// Momentum of each learner's SGD, in `[0, 1)`.
    pub momentum: f64,
    /// L2 weight decay, >= 0.
    pub weight_decay: f64,
    /// Whether the learners use Nesterov momentum.
    pub nesterov: bool,
    /// Learning-rate schedule over epochs (a cosine without total ends at `epochs`).
    #[serde(serialize_with = "ser_display")]
    pub schedule: Schedule,
    /// Epoch limit, > 0 (fractions allowed).
    pub epochs: f64,
    /// Stop when the central model's test accuracy reaches this, in `[0, 1]`.
    pub target_accuracy: Option<f64>,
    /// Seed of initialisation, data order, augmentation and dropout.
    pub seed: u64,
    /// Threads per CPU device (default: the machine's cores divided among the CPU devices).
    pub threads: Option<usize>,
    /// File the JSON-lines metrics are written to, if any.
    pub metrics: Option<PathBuf>,
    /// Which devices train (`auto` = every GPU, else the CPU).
    #[serde(serialize_with = "ser_display")]
    pub devices: DeviceSpec,
    /// Learners per device, fixed or chosen by the auto-tuner.
    pub learners_per_device: LearnersPerDevice,
    /// The synchroniser's registered name (see [`SyncRegistry::build_for`]).
    #[serde(rename = "sync")]
    pub sync_name: String,
    /// `--alpha` (shared synchroniser flag).
    pub alpha: Option<f64>,
    /// `--central-momentum` (shared synchroniser flag).
    pub central_momentum: f64,
    /// `--sma-form` (shared synchroniser flag).
    pub sma_form: Option<String>,
    /// The synchroniser's generic options, as text.
    pub sync_options: BTreeMap<String, String>,
    /// Batch-norm statistics the central model is evaluated with.
    #[serde(serialize_with = "ser_display_bn")]
    pub bn_eval: BnEval,
    /// Whose batch statistics batch norm uses in training.
    #[serde(serialize_with = "ser_display")]
    pub bn_group: BnGroup,
    /// Evaluate every this many epochs.
    pub eval_every: f64,
    /// Evaluate every this many iterations instead (when set).
    pub eval_every_iterations: Option<u64>,
    /// Batch size of evaluation, >= 1.
    pub eval_batch_size: usize,
    /// Training images to use (`None`: synthetic 20000, files all).
    pub train_size: Option<usize>,
    /// Test images to use (`None`: synthetic 4000, files all).
    pub test_size: Option<usize>,
    /// Data pipeline worker threads, >= 1.
    pub workers: usize,
    /// Most learners per device the auto-tuner may use, >= 1.
    pub max_learners: usize,
    /// Relative throughput gain the tuner needs to keep an added learner, >= 0.
    pub tuner_threshold: f64,
    /// How the devices' contributions are summed (`--all-reduce`: host, NCCL, or NCCL when
    /// every device is a GPU and NCCL loads).
    #[serde(serialize_with = "ser_display")]
    pub all_reduce: AllReduceChoice,
    /// Where each setting came from, for error messages ([`TrainConfig::name_of`]).
    #[serde(skip)]
    origins: Origins,
}

fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn ser_display_bn<S: serde::Serializer>(v: &BnEval, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Which settings came from the config file (the others are flags or defaults), so that an
/// error names what the user wrote: `--batch-size`, or the file and its key.
#[derive(Clone, Debug, Default)]
struct Origins {
    file: Option<PathBuf>,
    /// Keys whose value is the file's (not replaced by a flag).
    keys: BTreeSet<String>,
    /// `[sync-options]` keys whose value is the file's.
    sync_options: BTreeSet<String>,
}

impl Origins {
    fn new(file: Option<(&Path, &TrainFile)>, flags: &TrainFile) -> Self {
        let Some((path, file)) = file else { return Origins::default() };
        let flag_keys: BTreeSet<String> = flags.keys().into_iter().collect();
        let flag_opts: BTreeSet<&String> = flags.sync_options.iter().flatten().map(|(k, _)| k).collect();
        Origins {
            file: Some(path.to_path_buf()),
            keys: file.keys().into_iter().filter(|k| !flag_keys.contains(k)).collect(),
            sync_options: file
                .sync_options
                .iter()
                .flatten()
                .map(|(k, _)| k)
                .filter(|k| !flag_opts.contains(k))
                .map(|k| k.trim().to_string())
                .collect(),
        }
    }

    /// `--key`, or `config file F: key` when the value is the file's.
    fn name(&self, key: &str) -> String {
        match &self.file {
            Some(f) if self.keys.contains(key) => format!("config file {}: {key}", f.display()),
            _ => format!("--{key}"),
        }
    }

    /// An error of the synchroniser's options, prefixed with the file and the option when it
    /// is about an option of the file's `[sync-options]`.
    fn sync_error(&self, e: CliError) -> CliError {
        let msg = e.to_string();
        let from_file = self.sync_options.iter().find(|k| {
            msg.contains(&format!("option {k}"))
                || msg.contains(&format!("'{k}'"))
                || msg.contains(&format!("{k}="))
                || msg.contains(&format!("[sync-options] {k}:"))
                || (k.is_empty() && msg.contains("empty name"))
        });
        match (&self.file, from_file) {
            (Some(f), Some(_)) if msg.starts_with("[sync-options]") => {
                CliError::usage(format!("config file {}: {msg}", f.display()))
            }
            (Some(f), Some(k)) => CliError::usage(format!("config file {}: [sync-options] {k}: {msg}", f.display())),
            _ => e,
        }
    }
}

/// Which batch-norm statistics evaluate the central model `z`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BnEval {
    /// The mean of the learners' running statistics (each measured on its own replica).
    LearnerMean,
    /// The first learner's own running statistics (measured on its replica, not on `z`).
    FirstLearner,
    /// Statistics measured on `z` itself over this many training batches before each
    /// evaluation (forward passes in training mode; their time counts as training time).
    Recalibrate(usize),
}

impl BnEval {
    /// Batches of a recalibration when no count is given.
    pub const DEFAULT_BATCHES: usize = 20;
}

impl Default for BnEval {
    fn default() -> Self {
        BnEval::Recalibrate(Self::DEFAULT_BATCHES)
    }
}

impl std::fmt::Display for BnEval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BnEval::LearnerMean => write!(f, "mean"),
            BnEval::FirstLearner => write!(f, "learner"),
            BnEval::Recalibrate(n) => write!(f, "recalibrate:{n}"),
        }
    }
}

impl FromStr for BnEval {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("must be 'mean', 'learner', 'recalibrate' or 'recalibrate:N' with N >= 1 batches, got '{s}'");
        match s.trim().split_once(':') {
            None if s.trim() == "mean" => Ok(BnEval::LearnerMean),
            None if s.trim() == "learner" => Ok(BnEval::FirstLearner),
            None if s.trim() == "recalibrate" => Ok(BnEval::Recalibrate(Self::DEFAULT_BATCHES)),
            Some(("recalibrate", n)) => match n.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(BnEval::Recalibrate(n)),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

fn positive(name: String, v: f64) -> Result<f64, CliError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(CliError::usage(format!("{name} must be a positive number, got {v}")))
    }
}

fn non_negative(name: String, v: f64) -> Result<f64, CliError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(CliError::usage(format!("{name} must be a number >= 0, got {v}")))
    }
}

/// `v`, when it is also a finite 32-bit float (what the kernels compute with): a rate of
/// 1e300 passes as an `f64` but becomes infinite on the device.
fn as_f32(name: String, v: f64) -> Result<f64, CliError> {
    if (v as f32).is_finite() {
        Ok(v)
    } else {
        Err(CliError::usage(format!(
            "{name} {v} is too large (the kernels compute in 32-bit floats, at most {:e})",
            f32::MAX
        )))
    }
}

/// The smallest `--eval-every`, in epochs (below it, `--eval-every-iterations` says what is meant).
pub const MIN_EVAL_EVERY: f64 = 1e-6;

fn at_most(name: String, v: f64, most: f64) -> Result<f64, CliError> {
    if v <= most { Ok(v) } else { Err(CliError::usage(format!("{name} must be at most {most}, got {}", num(v)))) }
}

/// A number as a reader wants it in a message: `1e-300`, not 300 zeros.
fn num(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs()) { format!("{v:e}") } else { v.to_string() }
}

fn fraction(name: String, v: f64) -> Result<f64, CliError> {
    if (0.0..1.0).contains(&v) { Ok(v) } else { Err(CliError::usage(format!("{name} must be in [0, 1), got {v}"))) }
}

/// The `[sync-options]` values as text (numbers, booleans and strings; not arrays or tables).
pub(crate) fn sync_option_texts(
    options: Option<&BTreeMap<String, toml::Value>>,
) -> Result<BTreeMap<String, String>, CliError> {
    let mut out = BTreeMap::new();
    for (key, value) in options.into_iter().flatten() {
        if key.trim().is_empty() {
            return Err(CliError::usage("[sync-options]: an option has an empty name"));
        }
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(CliError::usage(format!(
                    "[sync-options] {key}: must be a number, true/false or a string, got {}",
                    other.type_str()
                )));
            }
        };
        out.insert(key.trim().to_string(), text);
    }
    Ok(out)
}

impl TrainConfig {
    /// Defaults for the built-in run (LeNet-5 on the synthetic digits), overridden by `f`, with
    /// the built-in synchronisers ([`SyncRegistry::builtin`]).
    pub fn from_file(f: TrainFile) -> Result<Self, CliError> {
        Self::from_file_with(f, &SyncRegistry::builtin())
    }

    /// As [`TrainConfig::from_file`], with the synchronisers of `registry`: the name is
    /// resolved and the synchroniser built once to check its options. Errors name the flags.
    pub fn from_file_with(f: TrainFile, registry: &SyncRegistry) -> Result<Self, CliError> {
        Self::build(f, registry, Origins::default())
    }

    /// The settings of a config file read from a path (if any) overridden by the flags: as
    /// [`TrainConfig::from_file_with`], except that an error about a value of the file names
    /// the file and its key instead of the flag.
    pub fn from_sources(
        file: Option<(&Path, TrainFile)>,
        flags: TrainFile,
        registry: &SyncRegistry,
    ) -> Result<Self, CliError> {
        let origins = Origins::new(file.as_ref().map(|(p, f)| (*p, f)), &flags);
        let merged = match file {
            Some((_, f)) => f.overridden_by(flags),
            None => flags,
        };
        Self::build(merged, registry, origins)
    }

    /// How to name setting `key` (as in a file: `batch-size`) in a message: `--batch-size`, or
    /// `config file run.toml: batch-size` when the value came from the config file.
    pub fn name_of(&self, key: &str) -> String {
        self.origins.name(key)
    }

    fn build(f: TrainFile, registry: &SyncRegistry, o: Origins) -> Result<Self, CliError> {
        let usage = |key: &str, e: &dyn std::fmt::Display| CliError::usage(format!("{}: {e}", o.name(key)));
        let dataset: DatasetKind = match &f.dataset {
            Some(d) => d.parse().map_err(|e: crossbow_data::DataError| usage("dataset", &e))?,
            None => DatasetKind::SyntheticDigits,
        };
        let default_model = if dataset.image_shape()[0] == 1 { "lenet5" } else { "resnet20" };
        let model: ModelKind =
            f.model.as_deref().unwrap_or(default_model).parse().map_err(|e: String| usage("model", &e))?;
        let batch_size = f.batch_size.unwrap_or(32);
        if batch_size == 0 {
            return Err(CliError::usage(format!("{} must be at least 1, got 0", o.name("batch-size"))));
        }
        let lr = as_f32(o.name("lr"), positive(o.name("lr"), f.lr.unwrap_or(0.01))?)?;
        if !(lr as f32).is_normal() {
            return Err(CliError::usage(format!(
                "{} {} is too small (the kernels compute in 32-bit floats, whose smallest normal number is {:e})",
                o.name("lr"),
                num(lr),
                f32::MIN_POSITIVE
            )));
        }
        let momentum = fraction(o.name("momentum"), f.momentum.unwrap_or(0.9))?;
        let weight_decay =
            as_f32(o.name("weight-decay"), non_negative(o.name("weight-decay"), f.weight_decay.unwrap_or(5e-4))?)?;
        let nesterov = f.nesterov.unwrap_or(false);
        if nesterov && momentum == 0.0 {
            return Err(CliError::usage(format!("{} needs momentum > 0 (momentum is 0)", o.name("nesterov"))));
        }
        let epochs = at_most(o.name("epochs"), positive(o.name("epochs"), f.epochs.unwrap_or(4.0))?, 1e6)?;
        let mut schedule: Schedule =
            f.schedule.as_deref().unwrap_or("constant").parse().map_err(|e: String| usage("schedule", &e))?;
        if let Schedule::Cosine { total, min_factor } = schedule
            && total.is_nan()
        {
            schedule = Schedule::Cosine { total: epochs, min_factor };
        }
        let target_accuracy = match f.target_accuracy {
            None => None,
            Some(t) if (0.0..=1.0).contains(&t) => Some(t),
            Some(t) if t > 1.0 && t <= 100.0 => Some(t / 100.0),
            Some(t) => {
                return Err(CliError::usage(format!(
                    "{} must be in (0, 1] or a percentage, got {t}",
                    o.name("target-accuracy")
                )));
            }
        };
        if let Some(0) = f.threads {
            return Err(CliError::usage(format!("{} must be at least 1, got 0", o.name("threads"))));
        }
        let devices: DeviceSpec =
            f.devices.as_deref().unwrap_or("auto").parse().map_err(|e: String| usage("devices", &e))?;
        let cpu_devices = match devices {
            DeviceSpec::Cpu(n) => n,
            _ => 1,
        };
        let (devices_name, threads_name) = (o.name("devices"), o.name("threads"));
        let names = crate::preflight::DeviceNames { devices: &devices_name, threads: &threads_name };
        crate::preflight::check_cpu_devices(cpu_devices, f.threads, crate::train::cores(), &names)
            .map_err(CliError::usage)?;
        let learners_per_device: LearnersPerDevice = f
            .learners_per_device
            .as_deref()
            .unwrap_or("auto")
            .parse()
            .map_err(|e: String| usage("learners-per-device", &e))?;
        if let Some(a) = f.alpha {
            as_f32(o.name("alpha"), non_negative(o.name("alpha"), a)?)?;
        }
        let central_momentum = fraction(o.name("central-momentum"), f.central_momentum.unwrap_or(0.9))?;
        if let Some(form) = &f.sma_form {
            SmaForm::parse(form).map_err(|e| usage("sma-form", &e))?;
        }
        let sync_name =
            registry.resolve(f.sync.as_deref().unwrap_or("sma")).map_err(|e| usage("sync", &e))?.to_string();
        let sync_options = sync_option_texts(f.sync_options.as_ref()).map_err(|e| o.sync_error(e))?;
        let eval_every =
            at_most(o.name("eval-every"), positive(o.name("eval-every"), f.eval_every.unwrap_or(1.0))?, 1e6)?;
        if eval_every < MIN_EVAL_EVERY {
            return Err(CliError::usage(format!(
                "{} {} is below {MIN_EVAL_EVERY} epochs (use --eval-every-iterations 1 to evaluate after every iteration)",
                o.name("eval-every"),
                num(eval_every)
            )));
        }
        let bn_eval: BnEval = match &f.bn_eval {
            Some(t) => t.parse().map_err(|e: String| usage("bn-eval", &e))?,
            None => BnEval::default(),
        };
        let bn_group: BnGroup = match &f.bn_group {
            Some(t) => t.parse().map_err(|e: String| usage("bn-group", &e))?,
            None => BnGroup::default(),
        };
        if f.eval_every_iterations == Some(0) {
            return Err(CliError::usage(format!("{} must be at least 1, got 0", o.name("eval-every-iterations"))));
        }
        let eval_batch_size = f.eval_batch_size.unwrap_or(500);
        if eval_batch_size == 0 {
            return Err(CliError::usage(format!("{} must be at least 1, got 0", o.name("eval-batch-size"))));
        }
        let workers = f.workers.unwrap_or(2);
        if workers == 0 {
            return Err(CliError::usage(format!("{} must be at least 1, got 0", o.name("workers"))));
        }
        let max_learners = f.max_learners.unwrap_or(8);
        if max_learners == 0 {
            return Err(CliError::usage(format!("{} must be at least 1, got 0", o.name("max-learners"))));
        }
        // Upper bounds: far above any real use, low enough that a typo cannot make a run
        // allocate or loop for hours before its first iteration.
        // (Batch sizes and learner counts are checked against the data and the memory by the
        // preflight, with the figures.)
        for (key, value, most) in [("workers", workers, 1024usize), ("max-learners", max_learners, 1024)] {
            if value > most {
                return Err(CliError::usage(format!("{} must be at most {most}, got {value}", o.name(key))));
            }
        }
        let tuner_threshold = at_most(
            o.name("tuner-threshold"),
            non_negative(o.name("tuner-threshold"), f.tuner_threshold.unwrap_or(0.05))?,
            100.0,
        )?;
        let all_reduce: AllReduceChoice =
            f.all_reduce.as_deref().unwrap_or("auto").parse().map_err(|e: String| usage("all-reduce", &e))?;
        if all_reduce == AllReduceChoice::Nccl && matches!(devices, DeviceSpec::Cpu(_)) {
            return Err(CliError::usage(format!(
                "{} nccl sums GPU buffers, but {} is {devices}; use {} host or auto, or GPUs (cuda, cuda:0,1)",
                o.name("all-reduce"),
                o.name("devices"),
                o.name("all-reduce")
            )));
        }
        let data_dir = f.data_dir.clone().unwrap_or_else(|| PathBuf::from("data"));
        if !dataset.is_synthetic() && !data_dir.is_dir() {
            // Blame what the user wrote: the directory, or else the dataset that needs one.
            let what = if f.data_dir.is_some() {
                format!("{} {}", o.name("data-dir"), data_dir.display())
            } else {
                format!("{} {} needs --data-dir; the default {}", o.name("dataset"), dataset.name(), data_dir.display())
            };
            return Err(CliError::usage(format!(
                "{what}: no such directory (dataset {} is read from files; the built-in datasets are synthetic-digits and synthetic-shapes)",
                dataset.name()
            )));
        }
        for (key, size) in [("train-size", f.train_size), ("test-size", f.test_size)] {
            if size == Some(0) {
                return Err(CliError::usage(format!("{} must be at least 1, got 0", o.name(key))));
            }
        }
        let cfg = TrainConfig {
            model,
            dataset,
            data_dir,
            batch_size,
            lr,
            momentum,
            weight_decay,
            nesterov,
            schedule,
            epochs,
            target_accuracy,
            seed: f.seed.unwrap_or(1),
            threads: f.threads,
            metrics: f.metrics,
            devices,
            learners_per_device,
            sync_name,
            alpha: f.alpha,
            central_momentum,
            sma_form: f.sma_form,
            bn_eval,
            bn_group,
            sync_options,
            eval_every,
            eval_every_iterations: f.eval_every_iterations,
            eval_batch_size,
            train_size: f.train_size,
            test_size: f.test_size,
            workers,
            max_learners,
            tuner_threshold,
            all_reduce,
            origins: Origins::default(),
        };
        registry.build_for(&cfg).map_err(|e| o.sync_error(e))?;
        Ok(TrainConfig { origins: o, ..cfg })
    }

    /// The synchroniser as the `crossbow-sma` enum, for the built-in names `sma`, `ssgd` and
    /// `easgd` (`None` for any other): for running a built-in on a backend of your own with
    /// [`SyncKind::build`].
    pub fn builtin_sync(&self) -> Option<SyncKind> {
        let mut kind =
            SyncKind::parse(&self.sync_name, self.alpha.map(|a| a as f32), self.central_momentum as f32).ok()?;
        if let (SyncKind::Sma { form, .. }, Some(f)) = (&mut kind, &self.sma_form) {
            *form = SmaForm::parse(f).ok()?;
        }
        Some(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_built_in_run() {
        let c = TrainConfig::from_file(TrainFile::default()).unwrap();
        assert_eq!(c.model, ModelKind::LeNet5);
        assert_eq!(c.dataset, DatasetKind::SyntheticDigits);
        assert_eq!(c.learners_per_device, LearnersPerDevice::Auto);
        assert_eq!(c.devices, DeviceSpec::Auto);
    }

    #[test]
    fn flags_override_the_file() {
        let file: TrainFile = toml::from_str("model = \"resnet20\"\nbatch-size = 64\nlr = 0.1\n").unwrap();
        let flags = TrainFile { batch_size: Some(16), ..Default::default() };
        let c = TrainConfig::from_file(file.overridden_by(flags)).unwrap();
        assert_eq!(c.model, ModelKind::ResNetCifar(20));
        assert_eq!(c.batch_size, 16);
        assert_eq!(c.lr, 0.1);
    }

    #[test]
    fn all_reduce_is_parsed_and_nccl_needs_gpus() {
        assert_eq!(TrainConfig::from_file(TrainFile::default()).unwrap().all_reduce, AllReduceChoice::Auto);
        let file: TrainFile = toml::from_str("all-reduce = \"nccl\"\ndevices = \"cuda:0\"\n").unwrap();
        assert_eq!(file.keys(), ["devices", "all-reduce"]);
        assert_eq!(TrainConfig::from_file(file).unwrap().all_reduce, AllReduceChoice::Nccl);
        let bad = TrainFile { all_reduce: Some("mpi".into()), ..Default::default() };
        let e = TrainConfig::from_file(bad).unwrap_err().to_string();
        assert!(e.contains("--all-reduce") && e.contains("'mpi'"), "{e}");
        let cpu = TrainFile { all_reduce: Some("nccl".into()), devices: Some("cpu:2".into()), ..Default::default() };
        let e = TrainConfig::from_file(cpu).unwrap_err().to_string();
        assert!(e.contains("--all-reduce nccl sums GPU buffers") && e.contains("--devices is cpu:2"), "{e}");
        let host = TrainFile { all_reduce: Some("host".into()), devices: Some("cpu".into()), ..Default::default() };
        assert_eq!(TrainConfig::from_file(host).unwrap().all_reduce, AllReduceChoice::Host);
    }

    #[test]
    fn bad_values_name_the_flag() {
        let cases: Vec<(TrainFile, &str)> = vec![
            (TrainFile { model: Some("alexnet".into()), ..Default::default() }, "--model"),
            (TrainFile { dataset: Some("imagenet".into()), ..Default::default() }, "--dataset"),
            (TrainFile { batch_size: Some(0), ..Default::default() }, "--batch-size"),
            (TrainFile { lr: Some(-1.0), ..Default::default() }, "--lr"),
            (TrainFile { momentum: Some(1.5), ..Default::default() }, "--momentum"),
            (TrainFile { schedule: Some("steps".into()), ..Default::default() }, "--schedule"),
            (TrainFile { devices: Some("tpu".into()), ..Default::default() }, "--devices"),
            (TrainFile { learners_per_device: Some("0".into()), ..Default::default() }, "--learners-per-device"),
            (TrainFile { sync: Some("hogwild".into()), ..Default::default() }, "--sync"),
            (TrainFile { target_accuracy: Some(140.0), ..Default::default() }, "--target-accuracy"),
            (
                TrainFile {
                    dataset: Some("mnist".into()),
                    data_dir: Some("/nonexistent/x".into()),
                    ..Default::default()
                },
                "--data-dir",
            ),
        ];
        for (f, flag) in cases {
            let e = TrainConfig::from_file(f).unwrap_err().to_string();
            assert!(e.contains(flag), "{flag}: {e}");
        }
    }

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("crossbow-cfg-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn from_text(path: &Path, text: &str, flags: TrainFile) -> Result<TrainConfig, CliError> {
        let file = TrainFile::parse(text, path)?;
        TrainConfig::from_sources(Some((path, file)), flags, &SyncRegistry::builtin())
    }

    #[test]
    fn values_from_the_config_file_are_named_by_file_and_key() {
        let p = temp_file("named", "");
        let file = format!("config file {}", p.display());
        for (text, key) in [
            ("batch-size = 0", "batch-size"),
            ("lr = nan", "lr"),
            ("lr = inf", "lr"),
            ("momentum = 1.0", "momentum"),
            ("momentum = nan", "momentum"),
            ("weight-decay = -1", "weight-decay"),
            ("weight-decay = nan", "weight-decay"),
            ("central-momentum = nan", "central-momentum"),
            ("alpha = -0.5", "alpha"),
            ("alpha = 1.7e56", "alpha"),
            ("lr = 1e300", "lr"),
            ("weight-decay = 1e39", "weight-decay"),
            ("epochs = 0", "epochs"),
            ("eval-batch-size = 0", "eval-batch-size"),
            ("learners-per-device = 0", "learners-per-device"),
            ("learners-per-device = \"many\"", "learners-per-device"),
            ("devices = \"tpu\"", "devices"),
            ("devices = \"cpu:100000\"", "devices"),
            ("threads = 100000", "threads"),
            ("sync = \"hogwild\"", "sync"),
            ("sma-form = \"fancy\"", "sma-form"),
            ("bn-eval = \"sometimes\"", "bn-eval"),
            ("schedule = \"steps\"", "schedule"),
            ("model = \"alexnet\"", "model"),
            ("dataset = \"mnist\"", "dataset"),
            ("nesterov = true\nmomentum = 0.0", "nesterov"),
            ("sync = \"sma\"\n[sync-options]\nperiod = 3", "[sync-options] period"),
        ] {
            let e = from_text(&p, text, TrainFile::default()).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{file}: {key}")), "{text}: {e}");
            assert!(!e.contains('\n'), "{text}: {e}");
        }
        // The same key given as a flag too: the flag's value is used and named.
        let flags = TrainFile { lr: Some(-1.0), ..TrainFile::default() };
        let e = from_text(&p, "lr = 0.1", flags).unwrap_err().to_string();
        assert_eq!(e, "--lr must be a positive number, got -1");
        // A bad value from the file replaced by a good flag is no error.
        let flags = TrainFile { batch_size: Some(8), ..TrainFile::default() };
        assert_eq!(from_text(&p, "batch-size = 0", flags).unwrap().batch_size, 8);
        std::fs::remove_dir_all(p.parent().unwrap()).ok();
    }

    #[test]
    fn learners_per_device_is_a_number_or_auto_in_a_file() {
        let p = temp_file("learners", "");
        let k = |text: &str| from_text(&p, text, TrainFile::default()).map(|c| c.learners_per_device);
        assert_eq!(k("learners-per-device = 2").unwrap(), LearnersPerDevice::Fixed(2));
        assert_eq!(k("learners-per-device = \"3\"").unwrap(), LearnersPerDevice::Fixed(3));
        assert_eq!(k("learners-per-device = \"auto\"").unwrap(), LearnersPerDevice::Auto);
        for bad in ["learners-per-device = -1", "learners-per-device = 2.5", "learners-per-device = true"] {
            let e = k(bad).unwrap_err().to_string();
            assert!(e.contains(&p.display().to_string()) && e.contains("learners-per-device"), "{bad}: {e}");
        }
        std::fs::remove_dir_all(p.parent().unwrap()).ok();
    }

    #[test]
    fn toml_errors_are_one_line_with_the_line_and_key() {
        let p = Path::new("run.toml");
        let e = TrainFile::parse("model = \"lenet5\"\nbatch-size = \"x\"\n", p).unwrap_err().to_string();
        assert_eq!(e, "config file run.toml: line 2, key batch-size: invalid type: string \"x\", expected usize");
        let e = TrainFile::parse("lr = = 3\n", p).unwrap_err().to_string();
        assert!(e.starts_with("config file run.toml: line 1, key lr: ") && !e.contains('\n'), "{e}");
        let e = TrainFile::parse("[oops\n", p).unwrap_err().to_string();
        assert!(e.starts_with("config file run.toml: line 1, '[oops': ") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn the_resolved_config_prints_values_as_the_flags_take_them() {
        let f = TrainFile {
            learners_per_device: Some("4".into()),
            schedule: Some("multistep:80,120".into()),
            devices: Some("cpu".into()),
            ..TrainFile::default()
        };
        let c = TrainConfig::from_file(f).unwrap();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["learners_per_device"], serde_json::json!(4));
        assert_eq!(v["schedule"], "multistep:80,120:0.1");
        assert_eq!(v["devices"], "cpu:1");
        assert_eq!(v["sync"], "sma");
        assert_eq!(v["bn_eval"], "recalibrate:20");
        // Each printed value is accepted back by its flag.
        let back = TrainFile {
            learners_per_device: Some(v["learners_per_device"].to_string()),
            schedule: v["schedule"].as_str().map(String::from),
            devices: v["devices"].as_str().map(String::from),
            bn_eval: v["bn_eval"].as_str().map(String::from),
            ..TrainFile::default()
        };
        let c2 = TrainConfig::from_file(back).unwrap();
        assert_eq!((c2.learners_per_device, c2.schedule, c2.devices), (c.learners_per_device, c.schedule, c.devices));
        let auto = serde_json::to_value(TrainConfig::from_file(TrainFile::default()).unwrap()).unwrap();
        assert_eq!(auto["learners_per_device"], "auto");
    }

    #[test]
    fn unknown_config_keys_are_errors() {
        let dir = std::env::temp_dir().join(format!("crossbow-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.toml");
        std::fs::write(&p, "bach-size = 3\n").unwrap();
        let e = TrainFile::read(&p).unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("bach-size"), "{e}");
        assert!(TrainFile::read(&dir.join("missing.toml")).unwrap_err().to_string().contains("missing.toml"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
