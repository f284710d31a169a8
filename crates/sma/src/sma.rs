use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::sync::{
    Central, LearnerBuffers, LearnerRef, ParamKind, StepInfo, Synchroniser, drop_momentum_on_rate_drop, momentum_step,
    sgd, sum_into,
};

/// Which learner update SMA uses (see the crate documentation for the equations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SmaForm {
    /// The paper's form (Koliousis et al., VLDB 2019, Algorithm 1): learners take plain SGD
    /// steps; momentum lives only on the central model (`μ_z`). It needs about ten times the
    /// learning rate of the other form (a learner's step is `γ g`, not `γ g / (1 − μ)`).
    Paper,
    /// The original code's form: every learner also keeps a local momentum `μ`. The default:
    /// with each form's learning rate tuned, it reached the target in as few or fewer epochs
    /// (LeNet-5, k = 2..8; see the README's SMA section).
    #[default]
    LocalMomentum,
}

impl SmaForm {
    /// Every accepted name.
    pub const NAMES: &'static [&'static str] = &["paper", "local-momentum"];

    /// Parses `paper` or `local-momentum`.
    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        match name.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "paper" => Ok(SmaForm::Paper),
            "local-momentum" | "local" | "original" => Ok(SmaForm::LocalMomentum),
            _ => Err(format!("unknown SMA form '{name}' (known: {})", Self::NAMES.join(", "))),
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            SmaForm::Paper => "paper",
            SmaForm::LocalMomentum => "local-momentum",
        }
    }
}

/// How SMA's pull `α` is chosen each iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AlphaRule {
    /// `1/k` for `k` learners (the default; re-computed when `k` changes).
    OneOverK,
    /// A fixed value.
    Fixed(f32),
    /// `1/√k`.
    OneOverSqrtK,
    /// Starts at 1 and falls linearly to `1/k` over the first `epochs` epochs, then stays
    /// there.
    Ramp {
        /// Epochs of the ramp, > 0.
        epochs: f64,
    },
}

impl AlphaRule {
    /// Parses `1/k`, `1/sqrt(k)`, `ramp:E` (epochs) or a number >= 0.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let t = s.trim().to_ascii_lowercase().replace(' ', "");
        match t.as_str() {
            "1/k" => Ok(AlphaRule::OneOverK),
            "1/sqrt(k)" | "1/sqrtk" => Ok(AlphaRule::OneOverSqrtK),
            _ => {
                if let Some(e) = t.strip_prefix("ramp:") {
                    return match e.parse::<f64>() {
                        Ok(e) if e.is_finite() && e > 0.0 => Ok(AlphaRule::Ramp { epochs: e }),
                        _ => Err(format!("alpha '{s}': the ramp's epochs must be a number > 0")),
                    };
                }
                match t.parse::<f32>() {
                    Ok(a) if a.is_finite() && a >= 0.0 => Ok(AlphaRule::Fixed(a)),
                    _ => Err(format!("alpha '{s}' must be a number >= 0, 1/k, 1/sqrt(k) or ramp:EPOCHS")),
                }
            }
        }
    }

    /// `α` with `k` learners at `epoch`.
    pub fn at(self, k: usize, epoch: f64) -> f32 {
        let k = k.max(1) as f64;
        let a = match self {
            AlphaRule::OneOverK => return 1.0 / k as f32,
            AlphaRule::Fixed(a) => return a,
            AlphaRule::OneOverSqrtK => 1.0 / k.sqrt(),
            AlphaRule::Ramp { epochs } => 1.0 / k + (1.0 - 1.0 / k) * (1.0 - epoch / epochs).max(0.0),
        };
        a as f32
    }
}

impl std::fmt::Display for AlphaRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AlphaRule::OneOverK => write!(f, "1/k"),
            AlphaRule::Fixed(a) => write!(f, "{}", round6(*a)),
            AlphaRule::OneOverSqrtK => write!(f, "1/sqrt(k)"),
            AlphaRule::Ramp { epochs } => write!(f, "ramp:{epochs}"),
        }
    }
}

