//! Fused softmax + cross-entropy with accuracy: one pass over the logits gives the summed
//! loss, the number of correct arg-max predictions and (optionally) the logits' gradient.

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::error::{KernelError, Result, check_len};

/// The geometry of a softmax-cross-entropy call.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxXentGeom {
    pub batch: usize,
    pub classes: usize,
    /// Factor of the gradient; `1 / batch` for the gradient of the mean loss.
    pub grad_scale: f32,
}

impl SoftmaxXentGeom {
    /// The gradient of the mean loss over the batch.
    pub fn mean(batch: usize, classes: usize) -> Self {
        SoftmaxXentGeom { batch, classes, grad_scale: 1.0 / batch.max(1) as f32 }
    }

    pub(crate) fn check(&self, logits: usize, labels: usize, dlogits: Option<usize>, stats: usize) -> Result<()> {
        let op = "softmax_xent";
        if self.batch == 0 || self.classes == 0 {
            return Err(KernelError::invalid(op, format!("zero-sized dimension in {self:?}")));
        }
        let n = self
            .batch
            .checked_mul(self.classes)
            .ok_or_else(|| KernelError::invalid(op, format!("element count overflows in {self:?}")))?;
        check_len(op, "logits", n, logits)?;
        check_len(op, "labels", self.batch, labels)?;
        if let Some(d) = dlogits {
            check_len(op, "dlogits", n, d)?;
        }
        check_len(op, "stats", 2, stats)
    }
}
