//! Every setting of a training run, declared once.
//!
//! One table ([`settings!`] below) gives each setting its key (the flag `--KEY` and the
//! config-file key `KEY = ...`), its type as written and its type once validated, its
//! default, its range check, whether a resumed run may change it, whether `crossbow
//! explore` may vary it, and its help text. From that table come:
//!
//! * [`TrainFile`]: the settings as written (a config file's keys, the flags, a checkpoint's
//!   saved settings), each `Option` (unset takes the default);
//! * [`Values`]: the settings validated and typed ([`crate::config::TrainConfig`] holds them);
//! * [`SETTINGS`]: what the command line builds its flags from, what `--resume` may change,
//!   and what an exploration's `[space]` may vary.
//!
//! Adding a setting is one line of the table (plus its use, where the run reads it).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crossbow_data::{BadImagePolicy, DEFAULT_MAX_IMAGE_PIXELS, DatasetKind, DecodeMode, NormalizeChoice};
use crossbow_replica::engine::{AllReduceChoice, BnGroup, LossRead};
use crossbow_replica::{ModelKind, Schedule};
use crossbow_tensor::DeviceSpec;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Every, OnDivergence, OnWriteError};
use crate::config::{AugmentChoice, BnEval, LearnersPerDevice, TunerRetune};

/// Whether a resumed run may change a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// It defines the run's trajectory (model, data, optimiser, seed, synchroniser): a resume
    /// that gives another value is refused, naming the setting.
    Defining,
    /// Limits, hardware, reporting, evaluation, checkpoints, the learning rate: a resume may
    /// change it (and says so).
    Changeable,
}

/// Whether `crossbow explore` may vary a setting in its `[space]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Explore {
    /// A list of values, or (for numbers) a range.
    Yes,
    /// Not explorable.
    No,
}

/// One setting, as the table declares it.
#[derive(Clone, Copy, Debug)]
pub struct SettingInfo {
    /// The key: `--KEY` on the command line, `KEY = ...` in a config file.
    pub key: &'static str,
    /// One-line help (with its default).
    pub help: &'static str,
    /// Whether a resume may change it.
    pub resume: Resume,
    /// Whether an exploration may vary it.
    pub explore: Explore,
    /// A switch (`--KEY` alone means true) rather than a flag with a value.
    pub switch: bool,
    /// A number (an exploration may give a range of it).
    pub number: bool,
}

impl SettingInfo {
    /// The setting of key `key`.
    pub fn of(key: &str) -> Option<&'static SettingInfo> {
        SETTINGS.iter().find(|s| s.key == key)
    }
}

/// How a setting's written value becomes its typed value and back (for checkpoints).
pub trait Setting<R>: Sized {
    /// The typed value of `raw`, or what is wrong with it.
    fn from_raw(raw: &R) -> Result<Self, String>;
    /// The value as written (`None` for an unset optional setting).
    fn to_raw(&self) -> Option<R>;
}

macro_rules! same {
    ($($t:ty),*) => {$(
        impl Setting<$t> for $t {
            fn from_raw(raw: &$t) -> Result<Self, String> {
                Ok(raw.clone())
            }
            fn to_raw(&self) -> Option<$t> {
                Some(self.clone())
            }
        }
    )*};
}
same!(usize, u64, u32, f64, bool, String, PathBuf);

macro_rules! text {
    ($($t:ty),*) => {$(
        impl Setting<String> for $t {
            fn from_raw(raw: &String) -> Result<Self, String> {
                raw.parse::<$t>().map_err(|e| e.to_string())
            }
            fn to_raw(&self) -> Option<String> {
                Some(self.to_string())
            }
        }
    )*};
}
text!(
    ModelKind,
    DatasetKind,
    Schedule,
    DeviceSpec,
    BnEval,
    BnGroup,
    LossRead,
    AllReduceChoice,
    Every,
    OnWriteError,
    OnDivergence,
    BadImagePolicy,
    DecodeMode,
    NormalizeChoice,
    AugmentChoice,
    TunerRetune
);

impl Setting<Word> for LearnersPerDevice {
    fn from_raw(raw: &Word) -> Result<Self, String> {
        raw.0.parse()
    }
    fn to_raw(&self) -> Option<Word> {
        Some(Word(self.to_string()))
    }
}

