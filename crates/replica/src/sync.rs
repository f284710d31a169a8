//! The [`Synchroniser`] trait: how learners are kept consistent. Implement it to plug your own
//! algorithm into the engine (see `crates/sma` for SMA, S-SGD and EA-SGD, and the
//! `examples/sync-periodic` crate of the repository for a small complete one, selectable by
//! name in every `crossbow` command: `cargo run --release -p crossbow-sync-periodic -- train
//! --sync periodic --sync-opt period=8`).
//!
//! # What the engine calls, once per iteration
//!
//! ```text
//! every learner j, on its own device stream / worker thread (concurrently):
//!     forward + backward on its own batch           -> grads_j
//!     learner_step(j)                               -> your local update (SGD, corrections)
//! every device d (concurrently):
//!     reduce_device(d, learners of d) -> out_d      -> the device's contribution
//! all-reduce: every out_d becomes sum_d out_d       (in-process for CPU devices, staged
//!                                                    through the host or NCCL for GPUs)
//! every device d:
//!     apply_device(d, total)                        -> update the device's copy of z
//!     after_apply(j) for each learner j on d        -> e.g. copy z into the replica
//! ```
//!
//! Every device holds a bit-identical copy of the central model `z`; because every device
//! receives the same all-reduced total and runs the same arithmetic, the copies never drift.
//! All buffers hold `len` = number of parameters `f32`s and are flat: a synchroniser is a few
//! vector ops from [`crossbow_kernels::Backend`] (`sub`, `axpy`, `axpby`, `scale`, `copy`,
//! `sgd_step`). Extra per-learner and per-device buffers are allocated by the engine
//! ([`Synchroniser::learner_buffers`], [`Synchroniser::device_buffers`]) and start at zero.
//!
//! On a GPU the calls enqueue work on the learner's stream (learner calls) or the device's
//! synchronisation stream (device calls); the engine orders them. On CPU devices they run
//! when called.

use std::fmt;

use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::{Backend, View, ViewMut};
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::error::Result;

/// What a synchroniser knows about the current iteration.
#[derive(Clone, Copy, Debug)]
pub struct StepInfo {
    /// Iteration number, from 0.
    pub iteration: u64,
    /// Training progress in epochs at the start of the iteration.
    pub epoch: f64,
    /// The local optimiser's hyper-parameters this iteration (learning rate from the schedule).
    pub sgd: SgdConfig,
    /// The base learning rate (before the schedule).
    pub base_lr: f32,
    /// Total learners on all devices.
    pub learners: usize,
    /// True in the first iteration after the schedule stepped the learning rate down.
    pub lr_dropped: bool,
}

/// One learner's buffers, as a synchroniser's learner calls see them.
pub struct LearnerBuffers<'a, B: Backend> {
    /// Global learner slot, in `0..k` (a removed learner's slot is reused by the next one
    /// added), so a synchroniser may keep per-learner state in a `k`-sized table.
    pub index: usize,
    /// Parameters `w_j` (mutable).
    pub params: &'a mut B::Buffer,
    /// Gradient of the learner's last batch (without weight decay).
    pub grads: &'a B::Buffer,
    /// Momentum of the learner's local optimiser.
    pub velocity: &'a mut B::Buffer,
    /// The synchroniser's own per-learner buffers.
    pub sync_state: &'a mut [B::Buffer],
}

/// One learner's buffers, read-only, for the device reduction.
pub struct LearnerRef<'a, B: Backend> {
    /// Global learner slot, in `0..k` (as [`LearnerBuffers::index`]).
    pub index: usize,
    /// Parameters `w_j`.
    pub params: &'a B::Buffer,
    /// Gradient of the learner's last batch (without weight decay).
    pub grads: &'a B::Buffer,
    /// The synchroniser's own per-learner buffers.
    pub sync_state: &'a [B::Buffer],
}

/// A device's copy of the central model and the synchroniser's per-device buffers.
pub struct Central<B: Backend> {
    /// The central (average) model `z`.
    pub z: B::Buffer,
    /// The synchroniser's own per-device buffers.
    pub sync_state: Vec<B::Buffer>,
}

/// One value of [`Settings`].
#[derive(Clone, Debug, PartialEq)]
pub enum SettingValue {
    /// A real number.
    Num(f64),
    /// A whole number.
    Int(i64),
    /// A yes/no flag.
    Bool(bool),
    /// A word (a mode, a variant name).
    Str(String),
}

impl SettingValue {
    /// The value as JSON (a non-finite number becomes `null`).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            SettingValue::Num(x) => serde_json::Number::from_f64(*x).map_or(serde_json::Value::Null, Into::into),
            SettingValue::Int(i) => (*i).into(),
            SettingValue::Bool(b) => (*b).into(),
            SettingValue::Str(s) => s.as_str().into(),
        }
    }
}