/// How the central model moves with the learners' differences `d_j = w_j − z`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CentralStep {
    /// `z += Σ_j α d_j` (the paper's and the original code's): with `α = 1/k` the mean
    /// difference; a larger `α` over-relaxes and is unstable above `α = 2/(k+1)`.
    #[default]
    Sum,
    /// `z += (1/k) Σ_j d_j` whatever `α` is: `z` becomes the mean of the learners, and `α`
    /// only sets how hard the learners are pulled towards it. Equal to `Sum` at `α = 1/k`.
    Mean,
}

impl CentralStep {
    /// Parses `sum` or `mean`.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sum" => Ok(CentralStep::Sum),
            "mean" => Ok(CentralStep::Mean),
            _ => Err(format!("central step '{s}' must be 'sum' or 'mean'")),
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            CentralStep::Sum => "sum",
            CentralStep::Mean => "mean",
        }
    }
}

/// How SMA treats batch-norm scales and shifts (`γ`, `β`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum BnParams {
    /// Like any other weight (the default).
    #[default]
    Average,
    /// Each learner keeps its own: no pull towards `z`; `z`'s are the learners' mean.
    Local,
    /// Pulled with their own `α`; `z`'s are the learners' mean.
    Alpha(f32),
}

impl BnParams {
    /// Parses `average`, `local` or a number >= 0 (their own pull).
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "average" | "averaged" => Ok(BnParams::Average),
            "local" | "per-learner" => Ok(BnParams::Local),
            t => match t.parse::<f32>() {
                Ok(a) if a.is_finite() && a >= 0.0 => Ok(BnParams::Alpha(a)),
                _ => Err(format!("bn-params '{s}' must be 'average', 'local' or a pull >= 0")),
            },
        }
    }
}

impl std::fmt::Display for BnParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BnParams::Average => write!(f, "average"),
            BnParams::Local => write!(f, "local"),
            BnParams::Alpha(a) => write!(f, "{}", round6(*a)),
        }
    }
}

/// Where SMA applies weight decay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecayOn {
    /// In every learner's local step (the default).
    #[default]
    Learners,
    /// Only on the central model: `z -= γ_t λ z` in the central update; the learners' steps
    /// have none. One learner is plain momentum SGD with weight decay either way.
    Central,
}

impl DecayOn {
    /// Parses `learners` or `central`.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "learners" | "learner" => Ok(DecayOn::Learners),
            "central" | "z" => Ok(DecayOn::Central),
            _ => Err(format!("weight-decay-on '{s}' must be 'learners' or 'central'")),
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            DecayOn::Learners => "learners",
            DecayOn::Central => "central",
        }
    }
}

/// Synchronous model averaging. See the crate documentation for the exact update.
#[derive(Clone, Debug)]
pub struct Sma {
    alpha: AlphaRule,
    central_momentum: f32,
    form: SmaForm,
    central_step: CentralStep,
    bn_params: BnParams,
    decay_on: DecayOn,
    /// Post-local SGD: S-SGD before this epoch, SMA from it on (`None`: SMA throughout).
    ssgd_until: Option<f64>,
    /// Batch-norm scales and shifts (`true`) and everything else, as runs of the buffer.
    runs: Vec<(std::ops::Range<usize>, bool)>,
    k: usize,
}

impl Sma {
    /// SMA (in the default, local-momentum form) with a fixed `alpha` (or `None` for `1/k`)
    /// and central momentum `μ_z`.
    pub fn new(alpha: Option<f32>, central_momentum: f32) -> Self {
        Sma {
            alpha: alpha.map_or(AlphaRule::OneOverK, AlphaRule::Fixed),
            central_momentum,
            form: SmaForm::default(),
            central_step: CentralStep::Sum,
            bn_params: BnParams::Average,
            decay_on: DecayOn::Learners,
            ssgd_until: None,
            runs: vec![],
            k: 1,
        }
    }

