//! Leaky ReLU, `y = x > 0 ? x : slope·x` with a slope `>= 0` (PyTorch's `nn.LeakyReLU`,
//! default slope 0.01). The backward pass reads the forward output: for `slope >= 0`,
//! `y > 0` exactly when `x > 0`.

use crossbow_kernels::Backend;
use serde::Serialize;

use super::{Instr, LayerOps, Op};
use crate::error::{ReplicaError, Result};
use crate::exec::ExecCx;
use crate::graph::{GraphBuilder, NodeId};
use crate::program::{Lowering, TensorId};

/// Leaky ReLU's slope.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeakyRelu {
    /// The slope for negative inputs, finite and `>= 0`.
    pub slope: f32,
}

impl GraphBuilder {
    /// Leaky ReLU of `x` with `slope` for negative inputs (finite, `>= 0`).
    pub fn leaky_relu(&mut self, name: &str, x: NodeId, slope: f32) -> Result<NodeId> {
        self.check(x)?;
        if !(slope.is_finite() && slope >= 0.0) {
            return Err(ReplicaError::Model(format!("{name}: leaky ReLU slope {slope} is not a finite number >= 0")));
        }
        let shape = self.shape(x).clone();
        Ok(self.push(name.into(), LeakyRelu { slope }.into(), vec![x], shape, None, None))
    }
}

/// Leaky ReLU's kernel calls.
#[derive(Clone, Debug)]
pub enum LeakyReluOp {
    /// `y = x > 0 ? x : slope·x`.
    Fwd {
        /// The slope.
        slope: f32,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
    },
    /// `dx = y > 0 ? dy : slope·dy`, from the forward output `y`.
    Bwd {
        /// The slope.
        slope: f32,
        /// Output activation of the forward pass.
        y: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
    },
}

impl Op for LeakyReluOp {
    fn reads(&self) -> Vec<TensorId> {
        match self {
            LeakyReluOp::Fwd { x, .. } => vec![*x],
            LeakyReluOp::Bwd { y, dy, .. } => vec![*y, *dy],
        }
    }

    fn writes(&self) -> Vec<TensorId> {
        match self {
            LeakyReluOp::Fwd { y, .. } => vec![*y],
            LeakyReluOp::Bwd { dx, .. } => vec![*dx],
        }
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let be = cx.be;
        match self {
            LeakyReluOp::Fwd { slope, x, y } => be.leaky_relu_forward(*slope, cx.read(*x)?, cx.write(*y)?)?,
            LeakyReluOp::Bwd { slope, y, dy, dx } => {
                be.leaky_relu_backward(*slope, cx.read(*y)?, cx.read(*dy)?, cx.write(*dx)?)?
            }
        }
        Ok(())
    }
}

impl LayerOps for LeakyRelu {
    fn backward_reads_output(&self) -> bool {
        true
    }

    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let (x, y) = (l.input(n, 0), l.activation(n));
        l.push(LeakyReluOp::Fwd { slope: self.slope, x, y });
        y
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        let (slope, y) = (self.slope, l.act(n));
        l.contribute(l.node(n).inputs[0], |dx| Instr::LeakyRelu(LeakyReluOp::Bwd { slope, y, dy, dx }));
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::GraphBuilder;
    use crossbow_tensor::Shape;

    /// A negative, infinite or NaN slope is refused with the layer's name and the value.
    #[test]
    fn bad_slopes_are_refused_in_words() {
        let mut b = GraphBuilder::new("t", Shape::new(vec![1, 4, 4])).unwrap();
        let x = b.input();
        for slope in [-0.1, f32::NAN, f32::INFINITY] {
            let e = b.leaky_relu("lr", x, slope).unwrap_err().to_string();
            assert!(e.contains("lr: leaky ReLU slope") && e.contains(&slope.to_string()), "{e}");
        }
        let y = b.leaky_relu("lr", x, 0.0).unwrap();
        assert_eq!(b.shape(y), &Shape::new(vec![1, 4, 4]));
    }
}