impl fmt::Display for SettingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingValue::Num(x) => write!(f, "{x}"),
            SettingValue::Int(i) => write!(f, "{i}"),
            SettingValue::Bool(b) => write!(f, "{b}"),
            SettingValue::Str(s) => f.write_str(s),
        }
    }
}

/// A synchroniser's parameters, for logs and metrics files ([`Synchroniser::settings`]): an
/// ordered list of named numbers, whole numbers, flags and words.
///
/// ```
/// use crossbow_replica::sync::Settings;
///
/// let s = Settings::new().num("alpha", 0.5).str("form", "paper").bool("adaptive", false);
/// assert_eq!(s.to_string(), "alpha=0.5 form=paper adaptive=false");
/// assert_eq!(s.to_json(), serde_json::json!({ "alpha": 0.5, "form": "paper", "adaptive": false }));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    entries: Vec<(String, SettingValue)>,
}

impl Settings {
    /// No settings.
    pub fn new() -> Self {
        Settings::default()
    }

    /// Adds (or replaces, keeping its place) the setting `name`.
    pub fn with(mut self, name: impl Into<String>, value: SettingValue) -> Self {
        let name = name.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.entries.push((name, value)),
        }
        self
    }

    /// Adds a real number.
    pub fn num(self, name: impl Into<String>, value: f64) -> Self {
        self.with(name, SettingValue::Num(value))
    }

    /// Adds a whole number.
    pub fn int(self, name: impl Into<String>, value: i64) -> Self {
        self.with(name, SettingValue::Int(value))
    }

    /// Adds a flag.
    pub fn bool(self, name: impl Into<String>, value: bool) -> Self {
        self.with(name, SettingValue::Bool(value))
    }

    /// Adds a word.
    pub fn str(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.with(name, SettingValue::Str(value.into()))
    }

    /// The value of setting `name`.
    pub fn get(&self, name: &str) -> Option<&SettingValue> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The settings in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &SettingValue)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Number of settings.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The settings as a JSON object (for metrics files).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(self.entries.iter().map(|(n, v)| (n.clone(), v.to_json())).collect())
    }
}

/// `name=value` pairs separated by spaces (empty when there are none).
impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{n}={v}")?;
        }
        Ok(())
    }
}

/// A map from name to value, as [`Settings::to_json`].
impl Serialize for Settings {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (n, v) in &self.entries {
            map.serialize_entry(n, &v.to_json())?;
        }
        map.end()
    }
}

/// What a span of the flat parameter buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParamKind {
    /// Convolution or fully connected weights.
    Weight,
    /// Convolution or fully connected bias.
    Bias,
    /// Batch-norm scale `gamma`.
    BnScale,
    /// Batch-norm shift `beta`.
    BnShift,
}

/// One contiguous span of the flat parameter buffer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ParamSpan {
    /// The layer's name (`stage2.block1.bn1`).
    pub layer: String,
    /// What the span holds.
    pub kind: ParamKind,
    /// Elements of the flat buffer.
    pub range: std::ops::Range<usize>,
}

/// Where each layer's parameters lie in the flat buffers a synchroniser works on, for
/// synchronisers that treat some parameters differently (SMA's `bn-params` option keeps
/// batch-norm scales and shifts per learner). Spans are in buffer order and cover every
/// parameter exactly once.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ModelLayout {
    /// Elements of the flat parameter buffer.
    pub len: usize,
    /// The spans, in buffer order.
    pub spans: Vec<ParamSpan>,
}

impl ModelLayout {
    /// The layout of `graph`'s parameters.
    pub fn of(graph: &crate::graph::Graph) -> Self {
        let mut spans = vec![];
        for n in &graph.nodes {
            let Some(r) = &n.params else { continue };
            let (first, second) = n.layer.ops().param_kinds();
            let mid = r.offset + r.weight_len;
            if r.weight_len > 0 {
                spans.push(ParamSpan { layer: n.name.clone(), kind: first, range: r.offset..mid });
            }
            if r.len > r.weight_len {
                spans.push(ParamSpan { layer: n.name.clone(), kind: second, range: mid..r.offset + r.len });
            }
        }
        spans.sort_by_key(|s| s.range.start);
        ModelLayout { len: graph.param_len, spans }
    }

