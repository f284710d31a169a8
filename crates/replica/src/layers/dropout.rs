//! Inverted dropout: in training, each element is dropped with probability `p` and the
//! kept ones scaled by `1 / (1 - p)`, the mask drawn from the run's seed mixed with the
//! node; at evaluation it is the identity (no rescaling needed).

use crossbow_kernels::Backend;
use crossbow_kernels::dropout::DropoutConfig;
use serde::Serialize;

use super::tensor::TensorOp;
use super::{Instr, LayerOps, Op};
use crate::error::{ReplicaError, Result};
use crate::exec::{ExecCx, mix};
use crate::graph::{GraphBuilder, NodeId};
use crate::program::{Lowering, Mode, TensorId, TensorKind};

/// Dropout's probability.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Dropout {
    /// Probability of dropping an element, in `[0, 1)`.
    pub p: f32,
}

impl GraphBuilder {
    /// Dropout of `x` with probability `p`.
    pub fn dropout(&mut self, name: &str, x: NodeId, p: f32) -> Result<NodeId> {
        self.check(x)?;
        if !(0.0..1.0).contains(&p) {
            return Err(ReplicaError::Model(format!("{name}: dropout probability {p} is not in [0, 1)")));
        }
        let shape = self.shape(x).clone();
        Ok(self.push(name.into(), Dropout { p }.into(), vec![x], shape, None, None))
    }
}

/// Dropout's forward kernel call: `y = x * mask`, the mask drawn from the call's seed.
#[derive(Clone, Debug)]
pub struct DropoutOp {
    /// Probability of dropping an element, in `[0, 1)`.
    pub p: f32,
    /// The graph node, mixed into the seed so every dropout layer draws its own mask.
    pub node: NodeId,
    /// Input activation.
    pub x: TensorId,
    /// Output activation.
    pub y: TensorId,
    /// The mask written: 0 for dropped elements, `1 / (1 - p)` for kept ones.
    pub mask: TensorId,
}

impl Op for DropoutOp {
    fn reads(&self) -> Vec<TensorId> {
        vec![self.x]
    }

    fn writes(&self) -> Vec<TensorId> {
        vec![self.y, self.mask]
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let cfg = DropoutConfig { p: self.p, seed: mix(cx.seed, self.node as u64) };
        let (x, y, mask) = (cx.read(self.x)?, cx.write(self.y)?, cx.write(self.mask)?);
        Ok(cx.be.dropout_forward(&cfg, x, y, mask)?)
    }
}

impl LayerOps for Dropout {
    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let x = l.input(n, 0);
        if l.mode == Mode::Train && self.p > 0.0 {
            let y = l.activation(n);
            let mask = l.new_tensor(TensorKind::Mask(n), l.len(n));
            l.push(DropoutOp { p: self.p, node: n, x, y, mask });
            y
        } else {
            // Identity at evaluation (inverted dropout needs no rescaling).
            l.alias(TensorKind::Activation(n), x)
        }
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        let src = l.node(n).inputs[0];
        if self.p > 0.0 {
            let mask = l.find(&TensorKind::Mask(n)).unwrap_or_default();
            l.contribute(src, |dx| Instr::Tensor(TensorOp::Mul { a: dy, b: mask, y: dx }));
        } else {
            l.contribute(src, |dx| Instr::Tensor(TensorOp::Copy { src: dy, dst: dx }));
        }
    }
}
