//! Leaky ReLU, forward and backward: `y = x > 0 ? x : slope * x` with a slope `>= 0`; the
//! backward pass reads the forward output (for `slope >= 0`, `y > 0` exactly when `x > 0`).

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, same_len};

/// Checks that `slope` is finite and `>= 0`.
fn check_slope(slope: f32) -> Result<()> {
    if slope.is_finite() && slope >= 0.0 {
        Ok(())
    } else {
        Err(KernelError::invalid("leaky_relu", format!("slope must be finite and >= 0, got {slope}")))
    }
}

/// Leaky ReLU. The provided methods check the arguments, then run the backend's
/// `*_unchecked` kernels (what a backend implements).
pub trait LeakyRelu: Storage {
    checked_op! {
        /// `y = x > 0 ? x : slope * x`.
        fn leaky_relu_forward(&self, slope: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) {
            check_slope(slope)?;
            same_len("leaky_relu_forward", x.len(), &[("y", y.len())])?;
        }

        /// The kernel of [`LeakyRelu::leaky_relu_forward`].
        ///
        /// # Safety
        /// `slope` is finite and `>= 0`; `x` and `y` have the same length.
        unsafe fn leaky_relu_forward_unchecked;
    }

    checked_op! {
        /// `dx = y > 0 ? dy : slope * dy`, from the forward output `y`.
        fn leaky_relu_backward(&self, slope: f32, y: View<'_, Self>, dy: View<'_, Self>, dx: ViewMut<'_, Self>) {
            check_slope(slope)?;
            same_len("leaky_relu_backward", y.len(), &[("dy", dy.len()), ("dx", dx.len())])?;
        }

        /// The kernel of [`LeakyRelu::leaky_relu_backward`].
        ///
        /// # Safety
        /// `slope` is finite and `>= 0`; `y`, `dy` and `dx` have the same length.
        unsafe fn leaky_relu_backward_unchecked;
    }
}