    /// The buffer `0..len` cut into maximal runs of elements on which `pick` agrees: `(range,
    /// picked)` in order, covering every element once (elements outside every span count as
    /// not picked).
    pub fn runs(&self, pick: impl Fn(ParamKind) -> bool) -> Vec<(std::ops::Range<usize>, bool)> {
        let mut out: Vec<(std::ops::Range<usize>, bool)> = vec![];
        let push = |r: std::ops::Range<usize>, p: bool, out: &mut Vec<(std::ops::Range<usize>, bool)>| {
            if r.is_empty() {
                return;
            }
            match out.last_mut() {
                Some((last, lp)) if *lp == p && last.end == r.start => last.end = r.end,
                _ => out.push((r, p)),
            }
        };
        let mut at = 0;
        for s in &self.spans {
            push(at..s.range.start, false, &mut out);
            push(s.range.clone(), pick(s.kind), &mut out);
            at = s.range.end;
        }
        push(at..self.len, false, &mut out);
        out
    }
}

/// Something a synchroniser tells the user about its settings ([`Synchroniser::notes`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SyncNote {
    /// Whether the settings are likely to hurt (a warning), not only worth knowing.
    pub warning: bool,
    /// One line.
    pub text: String,
}

/// A synchronisation algorithm. See the module documentation for the call sequence.
pub trait Synchroniser<B: Backend>: Send + Sync {
    /// Short name (`sma`, `ssgd`, ...).
    fn name(&self) -> &str;

    /// The algorithm's parameters, for logs and metrics files.
    fn settings(&self) -> Settings;

    /// What the user should know about these settings with the current learner count and
    /// the learners' optimiser `sgd` (its base learning rate and momentum): said when
    /// training starts and again whenever the learner count changes. SMA gives the stable
    /// range of its linearised update and warns when it is much narrower than momentum
    /// SGD's. Default: nothing.
    fn notes(&self, _sgd: &SgdConfig) -> Vec<SyncNote> {
        vec![]
    }

    /// When training diverged: settings of this synchroniser that likely caused it, each
    /// as `--FLAG VALUE (why)` (SMA: a pull beyond what its learner count keeps stable).
    /// Default: none.
    fn divergence_causes(&self) -> Vec<String> {
        vec![]
    }

    /// Number of extra `len`-sized buffers per learner.
    fn learner_buffers(&self) -> usize {
        0
    }

    /// Number of extra `len`-sized buffers per device.
    fn device_buffers(&self) -> usize {
        0
    }

    /// Told the total number of learners at the start and whenever it changes.
    fn set_learners(&mut self, _k: usize) {}

    /// Told where each layer's parameters lie, once, before [`Synchroniser::set_learners`]
    /// is first called; an error refuses the model (e.g. more partitions than parameters),
    /// before training starts. Default: nothing (most synchronisers treat the buffer as a
    /// whole).
    fn set_model(&mut self, _layout: &ModelLayout) -> Result<()> {
        Ok(())
    }

    /// A value every rank must agree on before the next iteration (a decision the
    /// synchroniser made from what it measured, e.g. Ako's automatic partition count), or
    /// `None`. Before every iteration the engine takes rank 0's value (with one process: this
    /// one's) and, when there is one, calls [`Synchroniser::agree`] with it on every rank, so
    /// that ranks whose own measurements differ still apply the same value from the same
    /// iteration on. Values must be below `u32::MAX`. Default: `None`.
    fn proposal(&self) -> Option<u64> {
        None
    }

    /// Applies the value agreed from rank 0's [`Synchroniser::proposal`] (see there).
    fn agree(&mut self, _value: u64) {}

