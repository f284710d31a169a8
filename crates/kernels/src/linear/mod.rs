//! Fully connected layer `y = x W^T + b` with `W [out, in]` (PyTorch's layout).
//!
//! CPU: one GEMM per thread group of batch rows (forward, backward-data) or of output
//! features (weight gradient), so no reduction across threads is needed.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};

/// The fully connected layer. The provided methods check the arguments, then run the
/// backend's `*_unchecked` kernels (what a backend implements).
pub trait Linear: Storage {
    checked_op! {
        /// `y = x W^T + b`; `params` = `W [out, in]` then `b [out]` if the geometry has one.
        fn linear_forward(&self, g: &LinearGeom, x: View<'_, Self>, params: View<'_, Self>, y: ViewMut<'_, Self>) {
            g.check_lens("linear_forward", x.len(), params.len(), y.len())?;
        }

        /// The kernel of [`Linear::linear_forward`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn linear_forward_unchecked;
    }

    checked_op! {
        /// `dx = dy W`.
        fn linear_backward_data(&self, g: &LinearGeom, dy: View<'_, Self>, params: View<'_, Self>, dx: ViewMut<'_, Self>) {
            g.check_lens("linear_backward_data", dx.len(), params.len(), dy.len())?;
        }

        /// The kernel of [`Linear::linear_backward_data`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn linear_backward_data_unchecked;
    }

    checked_op! {
        /// `dW = dy^T x`, `db = sum_n dy`, laid out like `params`.
        fn linear_backward_params(&self, g: &LinearGeom, x: View<'_, Self>, dy: View<'_, Self>, dparams: ViewMut<'_, Self>) {
            g.check_lens("linear_backward_params", x.len(), dparams.len(), dy.len())?;
        }

        /// The kernel of [`Linear::linear_backward_params`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn linear_backward_params_unchecked;
    }
}

/// The geometry of a linear layer call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LinearGeom {
    /// Rows of `x` and `y`: samples in the batch.
    pub batch: usize,
    /// Features per input sample: columns of `x` and of `W [out, in]`.
    pub in_features: usize,
    /// Features per output sample: columns of `y`, rows of `W`.
    pub out_features: usize,
    /// Whether `params` holds a bias `[out]` after the weights.
    pub bias: bool,
}

impl LinearGeom {
    /// Checks for zero sizes and overflow.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.in_features == 0 || self.out_features == 0 {
            return Err(KernelError::invalid("linear", format!("zero-sized dimension in {self:?}")));
        }
        if self.batch.checked_mul(self.in_features.max(self.out_features)).is_none()
            || self.in_features.checked_mul(self.out_features).is_none()
        {
            return Err(KernelError::invalid("linear", format!("element count overflows in {self:?}")));
        }
        Ok(())
    }

    /// Elements of the weights.
    pub fn weight_len(&self) -> usize {
        self.in_features * self.out_features
    }

    /// Elements of weights plus bias.
    pub fn params_len(&self) -> usize {
        self.weight_len() + if self.bias { self.out_features } else { 0 }
    }

    /// Elements of the input.
    pub fn input_len(&self) -> usize {
        self.batch * self.in_features
    }

    /// Elements of the output.
    pub fn output_len(&self) -> usize {
        self.batch * self.out_features
    }

    /// Forward FLOPs for the batch.
    pub fn forward_flops(&self) -> f64 {
        2.0 * (self.batch * self.in_features * self.out_features) as f64
    }

    /// Checks the geometry and the lengths of the input, parameter and output views.
    pub(crate) fn check_lens(&self, op: &'static str, x: usize, params: usize, y: usize) -> Result<()> {
        self.validate()?;
        check_len(op, "input", self.input_len(), x)?;
        check_len(op, "params", self.params_len(), params)?;
        check_len(op, "output", self.output_len(), y)
    }
}
