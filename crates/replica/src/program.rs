//! Lowering a [`Graph`] at a batch size into a straight-line program of kernel calls over
//! numbered tensors: the training program (forward with batch statistics, fused loss and
//! gradient, backward) and the evaluation program (forward with running statistics, loss and
//! accuracy). The memory plan ([`crate::plan`]) then maps tensors to reusable buffers.

use crossbow_kernels::batch_norm::BatchNormGeom;
use crossbow_kernels::conv2d::Conv2dGeom;
use crossbow_kernels::linear::LinearGeom;
use crossbow_kernels::pool::Pool2dGeom;
use crossbow_kernels::softmax_xent::SoftmaxXentGeom;

use crate::error::{ReplicaError, Result};
use crate::graph::{Graph, Layer, NodeId};

/// A tensor of the program, by index.
pub type TensorId = usize;

/// What a tensor holds (for reports and debugging).
#[derive(Clone, Debug, PartialEq)]
pub enum TensorKind {
    /// The input batch (uploaded before the program runs).
    Input,
    /// The output of a node.
    Activation(NodeId),
    /// The gradient of the loss with respect to a node's output.
    Gradient(NodeId),
    /// A dropout mask.
    Mask(NodeId),
    /// A partial gradient for a tensor with several consumers.
    Partial(NodeId),
}

/// One tensor: its kind, its element count, and the tensor it shares storage with (an
/// in-place op's output aliases its input).
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// What the tensor holds.
    pub kind: TensorKind,
    /// Elements for the whole batch.
    pub len: usize,
    /// Storage root (itself unless aliased).
    pub storage: TensorId,
}

/// A region of the flat parameter buffer (and of the gradient buffer).
pub type ParamRange = std::ops::Range<usize>;

