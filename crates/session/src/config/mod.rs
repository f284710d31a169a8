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

use crossbow_replica::Schedule;
use crossbow_replica::engine::AllReduceChoice;
use crossbow_tensor::DeviceSpec;
use serde::Serialize;

use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::settings::printable;
pub use crate::settings::{TrainFile, Values};

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
                _ => Err(format!("must be 'auto' or a whole number >= 1, got {s:?}")),
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

/// When the auto-tuner re-opens its search after settling (`--tuner-retune`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TunerRetune {
    /// Never under `ssgd`, where the learner count is the aggregate batch (k learners at
    /// batch b train as one at k·b), so a change mid-run changes the optimisation in the middle
    /// of a learning-rate schedule tuned for the other; on a 20% drop of throughput under any
    /// other synchroniser, and under `ssgd` with a global batch (`--global-batch-size`),
    /// which fixes the aggregate.
    Auto,
    /// Never: the count settled on stays for the run.
    Off,
    /// When throughput falls by more than this fraction of the settled reference (in (0, 1)).
    Drop(f64),
}

impl TunerRetune {
    /// The tuner's `retune_drop` under synchroniser `sync` (`1.0`: never re-opens);
    /// `global_batch`: the aggregate batch is fixed (`--global-batch-size`), so under `ssgd`
    /// too a new count changes only the speed, and `auto` re-tunes on a 20% drop.
    pub fn drop_under(self, sync: &str, global_batch: bool) -> f64 {
        match self {
            TunerRetune::Auto if sync == "ssgd" && !global_batch => 1.0,
            TunerRetune::Auto => 0.2,
            TunerRetune::Off => 1.0,
            TunerRetune::Drop(x) => x,
        }
    }
}

impl FromStr for TunerRetune {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(TunerRetune::Auto),
            "off" => Ok(TunerRetune::Off),
            t => match t.parse::<f64>() {
                Ok(x) if x > 0.0 && x < 1.0 => Ok(TunerRetune::Drop(x)),
                _ => Err(format!("must be 'auto', 'off' or a fraction in (0, 1) such as 0.3, got {s:?}")),
            },
        }
    }
}

/// As the flag takes it.
impl std::fmt::Display for TunerRetune {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TunerRetune::Auto => write!(f, "auto"),
            TunerRetune::Off => write!(f, "off"),
            TunerRetune::Drop(x) => write!(f, "{x}"),
        }
    }
}

impl TrainFile {
    /// Reads a TOML config file; errors name the file (and the line and key, for bad values).
    pub fn read(path: &Path) -> Result<Self, SessionError> {
        Self::read_with(path, &SyncRegistry::builtin())
    }

    /// Reads a TOML config file whose top-level keys may also be the option flags of
    /// `registry`'s synchronisers (`alpha = 0.1`: SMA's option `alpha`).
    pub fn read_with(path: &Path, registry: &SyncRegistry) -> Result<Self, SessionError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SessionError::usage(format!("config file {}: {e}", path.display())))?;
        Self::parse_with(&text, path, registry)
    }

    /// Parses the text of a TOML config file read from `path` (named in errors). An error is
    /// one line: the file, the line number and the key (or the text) there, and what is wrong.
    /// The built-in synchronisers' option flags are keys too ([`TrainFile::parse_with`]).
    pub fn parse(text: &str, path: &Path) -> Result<Self, SessionError> {
        Self::parse_with(text, path, &SyncRegistry::builtin())
    }

    /// [`TrainFile::parse`], with the option flags of `registry`'s synchronisers as keys: they
    /// are moved into `[sync-options]` (`alpha = 0.1` is `[sync-options] alpha = 0.1`).
    pub fn parse_with(text: &str, path: &Path, registry: &SyncRegistry) -> Result<Self, SessionError> {
        let flags = registry.option_flags();
        // Only a file that uses option keys takes this path (its errors carry no line numbers).
        if let Ok(mut table) = toml::from_str::<toml::Table>(text)
            && flags.iter().any(|(f, _)| table.contains_key(f))
        {
            registry
                .lift_option_keys(&mut table, false)
                .map_err(|e| SessionError::usage(format!("config file {}: {e}", path.display())))?;
            return toml::Value::Table(table).try_into().map_err(|e| toml_error(&e, text, path, false));
        }
        toml::from_str(text).map_err(|e| toml_error(&e, text, path, true))
    }
}