    /// Called on every device when the central model's history starts anew: at the start of
    /// a run, whenever the learner count changes (after [`Synchroniser::set_learners`]), and
    /// after a model is loaded. `z` is the device's central model and `learners` are the
    /// device's learners. Reset whatever depends on `z`'s past here (SMA sets `z_prev = z`,
    /// so that its central momentum starts at zero). Default: nothing.
    fn reset(
        &self,
        _be: &B,
        _central: &mut Central<B>,
        _learners: &mut [LearnerBuffers<'_, B>],
        _len: usize,
    ) -> Result<()> {
        Ok(())
    }

    /// Learner `j`'s update after its backward pass, on its own backend; `z` is its device's
    /// central model as of the previous iteration.
    fn learner_step(
        &self,
        be: &B,
        info: &StepInfo,
        learner: LearnerBuffers<'_, B>,
        z: &B::Buffer,
        len: usize,
    ) -> Result<()>;

    /// Writes this device's contribution (for example the sum of its learners' corrections)
    /// into `out`, on the device's backend.
    fn reduce_device(
        &self,
        be: &B,
        info: &StepInfo,
        learners: &[LearnerRef<'_, B>],
        central: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()>;

    /// Updates the device's central model from `total`, the sum of every device's
    /// contribution (it may be overwritten).
    fn apply_device(
        &self,
        be: &B,
        info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> Result<()>;

    /// Whether [`Synchroniser::after_apply`] does anything this iteration. When it does not,
    /// a learner's next forward pass need not wait for the central update (on a GPU its
    /// stream runs ahead while the all-reduce and the update of `z` proceed); only its next
    /// learner step waits for `z`. Default: always.
    fn after_apply_needed(&self, _info: &StepInfo) -> bool {
        true
    }

    /// Learner `j`'s update after its device's central model was updated.
    fn after_apply(
        &self,
        _be: &B,
        _info: &StepInfo,
        _learner: LearnerBuffers<'_, B>,
        _z: &B::Buffer,
        _len: usize,
    ) -> Result<()> {
        Ok(())
    }
}

/// Learners train independently with plain SGD; the central model is their average. With one
/// learner this is ordinary single-model training (the central model is the learner).
#[derive(Clone, Debug, Default)]
pub struct Independent {
    k: usize,
}

impl<B: Backend> Synchroniser<B> for Independent {
    fn name(&self) -> &str {
        "independent"
    }

    fn settings(&self) -> Settings {
        Settings::new()
    }

    fn set_learners(&mut self, k: usize) {
        self.k = k;
    }

    fn learner_step(
        &self,
        be: &B,
        info: &StepInfo,
        l: LearnerBuffers<'_, B>,
        _z: &B::Buffer,
        len: usize,
    ) -> Result<()> {
        momentum_step(be, info, l.params, l.grads, l.velocity, len)
    }

    /// `out = sum_j (w_j - z)`: differences, so that replicas equal to `z` leave it exactly
    /// where it is (a sum of k copies divided by k need not round back to the copy).
    fn reduce_device(
        &self,
        be: &B,
        _info: &StepInfo,
        learners: &[LearnerRef<'_, B>],
        c: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()> {
        be.fill(ViewMut::new(out, 0..len)?, 0.0)?;
        for l in learners {
            be.axpy(1.0, View::new(l.params, 0..len)?, ViewMut::new(out, 0..len)?)?;
            be.axpy(-1.0, View::new(&c.z, 0..len)?, ViewMut::new(out, 0..len)?)?;
        }
        Ok(())
    }

    fn after_apply_needed(&self, _info: &StepInfo) -> bool {
        false
    }

    /// `z += total / k`: `z` becomes the mean of the replicas.
    fn apply_device(
        &self,
        be: &B,
        info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> Result<()> {
        be.axpy(1.0 / info.learners.max(1) as f32, View::new(total, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
        Ok(())
    }
}

/// One local SGD step over the first `len` elements.
pub fn sgd<B: Backend>(
    be: &B,
    cfg: &SgdConfig,
    params: &mut B::Buffer,
    grads: &B::Buffer,
    velocity: &mut B::Buffer,
    len: usize,
) -> Result<()> {
    be.sgd_step(cfg, ViewMut::new(params, 0..len)?, View::new(grads, 0..len)?, ViewMut::new(velocity, 0..len)?)?;
    Ok(())
}

/// The rule every built-in synchroniser follows when the schedule steps the learning rate
/// down: momentum built at the old rate is dropped. Zeroes `velocity` in the iteration whose
/// [`StepInfo::lr_dropped`] is set (after the step that used it); nothing otherwise.
pub fn drop_momentum_on_rate_drop<B: Backend>(
    be: &B,
    info: &StepInfo,
    velocity: &mut B::Buffer,
    len: usize,
) -> Result<()> {
    if info.lr_dropped {
        be.fill(ViewMut::new(velocity, 0..len)?, 0.0)?;
    }
    Ok(())
}

/// One momentum-SGD step with this iteration's optimiser ([`StepInfo::sgd`]), then
/// [`drop_momentum_on_rate_drop`]: what a learner of independent training, or the central
/// model of S-SGD, takes each iteration.
pub fn momentum_step<B: Backend>(
    be: &B,
    info: &StepInfo,
    params: &mut B::Buffer,
    grads: &B::Buffer,
    velocity: &mut B::Buffer,
    len: usize,
) -> Result<()> {
    sgd(be, &info.sgd, params, grads, velocity, len)?;
    drop_momentum_on_rate_drop(be, info, velocity, len)
}

/// `out = sum of parts` over the first `len` elements (`out = 0` when there are none).
pub fn sum_into<'a, B: Backend>(
    be: &B,
    parts: impl IntoIterator<Item = &'a B::Buffer>,
    out: &mut B::Buffer,
    len: usize,
) -> Result<()> {
    let mut first = true;
    for p in parts {
        let src = View::new(p, 0..len)?;
        if first {
            be.copy(src, ViewMut::new(out, 0..len)?)?;
            first = false;
        } else {
            be.axpy(1.0, src, ViewMut::new(out, 0..len)?)?;
        }
    }
    if first {
        be.fill(ViewMut::new(out, 0..len)?, 0.0)?;
    }
    Ok(())
}

pub use crate::comm::{AllReduce, HostAllReduce};
