//! The loss head every program ends with: softmax cross-entropy of the logits against the
//! batch's labels, writing `[sum of losses, correct predictions]` and, in training, the
//! gradient of the mean loss.

use crossbow_kernels::Backend;
use crossbow_kernels::softmax_xent::SoftmaxXentGeom;

use super::Op;
use crate::error::Result;
use crate::exec::ExecCx;
use crate::program::TensorId;

/// Softmax cross-entropy's kernel call.
#[derive(Clone, Debug)]
pub struct LossOp {
    /// Batch size, classes and gradient scale (`1/batch`).
    pub g: SoftmaxXentGeom,
    /// The model's output `[batch, classes]`.
    pub logits: TensorId,
    /// Gradient of the mean loss with respect to the logits, in training programs.
    pub dlogits: Option<TensorId>,
}

impl Op for LossOp {
    fn reads(&self) -> Vec<TensorId> {
        vec![self.logits]
    }

    fn writes(&self) -> Vec<TensorId> {
        self.dlogits.iter().copied().collect()
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let d = match self.dlogits {
            Some(t) => Some(cx.write(t)?),
            None => None,
        };
        let (logits, labels, stats) = (cx.read(self.logits)?, cx.labels(), cx.loss_stats()?);
        Ok(cx.be.softmax_xent(&self.g, logits, labels, d, stats)?)
    }
}