impl<R, T: Setting<R>> Setting<R> for Option<T> {
    fn from_raw(raw: &R) -> Result<Self, String> {
        T::from_raw(raw).map(Some)
    }
    fn to_raw(&self) -> Option<R> {
        self.as_ref().and_then(T::to_raw)
    }
}

/// A written value that may be a word or a whole number (`learners-per-device = 4` or
/// `"auto"`); held as text, written back as a number when it is one.
#[derive(Clone, Debug, PartialEq)]
pub struct Word(pub String);

impl From<&str> for Word {
    fn from(s: &str) -> Self {
        Word(s.to_string())
    }
}

impl From<String> for Word {
    fn from(s: String) -> Self {
        Word(s)
    }
}

impl Serialize for Word {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.parse::<u64>() {
            Ok(n) => s.serialize_u64(n),
            Err(_) => s.serialize_str(&self.0),
        }
    }
}

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Text {
            Int(i64),
            Str(String),
        }
        match Text::deserialize(d) {
            Ok(Text::Int(i)) => Ok(Word(i.to_string())),
            Ok(Text::Str(s)) => Ok(Word(s)),
            Err(_) => Err(serde::de::Error::custom("expected a word (e.g. \"auto\") or a whole number")),
        }
    }
}

/// Parsing a written value from the text of a flag.
pub trait FromFlag: Sized {
    /// The value of `--KEY TEXT`.
    fn from_flag(text: &str) -> Result<Self, String>;
}

macro_rules! flag_text {
    ($($t:ty),*) => {$(
        impl FromFlag for $t {
            fn from_flag(text: &str) -> Result<Self, String> {
                text.trim().parse::<$t>().map_err(|e| format!("'{text}': {e}"))
            }
        }
    )*};
}
flag_text!(usize, u64, u32, f64, bool);

impl FromFlag for String {
    fn from_flag(text: &str) -> Result<Self, String> {
        Ok(text.to_string())
    }
}

impl FromFlag for PathBuf {
    fn from_flag(text: &str) -> Result<Self, String> {
        Ok(PathBuf::from(text))
    }
}

impl FromFlag for Word {
    fn from_flag(text: &str) -> Result<Self, String> {
        Ok(Word(text.to_string()))
    }
}

/// What kind of flag a written type makes.
pub trait RawKind {
    /// `--KEY` alone means true.
    const SWITCH: bool = false;
    /// A number (explorable as a range).
    const NUMBER: bool = false;
}

impl RawKind for bool {
    const SWITCH: bool = true;
}
impl RawKind for f64 {
    const NUMBER: bool = true;
}
impl RawKind for usize {}
impl RawKind for u64 {}
impl RawKind for u32 {}
impl RawKind for String {}
impl RawKind for PathBuf {}
impl RawKind for Word {}

/// What the check of a setting gets: the name to blame (`--lr`, or `config file F: lr`) and
/// the typed value.
type Check<T> = fn(&str, &T) -> Result<(), String>;

macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])+
        $key:literal $field:ident : $raw:ty => $typed:ty = $default:expr,
            check $check:expr, $resume:ident, $explore:ident;
    )*) => {
        /// Every setting of `crossbow train`, as written in a TOML file (keys as the flag
        /// names, e.g. `batch-size = 64`), given as flags, or saved in a checkpoint. Unset
        /// values take their defaults.
        #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
        #[serde(deny_unknown_fields)]
        pub struct TrainFile {
            $(
                $(#[doc = $doc])+
                #[serde(rename = $key, default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$raw>,
            )*
            /// The synchroniser's generic options (`[sync-options]`; `--sync-opt KEY=VALUE`).
            #[serde(rename = "sync-options", default, skip_serializing_if = "Option::is_none")]
            pub sync_options: Option<BTreeMap<String, toml::Value>>,
        }

        /// Every setting in the table's order.
        pub const SETTINGS: &[SettingInfo] = &[
            $(SettingInfo {
                key: $key,
                help: concat!($($doc, "\n"),+),
                resume: Resume::$resume,
                explore: Explore::$explore,
                switch: <$raw as RawKind>::SWITCH,
                number: <$raw as RawKind>::NUMBER,
            },)*
        ];

        /// Every setting validated and typed.
        #[derive(Clone, Debug)]
        pub struct Values {
            $(
                $(#[doc = $doc])+
                pub $field: $typed,
            )*
        }

        impl TrainFile {
            /// The keys this file sets (`[sync-options]` is not among them).
            pub fn keys(&self) -> Vec<String> {
                let mut keys = vec![];
                $( if self.$field.is_some() { keys.push($key.to_string()); } )*
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
                TrainFile { $( $field: other.$field.or(self.$field), )* sync_options }
            }

            /// Sets `key` from the text of its flag (`--KEY TEXT`); the error says what is
            /// wrong with the text.
            pub fn set_flag(&mut self, key: &str, text: &str) -> Result<(), String> {
                match key {
                    $( $key => self.$field = Some(<$raw as FromFlag>::from_flag(text)?), )*
                    _ => return Err(format!("unknown setting '{key}'")),
                }
                Ok(())
            }

            /// Sets `key` from a TOML value (an exploration's `[space]`); the error says what
            /// type the key takes.
            pub fn set_toml(&mut self, key: &str, value: &toml::Value) -> Result<(), String> {
                match key {
                    $( $key => {
                        self.$field = Some(<$raw>::deserialize(value.clone()).map_err(|e| {
                            format!("{}: {}", value, e.message().split_whitespace().collect::<Vec<_>>().join(" "))
                        })?)
                    } )*
                    _ => return Err("unknown key".into()),
                }
                Ok(())
            }
        }

        impl Values {
            /// Validates `f`: each value parsed and range-checked in the table's order
            /// (defaults may depend on the settings before them); `name(key)` is what an
            /// error blames (`--batch-size`, or the config file and its key).
            pub fn resolve(f: &TrainFile, name: &dyn Fn(&str) -> String) -> Result<Values, String> {
                $(
                    let $field: $typed = match &f.$field {
                        Some(raw) => <$typed as Setting<$raw>>::from_raw(raw)
                            .map_err(|e| format!("{}: {}", name($key), printable(&e)))?,
                        None => $default,
                    };
                    let check: Check<$typed> = $check;
                    check(&name($key), &$field).map_err(|e| printable(&e))?;
                )*
                Ok(Values { $( $field, )* })
            }

            /// Every setting as written (a config file or a checkpoint reads it back to the
            /// same values).
            pub fn to_file(&self) -> TrainFile {
                TrainFile { $( $field: <$typed as Setting<$raw>>::to_raw(&self.$field), )* sync_options: None }
            }
        }
    };
}

/// `msg` with its control characters escaped (`\n`, `\t`, `\u{1b}`): the parsers quote the
/// value they reject, and a value with a newline in it would split the error over lines.
pub(crate) fn printable(msg: &str) -> String {
    msg.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// No check beyond parsing.
fn any<T>(_: &str, _: &T) -> Result<(), String> {
    Ok(())
}

fn at_least_1(name: &str, v: &usize) -> Result<(), String> {
    if *v >= 1 { Ok(()) } else { Err(format!("{name} must be at least 1, got {v}")) }
}

fn opt_at_least_1(name: &str, v: &Option<usize>) -> Result<(), String> {
    v.as_ref().map_or(Ok(()), |v| at_least_1(name, v))
}

/// A number as a reader wants it in a message: `1e-300`, not 300 zeros.
pub fn num(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs()) { format!("{v:e}") } else { v.to_string() }
}

fn positive(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 { Ok(()) } else { Err(format!("{name} must be a positive number, got {}", num(v))) }
}

fn non_negative(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 { Ok(()) } else { Err(format!("{name} must be a number >= 0, got {}", num(v))) }
}

/// A finite 32-bit float (what the kernels compute with): 1e300 passes as an `f64` but
/// becomes infinite on the device.
fn as_f32(name: &str, v: f64) -> Result<(), String> {
    if (v as f32).is_finite() {
        Ok(())
    } else {
        Err(format!("{name} {} is too large (the kernels compute in 32-bit floats, at most {:e})", num(v), f32::MAX))
    }
}

fn at_most(name: &str, v: f64, most: f64) -> Result<(), String> {
    if v <= most { Ok(()) } else { Err(format!("{name} must be at most {most}, got {}", num(v))) }
}

fn fraction(name: &str, v: &f64) -> Result<(), String> {
    if (0.0..1.0).contains(v) { Ok(()) } else { Err(format!("{name} must be in [0, 1), got {v}")) }
}

fn lr_check(name: &str, v: &f64) -> Result<(), String> {
    positive(name, *v)?;
    as_f32(name, *v)?;
    if !(*v as f32).is_normal() {
        return Err(format!(
            "{name} {} is too small (the kernels compute in 32-bit floats, whose smallest normal number is {:e})",
            num(*v),
            f32::MIN_POSITIVE
        ));
    }
    Ok(())
}

fn weight_decay_check(name: &str, v: &f64) -> Result<(), String> {
    non_negative(name, *v)?;
    // Decay shrinks every weight by lr x decay per step: beyond 1 it is no regulariser but
    // the whole update (typical values are 1e-5 to 1e-3).
    if *v > 1.0 {
        return Err(format!("{name} must be in [0, 1] (typical values are 1e-5 to 1e-3), got {v}"));
    }
    as_f32(name, *v)
}

fn epochs_check(name: &str, v: &f64) -> Result<(), String> {
    positive(name, *v)?;
    at_most(name, *v, 1e6)
}

/// The smallest `--eval-every`, in epochs (below it, `--eval-every-iterations` says what is meant).
pub const MIN_EVAL_EVERY: f64 = 1e-6;

fn eval_every_check(name: &str, v: &f64) -> Result<(), String> {
    positive(name, *v)?;
    at_most(name, *v, 1e6)?;
    if *v < MIN_EVAL_EVERY {
        return Err(format!(
            "{name} {} is below {MIN_EVAL_EVERY} epochs (use --eval-every-iterations 1 to evaluate after every iteration)",
            num(*v)
        ));
    }
    Ok(())
}

fn target_check(name: &str, v: &Option<f64>) -> Result<(), String> {
    match v {
        Some(t) if !(*t > 0.0 && *t <= 100.0) => {
            Err(format!("{name} must be in (0, 1] or a percentage in (1, 100], got {t}"))
        }
        _ => Ok(()),
    }
}

fn threads_check(name: &str, v: &Option<usize>) -> Result<(), String> {
    opt_at_least_1(name, v)
}

fn count_1024(name: &str, v: &usize) -> Result<(), String> {
    at_least_1(name, v)?;
    if *v > 1024 { Err(format!("{name} must be at most 1024, got {v}")) } else { Ok(()) }
}

fn eval_iterations_check(name: &str, v: &Option<u64>) -> Result<(), String> {
    match v {
        Some(0) => Err(format!("{name} must be at least 1, got 0")),
        _ => Ok(()),
    }
}

fn tuner_threshold_check(name: &str, v: &f64) -> Result<(), String> {
    non_negative(name, *v)?;
    at_most(name, *v, 100.0)
}

fn keep_check(name: &str, v: &Option<usize>) -> Result<(), String> {
    match v {
        Some(0) => Err(format!("{name} must be at least 1 (the last good checkpoint is always kept)")),
        Some(k) if *k > 1_000_000 => Err(format!("{name} must be at most 1000000, got {k}")),
        _ => Ok(()),
    }
}

fn rollbacks_check(name: &str, v: &Option<u32>) -> Result<(), String> {
    match v {
        // Each rollback halves the rate: after 100 it is 2^-100 of the base, zero in effect.
        Some(k) if *k > 100 => Err(format!("{name} must be at most 100, got {k}")),
        _ => Ok(()),
    }
}

fn image_size_check(name: &str, v: &Option<usize>) -> Result<(), String> {
    match v {
        Some(s) if !(8..=4096).contains(s) => Err(format!("{name} must be in 8..=4096, got {s}")),
        _ => Ok(()),
    }
}

fn pixels_check(name: &str, v: &u64) -> Result<(), String> {
    if *v >= 1 { Ok(()) } else { Err(format!("{name} must be at least 1, got {v}")) }
}

fn timeout_check(name: &str, v: &Option<f64>) -> Result<(), String> {
    v.map_or(Ok(()), |t| positive(name, t))
}

/// The model a dataset trains by default: LeNet-5 for 1-channel images, ResNet-20 otherwise.
fn default_model(dataset: DatasetKind) -> ModelKind {
    if dataset.image_shape()[0] == 1 { ModelKind::LeNet5 } else { ModelKind::ResNetCifar(20) }
}

/// The normalisation a dataset trains with unless told otherwise: ImageNet's constants for
/// folder data (what torchvision's ImageFolder examples use), else the training set's own
/// statistics.
pub fn default_normalize(dataset: DatasetKind) -> NormalizeChoice {
    if dataset == DatasetKind::Folder { NormalizeChoice::Imagenet } else { NormalizeChoice::Auto }
}

/// The synchroniser a model trains with by default: S-SGD, for every model; SMA is
/// `--sync sma`. Measured on real images SMA needed more epochs than S-SGD on the
/// batch-normalised ResNets (ResNet-20 on full-size CIFAR-10 at 4 and 8 learners, no variant
/// closing the gap) and on LeNet-5 with Fashion-MNIST it lost at 4 and 8 learners and ended
/// lower whenever the tuner added learners (0.2–1.3 points against S-SGD's 0–0.3 under the same
/// tuner); it won only on the built-in synthetic digits (BENCHMARKS.md §4). The model is an
/// argument so that a model whose measurements favour another synchroniser can default to it.
pub fn default_sync(_model: ModelKind) -> &'static str {
    "ssgd"
}