/// A TOML error as one line: the file, the line number and the key (or the text) there when
/// `spans` (the error's positions are in `text`), and what is wrong.
fn toml_error(e: &toml::de::Error, text: &str, path: &Path, spans: bool) -> SessionError {
    let at = e.span().filter(|_| spans).map(|span| {
        let start = span.start.min(text.len());
        let line_no = text.as_bytes()[..start].iter().filter(|&&b| b == b'\n').count() + 1;
        let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
        let key = match line.split_once('=') {
            Some((k, _)) => format!("key {}", k.trim()),
            None => format!("'{}'", line.chars().take(60).collect::<String>()),
        };
        format!("line {line_no}, {key}: ")
    });
    let mut message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    // An unknown key: the closest known one, not the list of fifty.
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((field, _)) = rest.split_once('`')
    {
        let keys = crate::settings::SETTINGS.iter().map(|s| s.key).chain(["sync-options"]);
        message = match closest(field, keys) {
            Some(k) => format!("unknown key `{field}`; did you mean `{k}`? (crossbow train --help lists them)"),
            None => format!("unknown key `{field}` (crossbow train --help lists the keys)"),
        };
    }
    SessionError::usage(format!("config file {}: {}{message}", path.display(), at.unwrap_or_default()))
}

/// The candidate nearest to `word` by edit distance, when it is near enough to be a typo
/// (at most a third of the word's length, and at least 1).
pub fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
    let limit = (word.chars().count() / 3).max(1);
    candidates.map(|c| (distance(word, c), c)).filter(|(d, _)| *d <= limit).min().map(|(_, c)| c)
}

/// The validated settings of a training run: every setting of the table
/// ([`crate::settings`]) typed and range-checked ([`Values`], reached through `Deref`:
/// `cfg.batch_size`), the synchroniser's options, and where each value came from (for
/// messages).
#[derive(Clone, Debug)]
pub struct TrainConfig {
    values: Values,
    /// The synchroniser's generic options, as text.
    pub sync_options: BTreeMap<String, String>,
    /// Where each setting came from, for error messages ([`TrainConfig::name_of`]).
    origins: Origins,
}

impl std::ops::Deref for TrainConfig {
    type Target = Values;
    fn deref(&self) -> &Values {
        &self.values
    }
}

impl std::ops::DerefMut for TrainConfig {
    fn deref_mut(&mut self) -> &mut Values {
        &mut self.values
    }
}

/// As a config file writes it (the keys of [`TrainFile`]: `batch-size`, ...), every setting
/// set, with the synchroniser's options.
impl Serialize for TrainConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_file().serialize(s)
    }
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

    /// How the user gave synchroniser option `key`: `config file F: alpha` (a top-level
    /// option key) or `config file F: [sync-options] key` from the file, else its flag
    /// (`--alpha`) or `--sync-opt key`.
    fn option_name(&self, key: &str, registry: &SyncRegistry) -> String {
        let flag = registry.option_flags().into_iter().find(|(_, o)| o == key).map(|(f, _)| f);
        match (&self.file, flag) {
            (Some(f), Some(flag)) if self.sync_options.contains(key) => format!("config file {}: {flag}", f.display()),
            (Some(f), None) if self.sync_options.contains(key) => {
                format!("config file {}: [sync-options] {key}", f.display())
            }
            (_, Some(flag)) => format!("--{flag}"),
            (_, None) => format!("--sync-opt {key}"),
        }
    }

    /// An error of the synchroniser's options, prefixed with the file and the option when it
    /// is about an option of the file's `[sync-options]`.
    fn sync_error(&self, e: SessionError, registry: &SyncRegistry) -> SessionError {
        let mut msg = e.to_string();
        let flags = registry.option_flags();
        // An option the synchroniser does not use: named where it was given.
        if msg.contains(" a setting of --sync ") {
            for (flag, key) in &flags {
                let name = self.option_name(key, registry);
                if name != format!("--{flag}") {
                    msg = msg
                        .replace(&format!("--{flag} "), &format!("{name} "))
                        .replace(&format!("--{flag},"), &format!("{name},"));
                }
            }
            return SessionError::usage(printable(&msg));
        }
        let flag_of = |k: &str| flags.iter().find(|(_, o)| o == k).map(|(f, _)| f.clone());
        let from_file = self.sync_options.iter().find(|k| {
            msg.contains(&format!("option {k}"))
                || msg.contains(&format!("'{k}'"))
                || msg.contains(&format!("{k}="))
                || msg.contains(&format!("[sync-options] {k}:"))
                || (k.is_empty() && msg.contains("empty name"))
                || flag_of(k).is_some_and(|f| msg.contains(&format!("--{f} ")) || msg.contains(&format!("--{f}:")))
        });
        // Keys and values are quoted as given: escaped, so that the message stays one line.
        let (one, key) = (printable(&msg), from_file.map(|k| printable(k)));
        match (&self.file, key) {
            (Some(f), Some(_)) if msg.starts_with("[sync-options]") => {
                SessionError::usage(format!("config file {}: {one}", f.display()))
            }
            // An option with a flag of its own is a top-level key of the file too.
            (Some(f), Some(k)) => match flag_of(&k) {
                Some(flag) => SessionError::usage(format!("config file {}: {flag}: {one}", f.display())),
                None => SessionError::usage(format!("config file {}: [sync-options] {k}: {one}", f.display())),
            },
            _ if e.is_usage() => SessionError::usage(one),
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

/// `--augment`: the training augmentation, `auto` being the dataset's default
/// ([`crossbow_data::Dataset::default_augment`]: crop-flip for 32x32 colour images,
/// resized-crop-flip for folder data, none otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AugmentChoice {
    /// The dataset's default.
    #[default]
    Auto,
    /// This augmentation.
    Set(crossbow_data::Augment),
}

impl std::fmt::Display for AugmentChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AugmentChoice::Auto => f.write_str("auto"),
            AugmentChoice::Set(a) => write!(f, "{a}"),
        }
    }
}