    /// Post-local SGD (Lin et al., "Don't use large mini-batches, use local SGD", ICLR
    /// 2020): S-SGD's update (mean gradient, one momentum step on `z`, `z` copied to every
    /// learner) in every iteration that starts before `epoch`, SMA's from then on. The phase
    /// is a function of the epoch alone, so a resumed run switches at the same iteration.
    /// With one learner both are momentum SGD and SMA's path runs throughout. At the switch
    /// SMA starts with every learner at `z`, `z_prev = z` and zero momentum: put it at a
    /// rate drop (as the paper does), where momentum is dropped anyway. Needs one more
    /// device buffer (S-SGD's momentum of `z`).
    pub fn with_ssgd_until(mut self, epoch: Option<f64>) -> Self {
        self.ssgd_until = epoch;
        self
    }

    /// Whether this iteration runs S-SGD's update (post-local SGD, before its switch).
    fn ssgd_phase(&self, info: &StepInfo) -> bool {
        info.learners > 1 && self.ssgd_until.is_some_and(|e| info.epoch < e)
    }

    /// The same SMA with `α` chosen by `rule`.
    pub fn with_alpha(mut self, rule: AlphaRule) -> Self {
        self.alpha = rule;
        self
    }

    /// The same SMA with the central model moving by `step`.
    pub fn with_central_step(mut self, step: CentralStep) -> Self {
        self.central_step = step;
        self
    }

    /// The same SMA treating batch-norm scales and shifts as `bn`.
    pub fn with_bn_params(mut self, bn: BnParams) -> Self {
        self.bn_params = bn;
        self
    }

    /// The same SMA with weight decay applied `on` the learners or the central model.
    pub fn with_decay_on(mut self, on: DecayOn) -> Self {
        self.decay_on = on;
        self
    }

    /// The same SMA with learner update `form`.
    pub fn with_form(mut self, form: SmaForm) -> Self {
        self.form = form;
        self
    }

    /// The α in use at the start of training (see [`Sma::alpha_at`]).
    pub fn alpha(&self) -> f32 {
        self.alpha.at(self.k, 0.0)
    }

    /// The α in use at `epoch`.
    pub fn alpha_at(&self, epoch: f64) -> f32 {
        self.alpha.at(self.k, epoch)
    }

    /// The learner update in use.
    pub fn form(&self) -> SmaForm {
        self.form
    }

    /// The local optimiser of a learner when `k > 1`: the schedule's learning rate and weight
    /// decay, and the learner momentum only in the local-momentum form.
    fn learner_sgd(&self, info: &StepInfo) -> SgdConfig {
        let mut cfg = match self.form {
            SmaForm::LocalMomentum => info.sgd,
            SmaForm::Paper => SgdConfig { momentum: 0.0, nesterov: false, ..info.sgd },
        };
        if self.decay_on == DecayOn::Central {
            cfg.weight_decay = 0.0;
        }
        cfg
    }

    /// Per run of the buffer: the pull on the learners and the central model's share of each
    /// learner's difference `w_j − z` (both `α` in the paper's update). One run covering the
    /// whole buffer when every parameter is treated alike.
    fn segments(&self, alpha: f32, len: usize) -> Vec<(std::ops::Range<usize>, f32, f32)> {
        let k = self.k.max(1) as f32;
        let share = match self.central_step {
            CentralStep::Sum => alpha,
            CentralStep::Mean if self.alpha == AlphaRule::OneOverK => alpha,
            CentralStep::Mean => 1.0 / k,
        };
        let bn = match self.bn_params {
            BnParams::Average => None,
            BnParams::Local => Some((0.0, 1.0 / k)),
            BnParams::Alpha(a) => Some((a, 1.0 / k)),
        };
        match bn {
            Some((pull, bn_share)) if !self.runs.is_empty() => self
                .runs
                .iter()
                .filter(|(r, _)| r.end <= len)
                .map(|(r, is_bn)| if *is_bn { (r.clone(), pull, bn_share) } else { (r.clone(), alpha, share) })
                .collect(),
            _ => vec![(0..len, alpha, share)],
        }
    }
}

/// Per-learner buffer 0: the correction `c_j` (with one learner: the learner's parameters
/// after its step). Per-device buffer 0: `z_prev`.
impl<B: Backend> Synchroniser<B> for Sma {
    fn name(&self) -> &str {
        "sma"
    }