settings! {
    /// mnist, cifar10, cifar100, synthetic-digits, synthetic-shapes, folder (DIR/train/<class>/*,
    /// DIR/val/<class>/*: JPEG, PNG) [default: synthetic-digits]
    "dataset" dataset: String => DatasetKind = DatasetKind::SyntheticDigits, check any, Defining, No;
    /// lenet5, resnet20/32/44/56/110 (any 6n+2), vgg16, resnet50 [default: lenet5 for
    /// 1-channel data, resnet20 otherwise]
    "model" model: String => ModelKind = default_model(dataset), check any, Defining, No;
    /// Directory of the dataset files (mnist, cifar10, cifar100, folder) [default: data]
    "data-dir" data_dir: PathBuf => PathBuf = PathBuf::from("data"), check any, Changeable, No;
    /// Images per learner per iteration [default: 32]
    "batch-size" batch_size: usize => usize = 32, check at_least_1, Defining, Yes;
    /// With --sync ssgd: images per iteration, all learners together, whatever their count:
    /// each of k learners trains on N/k, so the count the auto-tuner picks changes the speed,
    /// not the training (it tries only counts that divide N). Replaces --batch-size [default:
    /// off: --batch-size per learner]
    "global-batch-size" global_batch_size: usize => Option<usize> = None, check opt_at_least_1, Defining, No;
    /// Base learning rate [default: 0.01]
    "lr" lr: f64 => f64 = 0.01, check lr_check, Changeable, Yes;
    /// Momentum of each learner's SGD [default: 0.9]
    "momentum" momentum: f64 => f64 = 0.9, check fraction, Defining, Yes;
    /// L2 weight decay [default: 5e-4]
    "weight-decay" weight_decay: f64 => f64 = 5e-4, check weight_decay_check, Defining, Yes;
    /// Nesterov momentum
    "nesterov" nesterov: bool => bool = false, check any, Defining, No;
    /// constant | multistep:E1,E2[:GAMMA] | warmup:W[:START]:E1,E2[:GAMMA] |
    /// cosine[:TOTAL[:MIN]] (epochs) [default: constant]
    "schedule" schedule: String => Schedule = Schedule::Constant, check any, Defining, No;
    /// Epoch limit (fractions allowed) [default: 4]
    "epochs" epochs: f64 => f64 = 4.0, check epochs_check, Changeable, No;
    /// Stop when the central model's test accuracy reaches this (0.95 or 95)
    "target-accuracy" target_accuracy: f64 => Option<f64> = None, check target_check, Changeable, No;
    /// Seed of initialisation, data order, augmentation and dropout [default: 1]
    "seed" seed: u64 => u64 = 1, check any, Defining, No;
    /// Threads per CPU device [default: all cores, shared among the CPU devices]
    "threads" threads: usize => Option<usize> = None, check threads_check, Changeable, No;
    /// Write one JSON object per evaluation (and start, tuner decisions, end) to this file
    "metrics" metrics: PathBuf => Option<PathBuf> = None, check any, Changeable, No;
    /// auto | cpu | cpu:N | cuda | cuda:0,1 [default: auto = every GPU, else the CPU]
    "devices" devices: String => DeviceSpec = DeviceSpec::Auto, check any, Changeable, No;
    /// Learners per device: a number, or auto (chosen by the auto-tuner) [default: auto]
    "learners-per-device" learners_per_device: Word => LearnersPerDevice = LearnersPerDevice::Auto,
        check any, Changeable, Yes;
    /// The synchroniser, by name [default: ssgd for batch-normalised models (resnet*, vgg16),
    /// sma otherwise]
    "sync" sync: String => String = default_sync(model).to_string(), check any, Defining, Yes;
    /// Batch-norm statistics for evaluating the central model: mean (of the learners'
    /// running statistics), learner (the first learner's own) or recalibrate[:N] (measured on
    /// the central model over N training batches before each evaluation, counted as
    /// training time) [default: recalibrate:20]
    "bn-eval" bn_eval: String => BnEval = BnEval::default(), check any, Defining, No;
    /// Whose batch statistics batch norm uses in training: learner (each learner its own
    /// batch) or device (the learners of a device together, k·b images, as synchronised batch
    /// norm) [default: learner]
    "bn-group" bn_group: String => BnGroup = BnGroup::default(), check any, Defining, No;
    /// When the learners' losses are read back from the devices: now (every iteration; the
    /// host waits for the devices) or lagged (one iteration late, so the host never waits
    /// for the iteration it just issued; a divergence is seen one iteration later, and
    /// evaluations, checkpoints and the end still count every iteration's loss) [default:
    /// lagged when every device is a GPU, else now]
    "loss-read" loss_read: String => Option<LossRead> = None, check any, Changeable, No;
    /// Evaluate the central model every this many epochs (fractions allowed) [default: 1]
    "eval-every" eval_every: f64 => f64 = 1.0, check eval_every_check, Changeable, No;
    /// Evaluate every this many iterations instead of by epochs
    "eval-every-iterations" eval_every_iterations: u64 => Option<u64> = None,
        check eval_iterations_check, Changeable, No;
    /// Batch size of evaluation [default: 500]
    "eval-batch-size" eval_batch_size: usize => usize = 500, check at_least_1, Changeable, No;
    /// At every evaluation also measure how the learners move: the central model's last step
    /// and its drift since the previous evaluation, each learner's spread ‖w−z‖/‖z‖ (whole
    /// model and per layer) and each learner's own test accuracy (costs a copy of z per
    /// iteration and one evaluation per learner) [default: off]
    "diagnostics" diagnostics: bool => bool = false, check any, Changeable, No;
    /// Training images to use (synthetic: generate; files: the first N) [default: synthetic
    /// 20000, files all]
    "train-size" train_size: usize => Option<usize> = None, check opt_at_least_1, Defining, No;
    /// Test images to use [default: synthetic 4000, files all]
    "test-size" test_size: usize => Option<usize> = None, check opt_at_least_1, Defining, No;
    /// Training augmentation: auto, none, flip, crop-flip (4-pixel padded crop + flip),
    /// resized-crop, resized-crop-flip [default: auto: crop-flip for 32x32 colour images,
    /// resized-crop-flip for folder data, none otherwise]
    "augment" augment: String => AugmentChoice = AugmentChoice::Auto, check any, Defining, No;
    /// Folder data: side of the square images trained on, 8..=4096 [default: 224]
    "image-size" image_size: usize => Option<usize> = None, check image_size_check, Defining, No;
    /// Folder data: largest width x height of an image, checked from its header before
    /// decoding (larger ones are bad images) [default: 178956970]
    "max-image-pixels" max_image_pixels: u64 => u64 = DEFAULT_MAX_IMAGE_PIXELS, check pixels_check, Changeable, No;
    /// Folder data: skip (count and name them) or fail on images that cannot be decoded
    /// [default: skip]
    "on-bad-image" on_bad_image: String => BadImagePolicy = BadImagePolicy::Skip, check any, Changeable, No;
    /// Folder data: when images are decoded: upfront (once, held in memory), streaming (on the
    /// pipeline's workers for every batch; for data larger than memory) or auto (upfront when
    /// the decoded images take at most half the memory available) [default: auto]
    "decode" decode: String => DecodeMode = DecodeMode::Auto, check any, Changeable, No;
    /// Per-channel input normalisation: imagenet (ImageNet's mean and std), auto (measured
    /// from the training images: all of them, or 1,024 evenly spaced when streaming), none
    /// (scaled to [0, 1] only) or MEAN/STD, one value or one per channel (0.5/0.25,
    /// 0.485,0.456,0.406/0.229,0.224,0.225) [default: imagenet for folder data, auto otherwise]
    "normalize" normalize: String => NormalizeChoice = default_normalize(dataset), check any, Defining, No;
    /// Data pipeline worker threads [default: 2]
    "workers" workers: usize => usize = 2, check count_1024, Changeable, No;
    /// Most learners per device the auto-tuner may use [default: 8]
    "max-learners" max_learners: usize => usize = 8, check count_1024, Changeable, No;
    /// Relative throughput gain the tuner needs to keep an added learner [default: 0.05]
    "tuner-threshold" tuner_threshold: f64 => f64 = 0.05, check tuner_threshold_check, Changeable, No;
    /// Standard errors of measurement noise the tuner adds to that gain before it believes it
    /// (estimated from the spread of each count's windows; 0: the threshold alone). On a
    /// shared host whose throughput swings, a learner kept on a lucky median changes what
    /// training does (under S-SGD, the aggregate batch) for nothing [default: 1.5]
    "tuner-significance" tuner_significance: f64 => f64 = 1.5, check tuner_threshold_check, Changeable, No;
    /// When the tuner searches again after settling: auto (never under ssgd, where the
    /// learner count is the aggregate batch and a change mid-run changes the optimisation; on a
    /// 20% throughput drop otherwise), off, or the drop as a fraction in (0, 1) [default: auto]
    "tuner-retune" tuner_retune: String => TunerRetune = TunerRetune::Auto, check any, Changeable, No;
    /// How GPU contributions are summed: nccl (one NCCL all-reduce over every GPU of every
    /// rank), host (through host memory, and MPI across ranks), or auto (nccl when every
    /// device is a GPU, NCCL loads and there are 2+ GPUs) [default: auto]
    "all-reduce" all_reduce: String => AllReduceChoice = AllReduceChoice::Auto, check any, Defining, No;
    /// Write checkpoints into this folder (created if missing) [default: none; with --resume,
    /// the folder of the checkpoint resumed]
    "checkpoint-dir" checkpoint_dir: PathBuf => Option<PathBuf> = None, check any, Changeable, No;
    /// How often: every N iterations (`500`) or every N minutes (`10m`); always at the end
    /// [default: 10m]
    "checkpoint-every" checkpoint_every: String => Option<Every> = None, check any, Changeable, No;
    /// How many checkpoints to keep (the oldest of this run's line are deleted once a newer
    /// one is safely written) [default: 3]
    "keep-checkpoints" keep_checkpoints: usize => Option<usize> = None, check keep_check, Changeable, No;
    /// What a failed checkpoint or metrics write (disk full, permissions) does: `warn` (report
    /// it and train on) or `fatal` (stop) [default: warn]
    "checkpoint-errors" checkpoint_errors: String => Option<OnWriteError> = None, check any, Changeable, No;
    /// What a diverged run does (a NaN or infinite loss or weight, or a loss that exploded):
    /// `stop`, or `rollback` to the last checkpoint with the learning rate halved [default:
    /// stop]
    "on-divergence" on_divergence: String => Option<OnDivergence> = None, check any, Changeable, No;
    /// Most rollbacks before giving up [default: 3]
    "max-rollbacks" max_rollbacks: u32 => Option<u32> = None, check rollbacks_check, Changeable, No;
    /// Let this run write into a checkpoint folder that holds another run's checkpoints (each
    /// run rotates only the files it wrote) [default: refused, naming the other run]
    "share-checkpoint-dir" share_checkpoint_dir: bool => bool = false, check any, Changeable, No;
    /// Under mpirun/srun: seconds a collective between ranks may take before the job stops,
    /// naming the ranks that never reached it [default: 60]
    "mpi-timeout" mpi_timeout: f64 => Option<f64> = None, check timeout_check, Changeable, No;
}
