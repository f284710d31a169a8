//! 2-d convolution: `y = conv(x, W) + b` over `[batch, c, h, w]` activations, with square
//! kernels, stride and zero padding; weights `[out, in, k, k]` as PyTorch lays them out.

use crossbow_kernels::Backend;
use crossbow_kernels::conv2d::Conv2dGeom;
use crossbow_tensor::{Init, Shape};
use serde::Serialize;

use super::{Instr, LayerOps, Op, chw};
use crate::error::Result;
use crate::exec::ExecCx;
use crate::graph::{Graph, GraphBuilder, Node, NodeId};
use crate::program::{Lowering, ParamRange, TensorId};

/// A square 2-d convolution's hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Conv2d {
    /// Output channels (number of filters).
    pub out_channels: usize,
    /// Side of the square kernel, in pixels.
    pub kernel: usize,
    /// Step between windows, in pixels.
    pub stride: usize,
    /// Zero padding added on each side, in pixels.
    pub pad: usize,
    /// Whether a per-channel bias is added.
    pub bias: bool,
}

impl Conv2d {
    /// The kernels' geometry of `node` (this layer) in `graph` at batch `batch`.
    pub fn geom(&self, graph: &Graph, node: &Node, batch: usize) -> Conv2dGeom {
        let (c, h, w) = chw(&graph.nodes[node.inputs[0]].shape);
        Conv2dGeom::square(batch, c, (h, w), self.out_channels, self.kernel, self.stride, self.pad, self.bias)
    }
}

impl GraphBuilder {
    /// A square 2-d convolution of `x`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv2d(
        &mut self,
        name: &str,
        x: NodeId,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
        bias: bool,
    ) -> Result<NodeId> {
        self.check(x)?;
        let (c, h, w) = self.chw(x, name)?;
        let g = Conv2dGeom::square(1, c, (h, w), out_channels, kernel, stride, pad, bias);
        if g.validate().is_err() {
            return Err(self.does_not_fit(name, "convolution", (kernel, stride, pad), (c, h, w)));
        }
        let shape = Shape::new(vec![out_channels, g.out_h(), g.out_w()]);
        let region = self.region(
            g.weight_len(),
            if bias { out_channels } else { 0 },
            self.conv_init,
            Init::Constant { value: 0.0 },
            (c * kernel * kernel, out_channels * kernel * kernel),
        );
        let layer = Conv2d { out_channels, kernel, stride, pad, bias };
        Ok(self.push(name.into(), layer.into(), vec![x], shape, Some(region), None))
    }
}

/// A convolution's kernel calls.
#[derive(Clone, Debug)]
pub enum ConvOp {
    /// Forward: `y = conv(x, weights) + bias`.
    Fwd {
        /// Convolution geometry.
        g: Conv2dGeom,
        /// Input activation `[batch, c_in, h, w]`.
        x: TensorId,
        /// Output activation `[batch, c_out, oh, ow]`.
        y: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Backward to the input: `dx` from `dy` and the weights.
    BwdData {
        /// Convolution geometry.
        g: Conv2dGeom,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Backward to the parameters: writes the weight and bias gradients at `p`.
    BwdParams {
        /// Convolution geometry.
        g: Conv2dGeom,
        /// Input activation of the forward pass.
        x: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Where the weight and bias gradients go in the gradient buffer.
        p: ParamRange,
    },
}

impl Op for ConvOp {
    fn reads(&self) -> Vec<TensorId> {
        match self {
            ConvOp::Fwd { x, .. } => vec![*x],
            ConvOp::BwdData { dy, .. } => vec![*dy],
            ConvOp::BwdParams { x, dy, .. } => vec![*x, *dy],
        }
    }

    fn writes(&self) -> Vec<TensorId> {
        match self {
            ConvOp::Fwd { y, .. } => vec![*y],
            ConvOp::BwdData { dx, .. } => vec![*dx],
            ConvOp::BwdParams { .. } => vec![],
        }
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let (be, ws) = (cx.be, cx.workspace()?);
        match self {
            ConvOp::Fwd { g, x, y, p } => be.conv2d_forward(g, cx.read(*x)?, cx.params(p)?, cx.write(*y)?, ws)?,
            ConvOp::BwdData { g, dy, dx, p } => {
                be.conv2d_backward_data(g, cx.read(*dy)?, cx.params(p)?, cx.write(*dx)?, ws)?
            }
            ConvOp::BwdParams { g, x, dy, p } => {
                be.conv2d_backward_params(g, cx.read(*x)?, cx.read(*dy)?, cx.grads(p)?, ws)?
            }
        }
        Ok(())
    }

    fn workspace_len<B: Backend>(&self, be: &B) -> usize {
        match self {
            ConvOp::Fwd { g, .. } | ConvOp::BwdData { g, .. } | ConvOp::BwdParams { g, .. } => {
                be.conv2d_workspace_len(g)
            }
        }
    }
}

impl LayerOps for Conv2d {
    fn flops(&self, graph: &Graph, node: &Node) -> f64 {
        self.geom(graph, node, 1).forward_flops()
    }

    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let (x, y) = (l.input(n, 0), l.activation(n));
        let g = self.geom(l.g, l.node(n), l.batch);
        l.push(ConvOp::Fwd { g, x, y, p: l.params(n) });
        y
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        let g = self.geom(l.g, l.node(n), l.batch);
        let (x, p) = (l.input(n, 0), l.params(n));
        l.push(ConvOp::BwdParams { g, x, dy, p: p.clone() });
        l.contribute(l.node(n).inputs[0], |dx| Instr::Conv2d(ConvOp::BwdData { g, dy, dx, p }));
    }

    fn pytorch_shapes(&self, graph: &Graph, node: &Node) -> Option<(Vec<usize>, usize)> {
        let cin = self.geom(graph, node, 1).in_channels;
        let weight = vec![self.out_channels, cin, self.kernel, self.kernel];
        Some((weight, if self.bias { self.out_channels } else { 0 }))
    }
}