    fn settings(&self) -> crossbow_replica::Settings {
        let mut s = crossbow_replica::Settings::new()
            .str("form", self.form.name())
            .num("alpha", round6(self.alpha()))
            .num("central_momentum", round6(self.central_momentum));
        // The options below are shown only when they differ from the default, so the
        // settings of a default SMA read as before. A rule (1/k, 1/sqrt(k), a ramp) is named:
        // alpha follows the learner count.
        if self.alpha != AlphaRule::Fixed(self.alpha()) {
            s = s.with("alpha_rule", crossbow_replica::SettingValue::Str(self.alpha.to_string()));
        }
        if self.central_step != CentralStep::Sum {
            s = s.str("central_step", self.central_step.name());
        }
        if self.bn_params != BnParams::Average {
            s = s.str("bn_params", self.bn_params.to_string());
        }
        if self.decay_on != DecayOn::Learners {
            s = s.str("weight_decay_on", self.decay_on.name());
        }
        if let Some(e) = self.ssgd_until {
            s = s.num("ssgd_until_epoch", e);
        }
        s
    }

    fn notes(&self, sgd: &SgdConfig) -> Vec<crossbow_replica::SyncNote> {
        stability_notes(self, sgd)
    }

    /// A fixed pull above `2/(k+1)`: the central model overshoots the learners' mean.
    fn divergence_causes(&self) -> Vec<String> {
        match self.alpha {
            AlphaRule::Fixed(a) if self.k >= 2 && f64::from(a) > 2.0 / (self.k as f64 + 1.0) => vec![format!(
                "--alpha {} (with {} learners the central model overshoots above {:.2})",
                round6(a),
                self.k,
                2.0 / (self.k as f64 + 1.0)
            )],
            _ => vec![],
        }
    }

    fn learner_buffers(&self) -> usize {
        1
    }

    fn device_buffers(&self) -> usize {
        if self.ssgd_until.is_some() { 2 } else { 1 }
    }

    fn set_learners(&mut self, k: usize) {
        self.k = k;
    }

    fn set_model(&mut self, layout: &crossbow_replica::sync::ModelLayout) -> Result<()> {
        self.runs = layout.runs(|kind| matches!(kind, ParamKind::BnScale | ParamKind::BnShift));
        Ok(())
    }

