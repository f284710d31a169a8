//! # crossbow-sma
//!
//! Synchronisers for the crossbow engine, each an implementation of
//! [`crossbow_replica::Synchroniser`]:
//!
//! | type | `--sync` | what it does |
//! |---|---|---|
//! | [`Sma`] | `sma` | synchronous model averaging (Crossbow, Koliousis et al., VLDB 2019) |
//! | [`SSgd`] | `ssgd` | synchronous SGD: mean gradient, one step on `z`, `z` copied to every replica (PyTorch DDP, Horovod, TensorFlow) — `crossbow train`'s default (SMA measured behind it on real images) |
//! | [`EaSgd`] | `easgd` | elastic averaging SGD (Zhang et al. 2015), synchronous, τ = 1 |
//!
//! Each declares its name, help and options (SMA's `--alpha`, `--central-momentum`,
//! `--sma-form` and the rest) in [`catalog`]: [`entries`] is what a registry collects.
//!
//! All are hierarchical: each device first sums its learners' contributions (intra-device),
//! the engine's all-reduce sums across devices, and every device applies the same update to
//! its copy of the central model, so the copies stay bit-identical.
//!
//! ## SMA exactly
//!
//! Per iteration, with `k` learners, learning rate `γ_t`, weight decay `λ`, learner momentum
//! `μ`, `α` and central momentum `μ_z`:
//!
//! ```text
//! c_j = α (w_j − z)                          from the replica BEFORE its local step
//! local-momentum form (default): v_j = μ v_j − γ_t (∇ℓ(w_j) + λ w_j);  w_j ← w_j + v_j − c_j
//! paper form:                    w_j ← w_j − γ_t (∇ℓ(w_j) + λ w_j) − c_j
//! z   ← z + Σ_j c_j + μ_z (z − z_prev)        Σ over all learners on all devices
//! ```
//!
//! [`SmaForm::Paper`] is Algorithm 1 of the Crossbow paper: learners take plain SGD steps
//! and the only momentum is the central one. [`SmaForm::LocalMomentum`] is what the original
//! code ran, and the default here: with each form's learning rate tuned, it reached the
//! target in as few or fewer epochs on LeNet-5 (the paper form needs about ten times the
//! rate, since its learners have no momentum). Linearised on a quadratic of curvature `h`
//! ([`stability`]; `cargo run -p crossbow-sma --example stability` prints the table), the
//! local-momentum form with `α = 1/k` and `μ_z = 0.9` is stable only for `γ h` below 0.25
//! (k = 2), 0.39 (k = 4) and 0.59 (k = 8), and unstable over most of the range where
//! momentum SGD is stable (below 3.8; k = 4 is stable again between 2.78 and 3.16); `α ≤
//! 0.05`, or `μ_z = 0` with `α ≤ 0.1`, removes that band. The paper form is stable up to 1.32
//! to 1.83, against 2 for its learners' plain SGD. Per unit of learning rate the paper form
//! moves about ten times less, so these limits are not directly comparable; the measured
//! time to accuracy decided the default. A run says the stable range for its settings when
//! it starts (and when the tuner changes `k`), as a warning when such a band exists
//! ([`crossbow_replica::Synchroniser::notes`]).
//!
//! `α` defaults to `1/k` (re-computed when the tuner changes `k`), in which case, with
//! `μ_z = 0`, `z` becomes the mean of the pre-step replicas. `z_prev` starts equal to `z`, and
//! is set to `z` again whenever the learner count changes ([`Synchroniser::reset`]) and when
//! the learning rate drops, so the central momentum never starts from a stale or zero model:
//! with `γ = 0` and `λ = 0` nothing moves, for any `k` and `μ_z` (a test, for every
//! synchroniser here). When the learning-rate schedule steps down every replica is reset to
//! `z` and its momentum zeroed (S-SGD, EA-SGD and the independent synchroniser drop their
//! momentum at the same point).
//!
//! **One learner is momentum SGD.** With `k = 1` the learner takes momentum-SGD steps with
//! `μ` and `z` follows it (`z = w`), bit for bit what S-SGD does with one learner (a test).
//! The literal update with `α = 1` would instead restart the learner from the previous `z`
//! each step (a leapfrog scheme, unstable without central momentum); the original Crossbow
//! never ran SMA with one learner. Going from one learner to two, both start from `z`.
//!
//! The learner-side work (correction, local step, applying the correction) runs on each
//! learner's own stream or thread as soon as its backward pass is done, so a learner never
//! waits for another one; only the device reduction and the central update are per device.

pub mod catalog;
mod easgd;
mod sma;
mod ssgd;
pub mod stability;

pub use catalog::entries;
pub use easgd::EaSgd;
pub use sma::{AlphaRule, BnParams, CentralStep, DecayOn, Sma, SmaForm};
pub use ssgd::SSgd;

#[cfg(test)]
mod tests;