impl FromStr for AugmentChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(AugmentChoice::Auto);
        }
        s.parse().map(AugmentChoice::Set).map_err(|e: String| e.replace("(valid: ", "(valid: auto, "))
    }
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
            || format!("must be 'mean', 'learner', 'recalibrate' or 'recalibrate:N' with N >= 1 batches, got {s:?}");
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

/// The `[sync-options]` values as text (numbers, booleans and strings; not arrays or tables).
pub(crate) fn sync_option_texts(
    options: Option<&BTreeMap<String, toml::Value>>,
) -> Result<BTreeMap<String, String>, SessionError> {
    let mut out = BTreeMap::new();
    for (key, value) in options.into_iter().flatten() {
        // Named trimmed, as the option is stored and as `Origins` finds it in a message
        // (a key with a tab in front once came out without the file's name).
        let key = key.trim();
        if key.is_empty() {
            return Err(SessionError::usage("[sync-options]: an option has an empty name"));
        }
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(SessionError::usage(format!(
                    "[sync-options] {key}: must be a number, true/false or a string, got {}",
                    other.type_str()
                )));
            }
        };
        out.insert(key.to_string(), text);
    }
    Ok(out)
}

impl TrainConfig {
    /// Defaults for the built-in run (LeNet-5 on the synthetic digits), overridden by `f`, with
    /// the built-in synchronisers ([`SyncRegistry::builtin`]).
    pub fn from_file(f: TrainFile) -> Result<Self, SessionError> {
        Self::from_file_with(f, &SyncRegistry::builtin())
    }

    /// As [`TrainConfig::from_file`], with the synchronisers of `registry`: the name is
    /// resolved and the synchroniser built once to check its options. Errors name the flags.
    pub fn from_file_with(f: TrainFile, registry: &SyncRegistry) -> Result<Self, SessionError> {
        Self::build(f, registry, Origins::default())
    }

