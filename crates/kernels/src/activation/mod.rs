//! ReLU, forward and backward (from the forward output, so the forward pass may run in place).

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use crate::backend::{Storage, View, ViewMut};
use crate::error::{Result, same_len};

/// ReLU. The provided methods check the arguments, then run the backend's `*_unchecked`
/// kernels (what a backend implements).
pub trait Activation: Storage {
    checked_op! {
        /// `y = max(x, 0)`.
        fn relu_forward(&self, x: View<'_, Self>, y: ViewMut<'_, Self>) {
            same_len("relu_forward", x.len(), &[("y", y.len())])?;
        }

        /// The kernel of [`Activation::relu_forward`].
        ///
        /// # Safety
        /// `x` and `y` have the same length.
        unsafe fn relu_forward_unchecked;
    }

    /// `y = max(y, 0)` in place.
    fn relu_forward_inplace(&self, y: ViewMut<'_, Self>) -> Result<()>;

    checked_op! {
        /// `dx = dy * (y > 0)`, from the forward output `y`.
        fn relu_backward(&self, y: View<'_, Self>, dy: View<'_, Self>, dx: ViewMut<'_, Self>) {
            same_len("relu_backward", y.len(), &[("dy", dy.len()), ("dx", dx.len())])?;
        }

        /// The kernel of [`Activation::relu_backward`].
        ///
        /// # Safety
        /// `y`, `dy` and `dx` have the same length.
        unsafe fn relu_backward_unchecked;
    }

    checked_op! {
        /// `d = d * (y > 0)` in place (the incoming gradient becomes the outgoing one).
        fn relu_backward_inplace(&self, y: View<'_, Self>, d: ViewMut<'_, Self>) {
            same_len("relu_backward_inplace", y.len(), &[("d", d.len())])?;
        }

        /// The kernel of [`Activation::relu_backward_inplace`].
        ///
        /// # Safety
        /// `y` and `d` have the same length.
        unsafe fn relu_backward_inplace_unchecked;
    }
}