    /// `z_prev = z` (no central momentum yet), and with one learner the learner is `z`
    /// (`k = 1` is momentum SGD on `z` itself).
    fn reset(
        &self,
        be: &B,
        central: &mut Central<B>,
        learners: &mut [LearnerBuffers<'_, B>],
        len: usize,
    ) -> Result<()> {
        be.copy(View::new(&central.z, 0..len)?, ViewMut::new(&mut central.sync_state[0], 0..len)?)?;
        if self.k == 1 {
            for l in learners {
                be.copy(View::new(&central.z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
            }
        }
        Ok(())
    }

    fn learner_step(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        if self.ssgd_phase(info) {
            // S-SGD: the learner's gradient goes to the device reduction as it is.
            return Ok(());
        }
        if info.learners == 1 {
            // One learner: plain momentum SGD, and z follows the learner (w == z before the
            // step, so the correction is zero). Bit-identical to S-SGD with one learner.
            sgd(be, &info.sgd, l.params, l.grads, l.velocity, len)?;
            be.copy(View::new(&*l.params, 0..len)?, ViewMut::new(&mut l.sync_state[0], 0..len)?)?;
            return Ok(());
        }
        let alpha = self.alpha_at(info.epoch);
        let segments = self.segments(alpha, len);
        match segments.as_slice() {
            [(r, pull, share)] if r.end == len && pull == share => {
                corrected_step(be, &self.learner_sgd(info), l, z, alpha, len)
            }
            _ => split_step(be, &self.learner_sgd(info), l, z, &segments, len),
        }
    }

    fn reduce_device(
        &self,
        be: &B,
        info: &StepInfo,
        learners: &[LearnerRef<'_, B>],
        _c: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()> {
        if self.ssgd_phase(info) {
            return sum_into(be, learners.iter().map(|l| l.grads), out, len);
        }
        sum_into(be, learners.iter().map(|l| &l.sync_state[0]), out, len)
    }

    fn apply_device(
        &self,
        be: &B,
        info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> Result<()> {
        if self.ssgd_phase(info) {
            // S-SGD's central step (its momentum in buffer 1), z_prev kept at z so that SMA's
            // central momentum starts from zero at the switch.
            be.scale(1.0 / info.learners as f32, ViewMut::new(total, 0..len)?)?;
            let [zprev, v] = &mut central.sync_state[..] else {
                return Err(crossbow_replica::ReplicaError::Config("post-local SGD needs 2 device buffers".into()));
            };
            momentum_step(be, info, &mut central.z, total, v, len)?;
            be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
            return Ok(());
        }
        let zprev = &mut central.sync_state[0];
        if info.learners == 1 {
            // The learner's parameters after its step.
            be.copy(View::new(&*total, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
            be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
            return Ok(());
        }
        // total -= γ_t λ z (with --weight-decay-on central: the decay the learners' steps
        // left out, applied to z once); total += mu (z - z_prev); z_prev = z; z += total —
        // one fused pass (kernels' sma_step).
        let decay = if self.decay_on == DecayOn::Central { info.sgd.lr * info.sgd.weight_decay } else { 0.0 };
        be.sma_central_step(
            self.central_momentum,
            decay,
            ViewMut::new(total, 0..len)?,
            ViewMut::new(&mut central.z, 0..len)?,
            ViewMut::new(zprev, 0..len)?,
        )?;
        if info.lr_dropped {
            // Every replica restarts from z: so does the central trajectory (no momentum).
            be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
        }
        Ok(())
    }

    /// Only when the learning rate dropped (the reset to z): otherwise a learner's next
    /// forward pass does not wait for the all-reduce.
    fn after_apply_needed(&self, info: &StepInfo) -> bool {
        info.lr_dropped || self.ssgd_phase(info)
    }

    fn after_apply(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        if self.ssgd_phase(info) {
            // S-SGD: every learner is z; its own momentum stays zero for SMA's start (it may
            // hold some from a time with one learner, whose steps are SMA's).
            be.copy(View::new(z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
            be.fill(ViewMut::new(l.velocity, 0..len)?, 0.0)?;
            return Ok(());
        }
        if info.lr_dropped {
            be.copy(View::new(z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
        }
        drop_momentum_on_rate_drop(be, info, l.velocity, len)
    }
}

/// SMA's stable range of rates at its current settings and learner count (one learner is
/// momentum SGD: nothing to say), as a warning when an unstable band lies well inside the
/// range of the learners' own optimiser (momentum SGD for the local-momentum form, plain SGD
/// for the paper form), with the settings that would remove it.
fn stability_notes(sma: &Sma, sgd: &SgdConfig) -> Vec<crossbow_replica::SyncNote> {
    use crate::stability::Linearised;
    if sma.k < 2 {
        return vec![];
    }
    let mu = sgd.momentum as f64;
    let lin = |alpha: AlphaRule, muz: f64| Linearised::new(sma.form, sma.k, alpha, sma.central_step, mu, muz);
    let muz = sma.central_momentum as f64;
    let here = lin(sma.alpha, muz);
    let (reference, own) = match sma.form {
        SmaForm::LocalMomentum => (Linearised::momentum_sgd_limit(mu), "momentum SGD"),
        SmaForm::Paper => (2.0, "plain SGD"),
    };
    let whole = |l: &Linearised| l.stable_intervals().len() == 1 && l.limit() >= 0.5 * reference;
    let set = match here.stable_intervals().as_slice() {
        [] => "unstable at every rate".to_string(),
        [(a, b)] if *a == 0.0 => format!("stable for lr·h < {b:.2}"),
        iv => format!(
            "stable for lr·h in {}",
            iv.iter().map(|(a, b)| format!("({a:.2}, {b:.2})")).collect::<Vec<_>>().join(" and ")
        ),
    };
    let mut text = format!(
        "sma at k={} (alpha {}, central momentum {}, {}), linearised on a quadratic of curvature h: {set}, where {own} is stable below {reference:.2}{}",
        sma.k,
        round6(sma.alpha.at(sma.k, 0.0)),
        round6(sma.central_momentum),
        sma.form.name(),
        if sgd.nesterov { " (Nesterov not modelled)" } else { "" },
    );
    if !whole(&here) {
        let mut fixes = vec![];
        let weak = lin(AlphaRule::Fixed(0.05), muz);
        if sma.alpha != AlphaRule::Fixed(0.05) && whole(&weak) {
            fixes.push(format!("--alpha 0.05 (< {:.2})", weak.limit()));
        }
        let no_muz = lin(sma.alpha, 0.0);
        if muz != 0.0 && whole(&no_muz) {
            fixes.push(format!("--central-momentum 0 (< {:.2})", no_muz.limit()));
        }
        if !fixes.is_empty() {
            text.push_str(&format!("; {} remove the unstable band", fixes.join(" or ")));
        }
    }
    // Certain trouble only when no small rate is stable (an over-relaxed pull); a band above
    // the limit matters only if the loss's curvature reaches it, which the run cannot know.
    vec![crossbow_replica::SyncNote { warning: here.limit() == 0.0, text }]
}

/// The learner side of SMA and EA-SGD: `c = alpha (w - z)` from the replica before its step
/// (kept in the learner's first sync_state buffer for the device reduction), the local SGD step
/// with `cfg`, then `w -= c`.
pub(crate) fn corrected_step<B: Backend>(
    be: &B,
    cfg: &SgdConfig,
    l: LearnerBuffers<'_, B>,
    z: &B::Buffer,
    alpha: f32,
    len: usize,
) -> Result<()> {
    // One fused pass (kernels' sma_step): c = alpha (w - z), the SGD step, w -= c; the same
    // bits as those four ops one after the other.
    be.sma_learner_step(
        cfg,
        alpha,
        ViewMut::new(l.params, 0..len)?,
        View::new(l.grads, 0..len)?,
        ViewMut::new(l.velocity, 0..len)?,
        View::new(z, 0..len)?,
        ViewMut::new(&mut l.sync_state[0], 0..len)?,
    )?;
    Ok(())
}

/// SMA's learner side when parts of the buffer are treated differently: per segment
/// `(range, pull, share)`, with `d = w − z` from the replica before its step, the learner takes
/// its local step, then `w -= pull · d`, and hands `share · d` to the device reduction.
/// Segments whose pull equals their share run exactly as [`corrected_step`] does.
fn split_step<B: Backend>(
    be: &B,
    cfg: &SgdConfig,
    l: LearnerBuffers<'_, B>,
    z: &B::Buffer,
    segments: &[(std::ops::Range<usize>, f32, f32)],
    len: usize,
) -> Result<()> {
    let c = &mut l.sync_state[0];
    be.sub(View::new(&*l.params, 0..len)?, View::new(z, 0..len)?, ViewMut::new(c, 0..len)?)?;
    for (r, pull, share) in segments {
        if pull == share {
            be.scale(*pull, ViewMut::new(c, r.clone())?)?;
        }
    }
    sgd(be, cfg, l.params, l.grads, l.velocity, len)?;
    for (r, pull, share) in segments {
        if pull == share {
            be.axpy(-1.0, View::new(&*c, r.clone())?, ViewMut::new(l.params, r.clone())?)?;
        } else {
            if *pull != 0.0 {
                be.axpy(-pull, View::new(&*c, r.clone())?, ViewMut::new(l.params, r.clone())?)?;
            }
            be.scale(*share, ViewMut::new(c, r.clone())?)?;
        }
    }
    Ok(())
}

/// An f32 setting as the f64 a reader expects (0.9, not 0.8999999761581421).
pub(crate) fn round6(x: f32) -> f64 {
    (x as f64 * 1e6).round() / 1e6
}
