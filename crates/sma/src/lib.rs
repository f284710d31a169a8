//! # crossbow-sma
//!
//! Synchronisers for the crossbow engine, each an implementation of
//! [`crossbow_replica::Synchroniser`]:
//!
//! | type | `--sync` | what it does |
//! |---|---|---|
//! | [`Sma`] | `sma` | synchronous model averaging (Crossbow, DESIGN.md §4) — the default |
//! | [`SSgd`] | `ssgd` | synchronous SGD: mean gradient, one step on `z`, `z` copied to every replica (PyTorch DDP, Horovod, TensorFlow) |
//! | [`EaSgd`] | `easgd` | elastic averaging SGD (Zhang et al. 2015), synchronous, τ = 1 |
//!
//! All are hierarchical: each device first sums its learners' contributions (intra-device),
//! the engine's all-reduce sums across devices, and every device applies the same update to
//! its copy of the central model, so the copies stay bit-identical.
//!
//! ## SMA exactly
//!
//! Per iteration, with `k` learners, learning rate `γ_t`, weight decay `λ`, local momentum
//! `μ`, `α` and central momentum `μ_z`:
//!
//! ```text
//! c_j = α (w_j − z)                          from the replica BEFORE its local step
//! v_j = μ v_j − γ_t (∇ℓ(w_j) + λ w_j);  w_j ← w_j + v_j − c_j
//! z   ← z + Σ_j c_j + μ_z (z − z_prev)        Σ over all learners on all devices
//! ```
//!
//! `α` defaults to `1/k` (re-computed when the tuner changes `k`), in which case, with
//! `μ_z = 0`, `z` becomes the mean of the pre-step replicas. When the learning-rate schedule
//! steps down every replica is reset to `z`, and — unlike the original, which kept stale
//! momentum — its momentum is zeroed.
//!
//! Note on `k = 1`: with `α = 1` the learner does not follow plain SGD (it restarts from the
//! previous `z` each step: `w_{t+1} = w_{t-1} − γ ∇ℓ(w_t)`); with `α = 0` it does, exactly,
//! and `z` stays at the initial model. The tests check both facts.
//!
//! The learner-side work (correction, local step, applying the correction) runs on each
//! learner's own stream or thread as soon as its backward pass is done, so a learner never
//! waits for another one; only the device reduction and the central update are per device.

mod easgd;
mod sma;
mod ssgd;

pub use easgd::EaSgd;
pub use sma::Sma;
pub use ssgd::SSgd;

use crossbow_kernels::Backend;
use crossbow_replica::Synchroniser;

/// The synchronisers selectable by name, with their parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum SyncKind {
    /// SMA with `alpha` (`None` = `1/k`) and central momentum.
    Sma { alpha: Option<f32>, central_momentum: f32 },
    /// Synchronous SGD.
    SSgd,
    /// Elastic averaging with `alpha` (`None` = `0.9/k`, i.e. β = kα = 0.9).
    EaSgd { alpha: Option<f32> },
}

impl SyncKind {
    /// Every accepted name.
    pub const NAMES: &'static [&'static str] = &["sma", "ssgd", "easgd"];

    /// Parses a name with the shared `alpha` / `central_momentum` flags.
    pub fn parse(name: &str, alpha: Option<f32>, central_momentum: f32) -> Result<Self, String> {
        if let Some(a) = alpha
            && !(a.is_finite() && a >= 0.0)
        {
            return Err(format!("--alpha must be a finite number >= 0, got {a}"));
        }
        if !(0.0..1.0).contains(&central_momentum) {
            return Err(format!("--central-momentum must be in [0, 1), got {central_momentum}"));
        }
        match name.trim().to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "sma" => Ok(SyncKind::Sma { alpha, central_momentum }),
            "ssgd" | "sgd" | "sync" => Ok(SyncKind::SSgd),
            "easgd" | "elastic" => Ok(SyncKind::EaSgd { alpha }),
            _ => Err(format!("unknown synchroniser '{name}' (known: {})", Self::NAMES.join(", "))),
        }
    }

    /// The synchroniser.
    pub fn build<B: Backend>(&self) -> Box<dyn Synchroniser<B>> {
        match *self {
            SyncKind::Sma { alpha, central_momentum } => Box::new(Sma::new(alpha, central_momentum)),
            SyncKind::SSgd => Box::new(SSgd::default()),
            SyncKind::EaSgd { alpha } => Box::new(EaSgd::new(alpha)),
        }
    }
}

#[cfg(test)]
mod tests;
