//! Fully connected layer `y = x W^T + b` with `W [out, in]` (PyTorch's layout).
//!
//! CPU: one GEMM per thread group of batch rows (forward, backward-data) or of output
//! features (weight gradient), so no reduction across threads is needed.

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::error::{KernelError, Result, check_len};

/// The geometry of a linear layer call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LinearGeom {
    pub batch: usize,
    pub in_features: usize,
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

    pub(crate) fn check_lens(&self, op: &'static str, x: usize, params: usize, y: usize) -> Result<()> {
        self.validate()?;
        check_len(op, "input", self.input_len(), x)?;
        check_len(op, "params", self.params_len(), params)?;
        check_len(op, "output", self.output_len(), y)
    }
}
