use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::sync::{Central, LearnerBuffers, LearnerRef, StepInfo, Synchroniser, sgd, sum_into};

/// Synchronous model averaging. See the crate documentation for the exact update.
#[derive(Clone, Debug)]
pub struct Sma {
    /// `None`: `1/k`.
    alpha: Option<f32>,
    central_momentum: f32,
    k: usize,
}

impl Sma {
    /// SMA with a fixed `alpha` (or `None` for `1/k`) and central momentum `μ_z`.
    pub fn new(alpha: Option<f32>, central_momentum: f32) -> Self {
        Sma { alpha, central_momentum, k: 1 }
    }

    /// The α in use.
    pub fn alpha(&self) -> f32 {
        self.alpha.unwrap_or(1.0 / self.k.max(1) as f32)
    }
}

/// Per-learner buffer 0: the correction `c_j`. Per-device buffer 0: `z_prev`.
impl<B: Backend> Synchroniser<B> for Sma {
    fn name(&self) -> &str {
        "sma"
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({
            "alpha": round6(self.alpha()),
            "alpha_default_1_over_k": self.alpha.is_none(),
            "central_momentum": round6(self.central_momentum),
        })
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

    fn learner_step(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        corrected_step(be, info, l, z, self.alpha(), len)
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
        sum_into(be, learners.iter().map(|l| &l.extra[0]), out, len)
    }

    fn apply_device(
        &self,
        be: &B,
        _info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> Result<()> {
        let mu = self.central_momentum;
        let zprev = &mut central.extra[0];
        if mu != 0.0 {
            // total += mu (z - z_prev)
            be.axpy(mu, View::new(&central.z, 0..len)?, ViewMut::new(total, 0..len)?)?;
            be.axpy(-mu, View::new(&*zprev, 0..len)?, ViewMut::new(total, 0..len)?)?;
        }
        be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
        be.axpy(1.0, View::new(&*total, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
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
/// (kept in the learner's first extra buffer for the device reduction), the local SGD step,
/// then `w -= c`.
pub(crate) fn corrected_step<B: Backend>(
    be: &B,
    info: &StepInfo,
    l: LearnerBuffers<'_, B>,
    z: &B::Buffer,
    alpha: f32,
    len: usize,
) -> Result<()> {
    let c = &mut l.extra[0];
    be.sub(View::new(&*l.params, 0..len)?, View::new(z, 0..len)?, ViewMut::new(c, 0..len)?)?;
    be.scale(alpha, ViewMut::new(c, 0..len)?)?;
    sgd(be, &info.sgd, l.params, l.grads, l.velocity, len)?;
    be.axpy(-1.0, View::new(&*c, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
    Ok(())
}

/// An f32 setting as the f64 a reader expects (0.9, not 0.8999999761581421).
pub(crate) fn round6(x: f32) -> f64 {
    (x as f64 * 1e6).round() / 1e6
}
