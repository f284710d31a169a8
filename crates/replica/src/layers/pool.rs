//! Pooling: max and average over square windows (padded positions are left out of the max
//! and of the average's count, with floor or Caffe-style ceil output sizes), and global
//! average pooling `[c, h, w] -> [c, 1, 1]`.

use crossbow_kernels::Backend;
use crossbow_kernels::pool::Pool2dGeom;
use crossbow_tensor::Shape;
use serde::Serialize;

use super::{Instr, Layer, LayerOps, Op, chw};
use crate::error::Result;
use crate::exec::ExecCx;
use crate::graph::{Graph, GraphBuilder, Node, NodeId};
use crate::program::{Lowering, TensorId};

/// Max pooling's window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MaxPool {
    /// Side of the square window, in pixels.
    pub kernel: usize,
    /// Step between windows, in pixels.
    pub stride: usize,
    /// Padding on each side, in pixels (padded positions are left out of the max).
    pub pad: usize,
    /// Round the output size up (Caffe-style ceil mode) rather than down.
    pub ceil: bool,
}

/// Average pooling's window (windows divided by their in-bounds element count).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AvgPool {
    /// Side of the square window, in pixels.
    pub kernel: usize,
    /// Step between windows, in pixels.
    pub stride: usize,
    /// Padding on each side, in pixels (padded positions are left out of the average).
    pub pad: usize,
    /// Round the output size up (Caffe-style ceil mode) rather than down.
    pub ceil: bool,
}

/// Global average pooling (no hyper-parameters).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GlobalAvgPool;

/// The pooling geometry over an input of `(c, h, w)` at batch `batch`: a square window
/// `(kernel, stride, pad, ceil)`, or the whole image.
fn geom(window: Option<(usize, usize, usize, bool)>, (c, h, w): (usize, usize, usize), batch: usize) -> Pool2dGeom {
    match window {
        Some((k, s, p, ceil)) => Pool2dGeom { ceil_mode: ceil, ..Pool2dGeom::square(batch, c, (h, w), k, s, p) },
        None => Pool2dGeom::global(batch, c, (h, w)),
    }
}

fn input_chw(graph: &Graph, node: &Node) -> (usize, usize, usize) {
    chw(&graph.nodes[node.inputs[0]].shape)
}

impl MaxPool {
    /// The kernels' geometry of `node` (this layer) in `graph` at batch `batch`.
    pub fn geom(&self, graph: &Graph, node: &Node, batch: usize) -> Pool2dGeom {
        geom(Some((self.kernel, self.stride, self.pad, self.ceil)), input_chw(graph, node), batch)
    }
}

impl AvgPool {
    /// The kernels' geometry of `node` (this layer) in `graph` at batch `batch`.
    pub fn geom(&self, graph: &Graph, node: &Node, batch: usize) -> Pool2dGeom {
        geom(Some((self.kernel, self.stride, self.pad, self.ceil)), input_chw(graph, node), batch)
    }
}

impl GlobalAvgPool {
    /// The kernels' geometry of `node` (this layer) in `graph` at batch `batch`.
    pub fn geom(&self, graph: &Graph, node: &Node, batch: usize) -> Pool2dGeom {
        geom(None, input_chw(graph, node), batch)
    }
}

impl GraphBuilder {
    fn pool(
        &mut self,
        name: &str,
        x: NodeId,
        window: Option<(usize, usize, usize, bool)>,
        layer: Layer,
    ) -> Result<NodeId> {
        self.check(x)?;
        let (c, h, w) = self.chw(x, name)?;
        let g = geom(window, (c, h, w), 1);
        if g.validate().is_err() {
            let (k, s, p) = window.map_or((h.max(w), 1, 0), |(k, s, p, _)| (k, s, p));
            return Err(self.does_not_fit(name, "pooling", (k, s, p), (c, h, w)));
        }
        let shape = Shape::new(vec![c, g.out_h(), g.out_w()]);
        Ok(self.push(name.into(), layer, vec![x], shape, None, None))
    }

    /// Max pooling of `x`.
    pub fn max_pool(
        &mut self,
        name: &str,
        x: NodeId,
        kernel: usize,
        stride: usize,
        pad: usize,
        ceil: bool,
    ) -> Result<NodeId> {
        self.pool(name, x, Some((kernel, stride, pad, ceil)), MaxPool { kernel, stride, pad, ceil }.into())
    }

