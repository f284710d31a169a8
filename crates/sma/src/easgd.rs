use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::sync::{
    Central, LearnerBuffers, LearnerRef, StepInfo, Synchroniser, drop_momentum_on_rate_drop, sum_into,
};

/// Synchronous elastic averaging SGD (Zhang, Choromanska, LeCun 2015) with communication
/// period τ = 1:
///
/// ```text
/// e_j = α_t (w_j − z)                 from the replica before its step
/// w_j ← w_j − γ_t (∇ℓ(w_j) + λ w_j) [local momentum] − e_j
/// z   ← z + Σ_j e_j
/// ```
///
/// The moving rate follows the paper's `α = γ ρ` with a fixed elasticity ρ, so it decays
/// with the learning-rate schedule: `α_t = α · γ_t / γ_0`. `α` defaults to `0.9 / k`
/// (β = kα = 0.9, the paper's choice). There is no central momentum and no reset when the
/// learning rate drops (only the local momentum is zeroed then): with a constant learning rate
/// EA-SGD is SMA in the local-momentum form with `μ_z = 0`.
#[derive(Clone, Debug)]
pub struct EaSgd {
    alpha: Option<f32>,
    k: usize,
}

impl EaSgd {
    /// Elastic averaging with base moving rate `alpha` (`None` = `0.9 / k`).
    pub fn new(alpha: Option<f32>) -> Self {
        EaSgd { alpha, k: 1 }
    }

    /// The base moving rate α (at the base learning rate).
    pub fn alpha(&self) -> f32 {
        self.alpha.unwrap_or(0.9 / self.k.max(1) as f32)
    }

    fn alpha_at(&self, info: &StepInfo) -> f32 {
        if info.base_lr > 0.0 { self.alpha() * (info.sgd.lr / info.base_lr) } else { self.alpha() }
    }
}

/// Per-learner buffer 0: the elastic difference `e_j`.
impl<B: Backend> Synchroniser<B> for EaSgd {
    fn name(&self) -> &str {
        "easgd"
    }

    fn settings(&self) -> crossbow_replica::Settings {
        crossbow_replica::Settings::new()
            .num("alpha", crate::sma::round6(self.alpha()))
            .num("beta", crate::sma::round6(self.alpha() * self.k as f32))
            .bool("alpha_follows_lr", true)
    }

    fn learner_buffers(&self) -> usize {
        1
    }

    fn set_learners(&mut self, k: usize) {
        self.k = k;
    }

    fn learner_step(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        // Momentum built at the old rate is dropped on a learning-rate drop (as every built-in
        // synchroniser does); the replica is not reset to z.
        let LearnerBuffers { index, params, grads, velocity, sync_state } = l;
        let l = LearnerBuffers { index, params, grads, velocity: &mut *velocity, sync_state };
        crate::sma::corrected_step(be, &info.sgd, l, z, self.alpha_at(info), len)?;
        drop_momentum_on_rate_drop(be, info, velocity, len)
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

    fn after_apply_needed(&self, _info: &StepInfo) -> bool {
        false
    }

    fn apply_device(
        &self,
        be: &B,
        _info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> Result<()> {
        be.axpy(1.0, View::new(&*total, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
        Ok(())
    }
}
