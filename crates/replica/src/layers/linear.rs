//! Fully connected layer: `y = x Wᵀ + b`, the input flattened per sample in `c, h, w` order
//! (as `torch.flatten(x, 1)`); weights `[out, in]`.

use crossbow_kernels::Backend;
use crossbow_kernels::linear::LinearGeom;
use crossbow_tensor::Shape;
use serde::Serialize;

use super::{Instr, LayerOps, Op};
use crate::error::{ReplicaError, Result};
use crate::exec::ExecCx;
use crate::graph::{Graph, GraphBuilder, Node, NodeId};
use crate::program::{Lowering, ParamRange, TensorId};

/// A fully connected layer's hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Linear {
    /// Output features per sample.
    pub out_features: usize,
    /// Whether a per-feature bias is added.
    pub bias: bool,
}

impl Linear {
    /// The kernels' geometry of `node` (this layer) in `graph` at batch `batch`.
    pub fn geom(&self, graph: &Graph, node: &Node, batch: usize) -> LinearGeom {
        let in_features = graph.nodes[node.inputs[0]].shape.dims().iter().product();
        LinearGeom { batch, in_features, out_features: self.out_features, bias: self.bias }
    }
}

impl GraphBuilder {
    /// A fully connected layer over the flattened `x`.
    pub fn linear(&mut self, name: &str, x: NodeId, out_features: usize, bias: bool) -> Result<NodeId> {
        self.check(x)?;
        if out_features == 0 {
            return Err(ReplicaError::Model(format!("{name}: a linear layer needs at least one output")));
        }
        let inf: usize = self.shape(x).dims().iter().product();
        let (wi, bi) = self.linear_init;
        let region = self.region(inf * out_features, if bias { out_features } else { 0 }, wi, bi, (inf, out_features));
        let shape = Shape::new(vec![out_features]);
        Ok(self.push(name.into(), Linear { out_features, bias }.into(), vec![x], shape, Some(region), None))
    }
}

/// A fully connected layer's kernel calls.
#[derive(Clone, Debug)]
pub enum LinearOp {
    /// Forward: `y = x W^T + b`.
    Fwd {
        /// Linear geometry.
        g: LinearGeom,
        /// Input activation, flattened per sample.
        x: TensorId,
        /// Output activation `[batch, out_features]`.
        y: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Backward to the input: `dx = dy W`.
    BwdData {
        /// Linear geometry.
        g: LinearGeom,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Backward to the parameters: `dW = dy^T x`, `db = sum_n dy`, at `p`.
    BwdParams {
        /// Linear geometry.
        g: LinearGeom,
        /// Input activation of the forward pass.
        x: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Where the weight and bias gradients go in the gradient buffer.
        p: ParamRange,
    },
}

impl Op for LinearOp {
    fn reads(&self) -> Vec<TensorId> {
        match self {
            LinearOp::Fwd { x, .. } => vec![*x],
            LinearOp::BwdData { dy, .. } => vec![*dy],
            LinearOp::BwdParams { x, dy, .. } => vec![*x, *dy],
        }
    }

    fn writes(&self) -> Vec<TensorId> {
        match self {
            LinearOp::Fwd { y, .. } => vec![*y],
            LinearOp::BwdData { dx, .. } => vec![*dx],
            LinearOp::BwdParams { .. } => vec![],
        }
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let be = cx.be;
        match self {
            LinearOp::Fwd { g, x, y, p } => be.linear_forward(g, cx.read(*x)?, cx.params(p)?, cx.write(*y)?)?,
            LinearOp::BwdData { g, dy, dx, p } => {
                be.linear_backward_data(g, cx.read(*dy)?, cx.params(p)?, cx.write(*dx)?)?
            }
            LinearOp::BwdParams { g, x, dy, p } => {
                be.linear_backward_params(g, cx.read(*x)?, cx.read(*dy)?, cx.grads(p)?)?
            }
        }
        Ok(())
    }
}

impl LayerOps for Linear {
    fn flops(&self, graph: &Graph, node: &Node) -> f64 {
        self.geom(graph, node, 1).forward_flops()
    }

    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let (x, y) = (l.input(n, 0), l.activation(n));
        let g = self.geom(l.g, l.node(n), l.batch);
        l.push(LinearOp::Fwd { g, x, y, p: l.params(n) });
        y
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        let g = self.geom(l.g, l.node(n), l.batch);
        let (x, p) = (l.input(n, 0), l.params(n));
        l.push(LinearOp::BwdParams { g, x, dy, p: p.clone() });
        l.contribute(l.node(n).inputs[0], |dx| Instr::Linear(LinearOp::BwdData { g, dy, dx, p }));
    }

    fn pytorch_shapes(&self, graph: &Graph, node: &Node) -> Option<(Vec<usize>, usize)> {
        let inf = self.geom(graph, node, 1).in_features;
        Some((vec![self.out_features, inf], if self.bias { self.out_features } else { 0 }))
    }
}
