use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::sync::{Central, LearnerBuffers, LearnerRef, StepInfo, Synchroniser, sgd, sum_into};

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

/// Synchronous model averaging. See the crate documentation for the exact update.
#[derive(Clone, Debug)]
pub struct Sma {
    /// `None`: `1/k`.
    alpha: Option<f32>,
    central_momentum: f32,
    form: SmaForm,
    k: usize,
}

impl Sma {
    /// SMA (in the default, local-momentum form) with a fixed `alpha` (or `None` for `1/k`)
    /// and central momentum `μ_z`.
    pub fn new(alpha: Option<f32>, central_momentum: f32) -> Self {
        Sma { alpha, central_momentum, form: SmaForm::default(), k: 1 }
    }

    /// The same SMA with learner update `form`.
    pub fn with_form(mut self, form: SmaForm) -> Self {
        self.form = form;
        self
    }

    /// The α in use.
    pub fn alpha(&self) -> f32 {
        self.alpha.unwrap_or(1.0 / self.k.max(1) as f32)
    }

    /// The learner update in use.
    pub fn form(&self) -> SmaForm {
        self.form
    }

    /// The local optimiser of a learner when `k > 1`: the schedule's learning rate and weight
    /// decay, and the learner momentum only in the local-momentum form.
    fn learner_sgd(&self, info: &StepInfo) -> SgdConfig {
        match self.form {
            SmaForm::LocalMomentum => info.sgd,
            SmaForm::Paper => SgdConfig { momentum: 0.0, nesterov: false, ..info.sgd },
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
        crossbow_replica::Settings::new()
            .str("form", self.form.name())
            .num("alpha", round6(self.alpha()))
            .bool("alpha_default_1_over_k", self.alpha.is_none())
            .num("central_momentum", round6(self.central_momentum))
    }

    fn learner_buffers(&self) -> usize {
        1
    }

    fn device_buffers(&self) -> usize {
        1
    }

    fn set_learners(&mut self, k: usize) {
        self.k = k;
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
        if info.learners == 1 {
            // One learner: plain momentum SGD, and z follows the learner (w == z before the
            // step, so the correction is zero). Bit-identical to S-SGD with one learner.
            sgd(be, &info.sgd, l.params, l.grads, l.velocity, len)?;
            be.copy(View::new(&*l.params, 0..len)?, ViewMut::new(&mut l.sync_state[0], 0..len)?)?;
            return Ok(());
        }
        corrected_step(be, &self.learner_sgd(info), l, z, self.alpha(), false, len)
    }

    fn reduce_device(
        &self,
        be: &B,
        _info: &StepInfo,
        learners: &[LearnerRef<'_, B>],
        _c: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()> {
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
        let zprev = &mut central.sync_state[0];
        if info.learners == 1 {
            // The learner's parameters after its step.
            be.copy(View::new(&*total, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
            be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
            return Ok(());
        }
        let mu = self.central_momentum;
        if mu != 0.0 {
            // total += mu (z - z_prev)
            be.axpy(mu, View::new(&central.z, 0..len)?, ViewMut::new(total, 0..len)?)?;
            be.axpy(-mu, View::new(&*zprev, 0..len)?, ViewMut::new(total, 0..len)?)?;
        }
        be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
        be.axpy(1.0, View::new(&*total, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
        if info.lr_dropped {
            // Every replica restarts from z: so does the central trajectory (no momentum).
            be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
        }
        Ok(())
    }

    /// Only when the learning rate dropped (the reset to z): otherwise a learner's next
    /// forward pass does not wait for the all-reduce.
    fn after_apply_needed(&self, info: &StepInfo) -> bool {
        info.lr_dropped
    }

    fn after_apply(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        if info.lr_dropped {
            be.copy(View::new(z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
            be.fill(ViewMut::new(l.velocity, 0..len)?, 0.0)?;
        }
        Ok(())
    }
}

/// The learner side of SMA and EA-SGD: `c = alpha (w - z)` from the replica before its step
/// (kept in the learner's first sync_state buffer for the device reduction), the local SGD step
/// with `cfg`, then `w -= c`; the momentum is zeroed after the step when `drop_momentum`.
pub(crate) fn corrected_step<B: Backend>(
    be: &B,
    cfg: &SgdConfig,
    l: LearnerBuffers<'_, B>,
    z: &B::Buffer,
    alpha: f32,
    drop_momentum: bool,
    len: usize,
) -> Result<()> {
    let c = &mut l.sync_state[0];
    be.sub(View::new(&*l.params, 0..len)?, View::new(z, 0..len)?, ViewMut::new(c, 0..len)?)?;
    be.scale(alpha, ViewMut::new(c, 0..len)?)?;
    sgd(be, cfg, l.params, l.grads, l.velocity, len)?;
    be.axpy(-1.0, View::new(&*c, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
    if drop_momentum {
        be.fill(ViewMut::new(l.velocity, 0..len)?, 0.0)?;
    }
    Ok(())
}

/// An f32 setting as the f64 a reader expects (0.9, not 0.8999999761581421).
pub(crate) fn round6(x: f32) -> f64 {
    (x as f64 * 1e6).round() / 1e6
}
