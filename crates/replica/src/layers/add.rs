//! The element-wise sum of two nodes of the same shape (residual connections); its backward
//! pass hands the output gradient to both inputs.

use serde::Serialize;

use super::tensor::TensorOp;
use super::{Instr, LayerOps};
use crate::error::{ReplicaError, Result};
use crate::graph::{GraphBuilder, NodeId};
use crate::program::{Lowering, TensorId};

/// The sum of two inputs (no hyper-parameters).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Add;

impl GraphBuilder {
    /// The sum of two nodes of the same shape.
    pub fn add(&mut self, name: &str, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.check(a)?;
        self.check(b)?;
        let sa = self.shape(a).clone();
        sa.expect_eq(self.shape(b), name).map_err(|e| ReplicaError::Model(e.to_string()))?;
        Ok(self.push(name.into(), Add.into(), vec![a, b], sa, None, None))
    }
}

impl LayerOps for Add {
    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let (a, b, y) = (l.input(n, 0), l.input(n, 1), l.activation(n));
        l.push(TensorOp::Add { a, b, y });
        y
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        for &src in &l.node(n).inputs {
            l.contribute(src, |dx| Instr::Tensor(TensorOp::Copy { src: dy, dst: dx }));
        }
    }
}