    /// The settings of a config file read from a path (if any) overridden by the flags: as
    /// [`TrainConfig::from_file_with`], except that an error about a value of the file names
    /// the file and its key instead of the flag.
    pub fn from_sources(
        file: Option<(&Path, TrainFile)>,
        flags: TrainFile,
        registry: &SyncRegistry,
    ) -> Result<Self, SessionError> {
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

    fn build(f: TrainFile, registry: &SyncRegistry, o: Origins) -> Result<Self, SessionError> {
        // Each setting alone: parsed, range-checked, defaulted (the table in `settings`).
        let mut v = Values::resolve(&f, &|key| o.name(key)).map_err(SessionError::usage)?;
        // What depends on several settings.
        if v.nesterov && v.momentum == 0.0 {
            return Err(SessionError::usage(format!("{} needs momentum > 0 (momentum is 0)", o.name("nesterov"))));
        }
        if let Schedule::Cosine { total, min_factor } = v.schedule
            && total.is_nan()
        {
            v.schedule = Schedule::Cosine { total: v.epochs, min_factor };
        }
        v.target_accuracy = v.target_accuracy.map(|t| if t > 1.0 { t / 100.0 } else { t });
        let cpu_devices = match v.devices {
            DeviceSpec::Cpu(n) => n,
            _ => 1,
        };
        let (devices_name, threads_name) = (o.name("devices"), o.name("threads"));
        let names = crate::preflight::DeviceNames { devices: &devices_name, threads: &threads_name };
        crate::preflight::check_cpu_devices(cpu_devices, v.threads, crate::train::cores(), &names)
            .map_err(SessionError::usage)?;
        v.sync =
            registry.resolve(&v.sync).map_err(|e| SessionError::usage(format!("{}: {e}", o.name("sync"))))?.to_string();
        let sync_options = sync_option_texts(f.sync_options.as_ref()).map_err(|e| o.sync_error(e, registry))?;
        if let Some(n) = v.global_batch_size {
            if let Some(b) = f.batch_size {
                return Err(SessionError::usage(format!(
                    "{} {n} and {} {b} are both set: with a global batch each learner trains on its share of it (N / learners); leave batch-size out",
                    o.name("global-batch-size"),
                    o.name("batch-size"),
                )));
            }
            if v.sync != "ssgd" {
                return Err(SessionError::usage(format!(
                    "{} {n} keeps S-SGD's aggregate batch fixed, but {} is {} (its learners each step on their own batch, whose size is part of the method); use --sync ssgd, or {} per learner",
                    o.name("global-batch-size"),
                    o.name("sync"),
                    v.sync,
                    o.name("batch-size")
                )));
            }
            // One learner alone takes the whole batch; the engine splits it among more.
            v.batch_size = n;
        }
        if f.sync.is_none()
            && let Some(entry) = registry.entry(&v.sync)
        {
            // Options of another synchroniser given without --sync, on a model whose default
            // does not read them: say so rather than train with one that ignores them.
            let foreign: Vec<&String> = sync_options.keys().filter(|k| !entry.reads(k)).collect();
            let readers: Vec<&str> = match foreign.first() {
                Some(k) => registry.readers_of(k),
                None => vec![],
            };
            if let Some(reader) = readers.first() {
                let named: Vec<String> = foreign.iter().map(|k| o.option_name(k, registry)).collect();
                let from_file = named.iter().any(|n| n.starts_with("config file"));
                let fix =
                    if from_file { format!("sync = \"{reader}\" to the file") } else { format!("--sync {reader}") };
                return Err(SessionError::usage(format!(
                    "{} set {}, but {} trains with {} by default and no synchroniser is given; add {fix}, or leave {} out",
                    named.join(", "),
                    readers.join(" or "),
                    v.model,
                    v.sync,
                    if named.len() == 1 { "it" } else { "them" }
                )));
            }
        }
        if v.all_reduce == AllReduceChoice::Nccl && matches!(v.devices, DeviceSpec::Cpu(_)) {
            return Err(SessionError::usage(format!(
                "{} nccl sums GPU buffers, but {} is {}; use {} host or auto, or GPUs (cuda, cuda:0,1)",
                o.name("all-reduce"),
                o.name("devices"),
                v.devices,
                o.name("all-reduce")
            )));
        }
        if !v.dataset.is_synthetic() && !v.data_dir.is_dir() {
            // Blame what the user wrote: the directory, or else the dataset that needs one.
            let what = if f.data_dir.is_some() {
                format!("{} {}", o.name("data-dir"), v.data_dir.display())
            } else {
                format!(
                    "{} {} needs --data-dir; the default {}",
                    o.name("dataset"),
                    v.dataset.name(),
                    v.data_dir.display()
                )
            };
            return Err(SessionError::usage(format!(
                "{what}: no such directory (dataset {} is read from files; the built-in datasets are synthetic-digits and synthetic-shapes)",
                v.dataset.name()
            )));
        }
        let cfg = TrainConfig { values: v, sync_options, origins: Origins::default() };
        registry.build_for(&cfg).map_err(|e| o.sync_error(e, registry))?;
        Ok(TrainConfig { origins: o, ..cfg })
    }

    /// Every setting as a config file writes it (`crossbow train --config` reads it back to
    /// the same settings; a checkpoint saves it).
    pub fn to_file(&self) -> TrainFile {
        let mut f = self.values.to_file();
        if self.global_batch_size.is_some() {
            // Derived from the global batch (the file gives that alone, as the user did).
            f.batch_size = None;
        }
        f.sync_options = (!self.sync_options.is_empty())
            .then(|| self.sync_options.iter().map(|(k, v)| (k.clone(), toml::Value::String(v.clone()))).collect());
        f
    }
}

#[cfg(test)]
mod tests;
