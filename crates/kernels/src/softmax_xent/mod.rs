//! Fused softmax + cross-entropy with accuracy: one pass over the logits gives the summed
//! loss, the number of correct arg-max predictions and (optionally) the logits' gradient.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};

/// The loss. The provided method checks the arguments, then runs the backend's
/// [`SoftmaxXent::softmax_xent_unchecked`] (what a backend implements).
pub trait SoftmaxXent: Storage {
    checked_op! {
        /// Fused softmax + cross-entropy over `logits [batch, classes]` with class-index `labels`.
        /// Writes `stats = [sum of per-sample losses, number of correct arg-max predictions]` and,
        /// when `dlogits` is given, `dlogits = grad_scale * (softmax(logits) - onehot(labels))`
        /// (with `grad_scale = 1/batch` this is the gradient of the mean loss). A label outside
        /// `0..classes` is an error on the CPU; on a GPU it yields a NaN loss.
        fn softmax_xent(&self, g: &SoftmaxXentGeom, logits: View<'_, Self>, labels: View<'_, Self>, dlogits: Option<ViewMut<'_, Self>>, stats: ViewMut<'_, Self>) {
            g.check(logits.len(), labels.len(), dlogits.as_ref().map(|d| d.len()), stats.len())?;
        }

        /// The kernel of [`SoftmaxXent::softmax_xent`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn softmax_xent_unchecked;
    }
}

/// The geometry of a softmax-cross-entropy call.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxXentGeom {
    /// Samples in the batch: rows of `logits`, entries of `labels`.
    pub batch: usize,
    /// Classes: columns of `logits`; every label is in `0..classes`.
    pub classes: usize,
    /// Factor of the gradient; `1 / batch` for the gradient of the mean loss.
    pub grad_scale: f32,
}

impl SoftmaxXentGeom {
    /// The gradient of the mean loss over the batch.
    pub fn mean(batch: usize, classes: usize) -> Self {
        SoftmaxXentGeom { batch, classes, grad_scale: 1.0 / batch.max(1) as f32 }
    }

    /// Checks the geometry and the lengths of the views.
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
