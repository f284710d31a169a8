//! SMA's two element-wise updates, each fused into one pass over memory (the synchroniser
//! itself is `crossbow-sma`). Each gives the same bits as the unfused sequence of vector and
//! optimiser ops it replaces, in the same order of operations:
//!
//! ```text
//! learner:  c = alpha (w - z)           (sub, scale; before the step)
//!           w, v = SGD step (w, grad, v) (optim::sgd_step)
//!           w = w - c                    (axpy -1)
//! central:  t = total - decay z          (axpy -decay; only when decay != 0)
//!           t = t + mu z - mu z_prev     (two axpys; only when mu != 0)
//!           z_prev = z;  z = z + t;  total = t
//! ```
//!
//! Unfused, the learner update reads and writes every parameter four times (on a GPU: four
//! launches per learner and iteration) and the central one five; fused, once each.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, same_len};
use crate::optim::SgdConfig;

fn check_finite(op: &'static str, what: &str, v: f32) -> Result<()> {
    if v.is_finite() { Ok(()) } else { Err(KernelError::invalid(op, format!("{what} must be finite, got {v}"))) }
}

/// SMA's fused updates. The provided methods check the arguments, then run the backend's
/// `*_unchecked` kernels (what a backend implements).
pub trait SmaStep: Storage {
    checked_op! {
        /// A learner's SMA step: `c = alpha (w - z)` from the parameters before the step, one
        /// SGD step of `cfg` on `w` and `v`, then `w -= c`; writes `c` to `correction` (for the
        /// device's reduction).
        #[allow(clippy::too_many_arguments)]
        fn sma_learner_step(&self, cfg: &SgdConfig, alpha: f32, param: ViewMut<'_, Self>, grad: View<'_, Self>, velocity: ViewMut<'_, Self>, z: View<'_, Self>, correction: ViewMut<'_, Self>) {
            cfg.validate()?;
            check_finite("sma_learner_step", "alpha", alpha)?;
            same_len(
                "sma_learner_step",
                param.len(),
                &[("grad", grad.len()), ("velocity", velocity.len()), ("z", z.len()), ("correction", correction.len())],
            )?;
        }

        /// The kernel of [`SmaStep::sma_learner_step`].
        ///
        /// # Safety
        /// `cfg` is valid, `alpha` finite, and every view has `param`'s length.
        unsafe fn sma_learner_step_unchecked;
    }

    checked_op! {
        /// The central model's SMA step from the all-reduced corrections `total`:
        /// `t = total - decay z` (when `decay != 0`), `t += mu z - mu z_prev` (when `mu != 0`, in
        /// that order), then `z_prev = z`, `z += t`, and `total = t`.
        fn sma_central_step(&self, momentum: f32, decay: f32, total: ViewMut<'_, Self>, z: ViewMut<'_, Self>, z_prev: ViewMut<'_, Self>) {
            check_finite("sma_central_step", "central momentum", momentum)?;
            check_finite("sma_central_step", "decay", decay)?;
            same_len("sma_central_step", total.len(), &[("z", z.len()), ("z_prev", z_prev.len())])?;
        }

        /// The kernel of [`SmaStep::sma_central_step`].
        ///
        /// # Safety
        /// The constants are finite and the three views have the same length.
        unsafe fn sma_central_step_unchecked;
    }
}
