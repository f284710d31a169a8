//! The optimiser step learners take locally: SGD with weight decay and momentum (heavy ball
//! or Nesterov), with the learning rate folded into the velocity as in Caffe and the original
//! Crossbow (see `crossbow-sma`):
//!
//! ```text
//! g = grad + weight_decay * p
//! v = momentum * v - lr * g
//! p = p + v                              (heavy ball)
//! p = p + momentum * v - lr * g          (Nesterov)
//! ```
//!
//! With a constant learning rate this is exactly PyTorch's `SGD(momentum, weight_decay,
//! nesterov)` (its velocity is `-v / lr`); when the rate steps down the old velocity keeps
//! its scale instead of being rescaled by the new rate.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, same_len};

/// The optimiser step. The provided method checks the arguments, then runs the backend's
/// [`Optim::sgd_step_unchecked`] (what a backend implements).
pub trait Optim: Storage {
    checked_op! {
        /// One SGD step with weight decay and (optionally Nesterov) momentum, the learning rate
        /// folded into the velocity (see the [module docs](self)):
        /// `g = grad + wd*p; v = mu*v - lr*g; p += nesterov ? mu*v - lr*g : v`.
        fn sgd_step(&self, cfg: &SgdConfig, param: ViewMut<'_, Self>, grad: View<'_, Self>, velocity: ViewMut<'_, Self>) {
            cfg.validate()?;
            same_len("sgd_step", param.len(), &[("grad", grad.len()), ("velocity", velocity.len())])?;
        }

        /// The kernel of [`Optim::sgd_step`].
        ///
        /// # Safety
        /// `cfg` is valid; `param`, `grad` and `velocity` have the same length.
        unsafe fn sgd_step_unchecked;
    }
}

/// Hyper-parameters of one SGD step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SgdConfig {
    /// Learning rate, folded into the velocity; finite and `>= 0`.
    pub lr: f32,
    /// Momentum coefficient in `[0, 1)`; 0 is plain SGD.
    pub momentum: f32,
    /// L2 penalty added to the gradient as `weight_decay * p`; finite and `>= 0`.
    pub weight_decay: f32,
    /// Nesterov momentum instead of heavy ball (needs `momentum > 0`).
    pub nesterov: bool,
}

impl SgdConfig {
    /// Plain SGD with learning rate `lr`.
    pub fn plain(lr: f32) -> Self {
        SgdConfig { lr, momentum: 0.0, weight_decay: 0.0, nesterov: false }
    }

    /// Checks that the constants are finite and in range.
    pub fn validate(&self) -> Result<()> {
        let op = "sgd";
        if !self.lr.is_finite() || self.lr < 0.0 {
            return Err(KernelError::invalid(op, format!("learning rate must be finite and >= 0, got {}", self.lr)));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(KernelError::invalid(op, format!("momentum must be in [0, 1), got {}", self.momentum)));
        }
        if !self.weight_decay.is_finite() || self.weight_decay < 0.0 {
            return Err(KernelError::invalid(
                op,
                format!("weight decay must be finite and >= 0, got {}", self.weight_decay),
            ));
        }
        if self.nesterov && self.momentum == 0.0 {
            return Err(KernelError::invalid(op, "Nesterov momentum needs momentum > 0"));
        }
        Ok(())
    }
}