/// One kernel call.
///
/// Field names follow one convention: `x` is the input activation, `y` the output
/// activation, `dy` the gradient with respect to `y`, `dx` the gradient with respect to `x`
/// (written), `g` the kernel's geometry at the program's batch size, and `p` the layer's
/// region of the flat parameter buffer (and of the gradient buffer, laid out alike).
#[derive(Clone, Debug)]
pub enum Instr {
    /// Convolution forward: `y = conv(x, weights) + bias`.
    ConvFwd {
        /// Convolution geometry.
        g: Conv2dGeom,
        /// Input activation `[batch, c_in, h, w]`.
        x: TensorId,
        /// Output activation `[batch, c_out, oh, ow]`.
        y: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Convolution backward to the input: `dx` from `dy` and the weights.
    ConvBwdData {
        /// Convolution geometry.
        g: Conv2dGeom,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Convolution backward to the parameters: writes the weight and bias gradients at `p`.
    ConvBwdParams {
        /// Convolution geometry.
        g: Conv2dGeom,
        /// Input activation of the forward pass.
        x: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Where the weight and bias gradients go in the gradient buffer.
        p: ParamRange,
    },
    /// Fully connected forward: `y = x W^T + b`.
    LinearFwd {
        /// Linear geometry.
        g: LinearGeom,
        /// Input activation, flattened per sample.
        x: TensorId,
        /// Output activation `[batch, out_features]`.
        y: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Fully connected backward to the input: `dx = dy W`.
    LinearBwdData {
        /// Linear geometry.
        g: LinearGeom,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
        /// Weights and bias in the parameter buffer.
        p: ParamRange,
    },
    /// Fully connected backward to the parameters: `dW = dy^T x`, `db = sum_n dy`, at `p`.
    LinearBwdParams {
        /// Linear geometry.
        g: LinearGeom,
        /// Input activation of the forward pass.
        x: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Where the weight and bias gradients go in the gradient buffer.
        p: ParamRange,
    },
    /// Batch norm with batch statistics: saves `[mean, inv_std]` for the backward pass and
    /// updates the running statistics.
    BnTrain {
        /// Batch-norm geometry (with `momentum` 1 when recalibrating).
        g: BatchNormGeom,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
        /// `[gamma(C), beta(C)]` in the parameter buffer.
        p: ParamRange,
        /// Offset of this layer's `[mean(C), var(C)]` in the state and saved-stats buffers.
        stats: usize,
    },
    /// Batch norm with the running statistics (evaluation).
    BnInfer {
        /// Batch-norm geometry.
        g: BatchNormGeom,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
        /// `[gamma(C), beta(C)]` in the parameter buffer.
        p: ParamRange,
        /// Offset of this layer's running `[mean(C), var(C)]` in the state buffer.
        stats: usize,
    },
    /// Batch norm backward: `dx`, and `[dgamma, dbeta]` at `p` in the gradient buffer.
    BnBwd {
        /// Batch-norm geometry.
        g: BatchNormGeom,
        /// Input activation of the forward pass.
        x: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
        /// `[gamma(C), beta(C)]` in the parameter buffer, and where their gradients go.
        p: ParamRange,
        /// Offset of this layer's saved `[mean(C), inv_std(C)]` in the saved-stats buffer.
        stats: usize,
    },
    /// `y = max(x, 0)`.
    Relu {
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
    },
    /// `y = max(y, 0)` in place (`y` aliases the input's storage).
    ReluInPlace {
        /// The activation rectified in place.
        y: TensorId,
    },
    /// `dx = dy * (y > 0)`, from the forward output `y`.
    ReluBwd {
        /// Output activation of the forward pass.
        y: TensorId,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
    },
    /// `d = d * (y > 0)` in place: the output gradient becomes the input gradient.
    ReluBwdInPlace {
        /// Output activation of the forward pass.
        y: TensorId,
        /// Gradient, read as the output's and written as the input's.
        d: TensorId,
    },
    /// Max pooling forward.
    MaxPool {
        /// Pooling geometry.
        g: Pool2dGeom,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
    },
    /// Max pooling backward: each window's gradient goes to its (first) maximum.
    MaxPoolBwd {
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
    AvgPool {
        /// Pooling geometry.
        g: Pool2dGeom,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
    },
    /// Average pooling backward: each window's gradient spread evenly over it.
    AvgPoolBwd {
        /// Pooling geometry.
        g: Pool2dGeom,
        /// Gradient of the output.
        dy: TensorId,
        /// Gradient of the input (written).
        dx: TensorId,
    },
    /// Inverted dropout forward: `y = x * mask`, the mask drawn from the call's seed.
    Dropout {
        /// Probability of dropping an element, in `[0, 1)`.
        p: f32,
        /// The graph node, mixed into the seed so every dropout layer draws its own mask.
        node: NodeId,
        /// Input activation.
        x: TensorId,
        /// Output activation.
        y: TensorId,
        /// The mask written: 0 for dropped elements, `1 / (1 - p)` for kept ones.
        mask: TensorId,
    },
    /// `y = a * b`, element-wise (dropout backward: `dx = dy * mask`).
    Mul {
        /// First factor.
        a: TensorId,
        /// Second factor.
        b: TensorId,
        /// Product (written).
        y: TensorId,
    },
    /// `y = a + b`, element-wise (residual connections).
    Add {
        /// First term.
        a: TensorId,
        /// Second term.
        b: TensorId,
        /// Sum (written).
        y: TensorId,
    },
    /// `dst = src`.
    Copy {
        /// Tensor read.
        src: TensorId,
        /// Tensor written, same length as `src`.
        dst: TensorId,
    },
    /// `dst += src`.
    Accumulate {
        /// Tensor added.
        src: TensorId,
        /// Tensor accumulated into, same length as `src`.
        dst: TensorId,
    },
    /// Softmax cross-entropy; writes the loss statistics and, when `dlogits` is set, the
    /// gradient of the mean loss.
    Loss {
        /// Batch size, classes and gradient scale (`1/batch`).
        g: SoftmaxXentGeom,
        /// The model's output `[batch, classes]`.
        logits: TensorId,
        /// Gradient of the mean loss with respect to the logits, in training programs.
        dlogits: Option<TensorId>,
    },
}

impl Instr {
    /// Tensors the instruction reads.
    pub fn reads(&self) -> Vec<TensorId> {
        use Instr::*;
        match self {
            ConvFwd { x, .. } | LinearFwd { x, .. } | BnTrain { x, .. } | BnInfer { x, .. } => vec![*x],
            ConvBwdData { dy, .. } | LinearBwdData { dy, .. } | AvgPoolBwd { dy, .. } => vec![*dy],
            ConvBwdParams { x, dy, .. } | LinearBwdParams { x, dy, .. } | BnBwd { x, dy, .. } => vec![*x, *dy],
            Relu { x, .. } | MaxPool { x, .. } | AvgPool { x, .. } | Dropout { x, .. } => vec![*x],
            ReluInPlace { y } => vec![*y],
            ReluBwd { y, dy, .. } => vec![*y, *dy],
            ReluBwdInPlace { y, d } => vec![*y, *d],
            MaxPoolBwd { x, y, dy, .. } => vec![*x, *y, *dy],
            Mul { a, b, .. } | Add { a, b, .. } => vec![*a, *b],
            Copy { src, .. } => vec![*src],
            Accumulate { src, dst } => vec![*src, *dst],
            Loss { logits, .. } => vec![*logits],
        }
    }

    /// Tensors the instruction writes.
    pub fn writes(&self) -> Vec<TensorId> {
        use Instr::*;
        match self {
            ConvFwd { y, .. } | LinearFwd { y, .. } | BnTrain { y, .. } | BnInfer { y, .. } => vec![*y],
            ConvBwdData { dx, .. } | LinearBwdData { dx, .. } | BnBwd { dx, .. } => vec![*dx],
            ConvBwdParams { .. } | LinearBwdParams { .. } => vec![],
            Relu { y, .. } | MaxPool { y, .. } | AvgPool { y, .. } | Mul { y, .. } | Add { y, .. } => vec![*y],
            ReluInPlace { y } => vec![*y],
            ReluBwd { dx, .. } | MaxPoolBwd { dx, .. } | AvgPoolBwd { dx, .. } => vec![*dx],
            ReluBwdInPlace { d, .. } => vec![*d],
            Dropout { y, mask, .. } => vec![*y, *mask],
            Copy { dst, .. } | Accumulate { dst, .. } => vec![*dst],
            Loss { dlogits, .. } => dlogits.iter().copied().collect(),
        }
    }
}

/// Whether the program trains, evaluates, or recalibrates batch-norm statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward with batch statistics (updating the running ones), dropout, loss, backward.
    Train,
    /// Forward with the running statistics, loss.
    Eval,
    /// Forward with batch statistics and no dropout, loss, no backward: each batch-norm
    /// layer's running statistics are overwritten with the batch's (momentum 1), so that a
    /// caller can average them over several batches (batch-norm recalibration).
    Calibrate,
}

/// A lowered model at one batch size.
#[derive(Clone, Debug)]
pub struct Program {
    /// Whether the program trains, evaluates or recalibrates.
    pub mode: Mode,
    /// Samples per batch the program was lowered for.
    pub batch: usize,
    /// Every tensor, indexed by [`TensorId`].
    pub tensors: Vec<TensorInfo>,
    /// The kernel calls, in execution order.
    pub instrs: Vec<Instr>,
    /// The input tensor (always tensor 0).
    pub input: TensorId,
    /// Number of classes (labels are `batch` class indices).
    pub classes: usize,
}

struct Lowering<'g> {
    g: &'g Graph,
    batch: usize,
    tensors: Vec<TensorInfo>,
    instrs: Vec<Instr>,
    act: Vec<Option<TensorId>>,
    grad: Vec<Option<TensorId>>,
}

impl Lowering<'_> {
    fn new_tensor(&mut self, kind: TensorKind, len: usize) -> TensorId {
        let id = self.tensors.len();
        self.tensors.push(TensorInfo { kind, len, storage: id });
        id
    }

    fn alias(&mut self, kind: TensorKind, of: TensorId) -> TensorId {
        let id = self.tensors.len();
        let storage = self.tensors[of].storage;
        let len = self.tensors[of].len;
        self.tensors.push(TensorInfo { kind, len, storage });
        id
    }

    fn len(&self, n: NodeId) -> usize {
        self.batch * self.g.per_sample(n)
    }

    fn act(&self, n: NodeId) -> TensorId {
        self.act[n].unwrap_or_else(|| unreachable!("activation of node {n} used before it is defined"))
    }
}

/// Bytes (`f32`) of every tensor of the program at `batch`, bounded from above without
/// lowering: each node has at most an activation, a dropout mask, a gradient and one partial
/// gradient per consumer, each `batch × per_sample` elements. Checked arithmetic, so an
/// absurd batch size is an error here rather than an overflow in the lowering, the memory
/// plan or the engine's footprint (all of which add up at most these tensors).
fn size_bound_bytes(graph: &Graph, batch: usize, consumers: &[Vec<NodeId>]) -> Option<usize> {
    (0..graph.nodes.len())
        .try_fold(0usize, |acc, n| {
            let per_node =
                graph.per_sample(n).checked_mul(3usize.checked_add(consumers.get(n).map_or(0, Vec::len))?)?;
            acc.checked_add(per_node)
        })?
        .checked_mul(batch)?
        .checked_mul(std::mem::size_of::<f32>())
}

fn check_size(graph: &Graph, batch: usize, consumers: &[Vec<NodeId>]) -> Result<()> {
    match size_bound_bytes(graph, batch, consumers) {
        Some(_) => Ok(()),
        None => Err(ReplicaError::Config(format!(
            "batch size {batch} is too large: the tensors of {} at that batch size would not fit in {} bits of address space",
            graph.name,
            usize::BITS
        ))),
    }
}

/// Whether the backward pass of node `n`'s own layer reads its output (so the output may not
/// be overwritten in place by a consumer).
fn backward_reads_output(layer: &Layer) -> bool {
    matches!(layer, Layer::Relu | Layer::MaxPool { .. })
}

/// Lowers `graph` at `batch` in `mode`.
pub fn lower(graph: &Graph, batch: usize, mode: Mode) -> Result<Program> {
    if batch == 0 {
        return Err(ReplicaError::Config("batch size must be at least 1".into()));
    }
    let n_nodes = graph.nodes.len();
    let consumers: Vec<Vec<NodeId>> = (0..n_nodes).map(|n| graph.consumers(n)).collect();
    check_size(graph, batch, &consumers)?;
    let mut l = Lowering {
        g: graph,
        batch,
        tensors: vec![],
        instrs: vec![],
        act: vec![None; n_nodes],
        grad: vec![None; n_nodes],
    };
    let input = l.new_tensor(TensorKind::Input, l.len(0));
    l.act[0] = Some(input);
    let train = mode == Mode::Train;
    lower_forward(&mut l, &consumers, mode);

    let out = graph.output;
    let g = SoftmaxXentGeom::mean(batch, graph.classes);
    let logits = l.act(out);
    if !train {
        l.instrs.push(Instr::Loss { g, logits, dlogits: None });
        return Ok(Program { mode, batch, tensors: l.tensors, instrs: l.instrs, input, classes: graph.classes });
    }
    let dlogits = l.new_tensor(TensorKind::Gradient(out), l.len(out));
    l.instrs.push(Instr::Loss { g, logits, dlogits: Some(dlogits) });
    l.grad[out] = Some(dlogits);

    lower_backward(&mut l);
    Ok(Program { mode, batch, tensors: l.tensors, instrs: l.instrs, input, classes: graph.classes })
}

/// The forward pass of `l.g` at `l.batch` into `l`: one instruction per layer (in-place
/// ReLU where nothing else reads its input; batch statistics unless evaluating; dropout
/// only in training).
fn lower_forward(l: &mut Lowering<'_>, consumers: &[Vec<NodeId>], mode: Mode) {
    let (graph, batch) = (l.g, l.batch);
    let train = mode == Mode::Train;
    let batch_stats = mode != Mode::Eval;
    for (n, node) in graph.nodes.iter().enumerate().skip(1) {
        let x = l.act(node.inputs[0]);
        let len = l.len(n);
        let params = node.params.as_ref().map(|r| r.range());
        let y = match &node.layer {
            Layer::Input => unreachable!("only node 0 is an input"),
            Layer::Conv2d { .. } => {
                let y = l.new_tensor(TensorKind::Activation(n), len);
                l.instrs.push(Instr::ConvFwd {
                    g: graph.conv_geom(node, batch),
                    x,
                    y,
                    p: params.clone().unwrap_or_default(),
                });
                y
            }
            Layer::Linear { .. } => {
                let y = l.new_tensor(TensorKind::Activation(n), len);
                l.instrs.push(Instr::LinearFwd {
                    g: graph.linear_geom(node, batch),
                    x,
                    y,
                    p: params.clone().unwrap_or_default(),
                });
                y
            }
            Layer::BatchNorm { .. } => {
                let y = l.new_tensor(TensorKind::Activation(n), len);
                let mut g = graph.bn_geom(node, batch);
                if mode == Mode::Calibrate {
                    g.momentum = 1.0;
                }
                let stats = node.stats.unwrap_or_default();
                let p = params.clone().unwrap_or_default();
                l.instrs.push(if batch_stats {
                    Instr::BnTrain { g, x, y, p, stats }
                } else {
                    Instr::BnInfer { g, x, y, p, stats }
                });
                y
            }
            Layer::Relu => {
                let src = node.inputs[0];
                let in_place = consumers[src].len() == 1 && !backward_reads_output(&graph.nodes[src].layer) && src != 0;
                if in_place {
                    let y = l.alias(TensorKind::Activation(n), x);
                    l.instrs.push(Instr::ReluInPlace { y });
                    y
                } else {
                    let y = l.new_tensor(TensorKind::Activation(n), len);
                    l.instrs.push(Instr::Relu { x, y });
                    y
                }
            }
            Layer::MaxPool { .. } => {
                let y = l.new_tensor(TensorKind::Activation(n), len);
                l.instrs.push(Instr::MaxPool { g: graph.pool_geom(node, batch), x, y });
                y
            }
            Layer::AvgPool { .. } | Layer::GlobalAvgPool => {
                let y = l.new_tensor(TensorKind::Activation(n), len);
                l.instrs.push(Instr::AvgPool { g: graph.pool_geom(node, batch), x, y });
                y
            }
            Layer::Dropout { p } => {
                if train && *p > 0.0 {
                    let y = l.new_tensor(TensorKind::Activation(n), len);
                    let mask = l.new_tensor(TensorKind::Mask(n), len);
                    l.instrs.push(Instr::Dropout { p: *p, node: n, x, y, mask });
                    y
                } else {
                    // Identity at evaluation (inverted dropout needs no rescaling).
                    l.alias(TensorKind::Activation(n), x)
                }
            }
            Layer::Add => {
                let b = l.act(node.inputs[1]);
                let y = l.new_tensor(TensorKind::Activation(n), len);
                l.instrs.push(Instr::Add { a: x, b, y });
                y
            }
        };
        l.act[n] = Some(y);
    }
}

/// The backward pass into `l`, from the loss gradient at the output back to the first layer.
/// A tensor's first gradient contribution is written into its gradient tensor; later ones
/// go to a partial tensor that is then accumulated.
fn lower_backward(l: &mut Lowering<'_>) {
    let (graph, batch) = (l.g, l.batch);
    let n_nodes = graph.nodes.len();
    for n in (1..n_nodes).rev() {
        let Some(dy) = l.grad[n] else { continue };
        let node = &graph.nodes[n];
        let params = node.params.as_ref().map(|r| r.range()).unwrap_or_default();
        // Parameter gradients first (they read dy before any in-place reuse of it).
        match &node.layer {
            Layer::Conv2d { .. } => {
                let x = l.act(node.inputs[0]);
                l.instrs.push(Instr::ConvBwdParams { g: graph.conv_geom(node, batch), x, dy, p: params.clone() });
            }
            Layer::Linear { .. } => {
                let x = l.act(node.inputs[0]);
                l.instrs.push(Instr::LinearBwdParams { g: graph.linear_geom(node, batch), x, dy, p: params.clone() });
            }
            _ => {}
        }
        let inputs = node.inputs.clone();
        for (slot, &src) in inputs.iter().enumerate() {
            if src == 0 {
                continue; // no gradient for the input batch
            }
            let first = l.grad[src].is_none();
            let len = l.len(src);
            // Where this contribution is written.
            let (target, partial) = if first {
                (None, false)
            } else {
                let t = l.new_tensor(TensorKind::Partial(src), len);
                (Some(t), true)
            };
            let x = l.act(src);
            let fresh = |l: &mut Lowering<'_>| -> TensorId {
                match target {
                    Some(t) => t,
                    None => {
                        let t = l.new_tensor(TensorKind::Gradient(src), len);
                        l.grad[src] = Some(t);
                        t
                    }
                }
            };
            match &node.layer {
                Layer::Conv2d { .. } => {
                    let dx = fresh(l);
                    l.instrs.push(Instr::ConvBwdData { g: graph.conv_geom(node, batch), dy, dx, p: params.clone() });
                }
                Layer::Linear { .. } => {
                    let dx = fresh(l);
                    l.instrs.push(Instr::LinearBwdData {
                        g: graph.linear_geom(node, batch),
                        dy,
                        dx,
                        p: params.clone(),
                    });
                }
                Layer::BatchNorm { .. } => {
                    let dx = fresh(l);
                    let g = graph.bn_geom(node, batch);
                    l.instrs.push(Instr::BnBwd {
                        g,
                        x,
                        dy,
                        dx,
                        p: params.clone(),
                        stats: node.stats.unwrap_or_default(),
                    });
                }
                Layer::Relu => {
                    let y = l.act(n);
                    if first {
                        // dy is read only here: turn it into dx in place.
                        let dx = l.alias(TensorKind::Gradient(src), dy);
                        l.grad[src] = Some(dx);
                        l.instrs.push(Instr::ReluBwdInPlace { y, d: dx });
                    } else {
                        let dx = fresh(l);
                        l.instrs.push(Instr::ReluBwd { y, dy, dx });
                    }
                }
                Layer::MaxPool { .. } => {
                    let dx = fresh(l);
                    let y = l.act(n);
                    l.instrs.push(Instr::MaxPoolBwd { g: graph.pool_geom(node, batch), x, y, dy, dx });
                }
                Layer::AvgPool { .. } | Layer::GlobalAvgPool => {
                    let dx = fresh(l);
                    l.instrs.push(Instr::AvgPoolBwd { g: graph.pool_geom(node, batch), dy, dx });
                }
                Layer::Dropout { p } => {
                    if *p > 0.0 {
                        let dx = fresh(l);
                        let mask = l.tensors.iter().position(|t| t.kind == TensorKind::Mask(n)).unwrap_or_default();
                        l.instrs.push(Instr::Mul { a: dy, b: mask, y: dx });
                    } else {
                        let dx = fresh(l);
                        l.instrs.push(Instr::Copy { src: dy, dst: dx });
                    }
                }
                Layer::Add => {
                    let dx = fresh(l);
                    l.instrs.push(Instr::Copy { src: dy, dst: dx });
                }
                Layer::Input => {}
            }
            if partial && let (Some(t), Some(dst)) = (target, l.grad[src]) {
                l.instrs.push(Instr::Accumulate { src: t, dst });
            }
            let _ = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelKind;
    use crate::plan::plan;
    use crossbow_tensor::Shape;

    #[test]
    fn absurd_batch_sizes_are_errors_not_overflows() {
        let g = ModelKind::LeNet5.build(&Shape::new(vec![1, 28, 28]), 10).unwrap();
        for batch in [usize::MAX, usize::MAX / 2, 1 << 50] {
            for mode in [Mode::Train, Mode::Eval, Mode::Calibrate] {
                let e = lower(&g, batch, mode).unwrap_err().to_string();
                assert!(e.contains(&format!("batch size {batch} is too large")), "{e}");
            }
        }
        // Large but representable: lowering and planning allocate nothing, and the plan's
        // sums stay below the bound the lowering checked.
        let p = lower(&g, 1 << 32, Mode::Train).unwrap();
        let pl = plan(&p);
        assert!(pl.planned_len() <= pl.unplanned_len);
        assert_eq!(pl.unplanned_bytes(), pl.unplanned_len * 4);
        let bound = size_bound_bytes(&g, 1 << 32, &(0..g.nodes.len()).map(|n| g.consumers(n)).collect::<Vec<_>>());
        assert!(pl.unplanned_bytes() <= bound.unwrap());
    }
}
