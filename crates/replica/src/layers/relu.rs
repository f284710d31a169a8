//! ReLU, `y = max(x, 0)`: in place where nothing else reads its input, and its backward
//! pass in place on the output gradient where that gradient is read by nobody else.

use crossbow_kernels::Backend;
use serde::Serialize;

use super::{Instr, LayerOps, Op};
use crate::error::Result;
use crate::exec::ExecCx;
use crate::graph::{GraphBuilder, NodeId};
use crate::program::{Lowering, TensorId, TensorKind};

/// ReLU (no hyper-parameters).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Relu;

impl GraphBuilder {
    /// ReLU of `x`.
    pub fn relu(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        self.check(x)?;
        let shape = self.shape(x).clone();
        Ok(self.push(name.into(), Relu.into(), vec![x], shape, None, None))
    }
}

/// ReLU's kernel calls.
#[derive(Clone, Debug)]
pub enum ReluOp {
    /// `y = max(x, 0)`.
    Fwd {
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
    },
    /// `y = max(y, 0)` in place (`y` aliases the input's storage).
    FwdInPlace {
        /// The activation rectified in place.
        y: TensorId,
    },
    /// `dx = dy * (y > 0)`, from the forward output `y`.
    Bwd {
        /// Output activation of the forward pass.
        y: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
    },
    /// `d = d * (y > 0)` in place: the output gradient becomes the input gradient.
    BwdInPlace {
        /// Output activation of the forward pass.
        y: TensorId,
        /// Gradient, read as the output's and written as the input's.
        d: TensorId,
    },
}

impl Op for ReluOp {
    fn reads(&self) -> Vec<TensorId> {
        match self {
            ReluOp::Fwd { x, .. } => vec![*x],
            ReluOp::FwdInPlace { y } => vec![*y],
            ReluOp::Bwd { y, dy, .. } => vec![*y, *dy],
            ReluOp::BwdInPlace { y, d } => vec![*y, *d],
        }
    }

    fn writes(&self) -> Vec<TensorId> {
        match self {
            ReluOp::Fwd { y, .. } | ReluOp::FwdInPlace { y } => vec![*y],
            ReluOp::Bwd { dx, .. } => vec![*dx],
            ReluOp::BwdInPlace { d, .. } => vec![*d],
        }
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let be = cx.be;
        match self {
            ReluOp::Fwd { x, y } => be.relu_forward(cx.read(*x)?, cx.write(*y)?)?,
            ReluOp::FwdInPlace { y } => be.relu_forward_inplace(cx.write(*y)?)?,
            ReluOp::Bwd { y, dy, dx } => be.relu_backward(cx.read(*y)?, cx.read(*dy)?, cx.write(*dx)?)?,
            ReluOp::BwdInPlace { y, d } => be.relu_backward_inplace(cx.read(*y)?, cx.write(*d)?)?,
        }
        Ok(())
    }
}

impl LayerOps for Relu {
    fn backward_reads_output(&self) -> bool {
        true
    }

    /// In place when this node is its input's only consumer, the input is not the batch,
    /// and the input's own backward pass does not read it.
    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let src = l.node(n).inputs[0];
        let x = l.act(src);
        let in_place = l.consumers[src].len() == 1 && !l.node(src).layer.ops().backward_reads_output() && src != 0;
        if in_place {
            let y = l.alias(TensorKind::Activation(n), x);
            l.push(ReluOp::FwdInPlace { y });
            y
        } else {
            let y = l.activation(n);
            l.push(ReluOp::Fwd { x, y });
            y
        }
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        let (src, y) = (l.node(n).inputs[0], l.act(n));
        if src == 0 {
            return;
        }
        if l.first_grad(src) {
            // dy is read only here: turn it into dx in place.
            let d = l.grad_in_place(src, dy);
            l.push(ReluOp::BwdInPlace { y, d });
        } else {
            l.contribute(src, |dx| Instr::Relu(ReluOp::Bwd { y, dy, dx }));
        }
    }
}