    /// Average pooling of `x`.
    pub fn avg_pool(
        &mut self,
        name: &str,
        x: NodeId,
        kernel: usize,
        stride: usize,
        pad: usize,
        ceil: bool,
    ) -> Result<NodeId> {
        self.pool(name, x, Some((kernel, stride, pad, ceil)), AvgPool { kernel, stride, pad, ceil }.into())
    }

    /// Global average pooling of `x` to `[c, 1, 1]`.
    pub fn global_avg_pool(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        self.pool(name, x, None, GlobalAvgPool.into())
    }
}

/// Pooling's kernel calls.
#[derive(Clone, Debug)]
pub enum PoolOp {
    /// Max pooling forward.
    Max {
        /// Pooling geometry.
        g: Pool2dGeom,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
    },
    /// Max pooling backward: each window's gradient goes to its (first) maximum.
    MaxBwd {
        /// Pooling geometry.
        g: Pool2dGeom,
        /// Input activation of the forward pass.
        x: TensorId,
        /// Output activation of the forward pass (the maxima).
        y: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
    },
    /// Average pooling forward (also global average pooling).
    Avg {
        /// Pooling geometry.
        g: Pool2dGeom,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
    },
    /// Average pooling backward: each window's gradient spread evenly over it.
    AvgBwd {
        /// Pooling geometry.
        g: Pool2dGeom,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
    },
}

impl Op for PoolOp {
    fn reads(&self) -> Vec<TensorId> {
        match self {
            PoolOp::Max { x, .. } | PoolOp::Avg { x, .. } => vec![*x],
            PoolOp::MaxBwd { x, y, dy, .. } => vec![*x, *y, *dy],
            PoolOp::AvgBwd { dy, .. } => vec![*dy],
        }
    }

    fn writes(&self) -> Vec<TensorId> {
        match self {
            PoolOp::Max { y, .. } | PoolOp::Avg { y, .. } => vec![*y],
            PoolOp::MaxBwd { dx, .. } | PoolOp::AvgBwd { dx, .. } => vec![*dx],
        }
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let be = cx.be;
        match self {
            PoolOp::Max { g, x, y } => be.max_pool_forward(g, cx.read(*x)?, cx.write(*y)?)?,
            PoolOp::MaxBwd { g, x, y, dy, dx } => {
                be.max_pool_backward(g, cx.read(*x)?, cx.read(*y)?, cx.read(*dy)?, cx.write(*dx)?)?
            }
            PoolOp::Avg { g, x, y } => be.avg_pool_forward(g, cx.read(*x)?, cx.write(*y)?)?,
            PoolOp::AvgBwd { g, dy, dx } => be.avg_pool_backward(g, cx.read(*dy)?, cx.write(*dx)?)?,
        }
        Ok(())
    }
}

impl LayerOps for MaxPool {
    fn backward_reads_output(&self) -> bool {
        true
    }

    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let (x, y) = (l.input(n, 0), l.activation(n));
        l.push(PoolOp::Max { g: self.geom(l.g, l.node(n), l.batch), x, y });
        y
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        let (g, x, y) = (self.geom(l.g, l.node(n), l.batch), l.input(n, 0), l.act(n));
        l.contribute(l.node(n).inputs[0], |dx| Instr::Pool(PoolOp::MaxBwd { g, x, y, dy, dx }));
    }
}

/// Average pooling's lowering, shared by the windowed and global layers.
fn lower_avg_forward(g: Pool2dGeom, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
    let (x, y) = (l.input(n, 0), l.activation(n));
    l.push(PoolOp::Avg { g, x, y });
    y
}

fn lower_avg_backward(g: Pool2dGeom, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
    l.contribute(l.node(n).inputs[0], |dx| Instr::Pool(PoolOp::AvgBwd { g, dy, dx }));
}

impl LayerOps for AvgPool {
    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        lower_avg_forward(self.geom(l.g, l.node(n), l.batch), l, n)
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        lower_avg_backward(self.geom(l.g, l.node(n), l.batch), l, n, dy)
    }
}

impl LayerOps for GlobalAvgPool {
    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        lower_avg_forward(self.geom(l.g, l.node(n), l.batch), l, n)
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        lower_avg_backward(self.geom(l.g, l.node(n), l.batch), l, n, dy)
    }
}
