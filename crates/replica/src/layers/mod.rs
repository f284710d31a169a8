//! One module per layer. A layer's file holds everything about it: its hyper-parameters (the
//! struct inside [`Layer`]), its [`GraphBuilder`](crate::graph::GraphBuilder) method (shape
//! inference and parameter layout), its kernels' geometry, its forward and backward lowering
//! into instructions, the instructions themselves and how they run on a backend, its FLOPs,
//! and its PyTorch `state_dict` entries.
//!
//! This file lists the layers ([`Layer`]) and the instructions ([`Instr`]) and dispatches to
//! them. Adding a layer is a new file here plus its variant in both enums; the compiler then
//! lists every `match` in this file that must name it, and nothing outside this folder
//! changes.

pub mod add;
pub mod batch_norm;
pub mod conv2d;
pub mod dropout;
pub mod input;
pub mod leaky_relu;
pub mod linear;
pub mod loss;
pub mod pool;
pub mod relu;
pub mod tensor;

use crossbow_kernels::Backend;
use crossbow_tensor::Shape;
use serde::Serialize;

pub use add::Add;
pub use batch_norm::{BatchNorm, GroupMember, group_batch_norm};
pub use conv2d::Conv2d;
pub use dropout::Dropout;
pub use input::Input;
pub use leaky_relu::LeakyRelu;
pub use linear::Linear;
pub use pool::{AvgPool, GlobalAvgPool, MaxPool};
pub use relu::Relu;

use crate::error::Result;
use crate::exec::ExecCx;
use crate::export::ExportTensor;
use crate::graph::{Graph, Node, NodeId};
use crate::program::{Lowering, TensorId};
use crate::sync::ParamKind;

/// What a node computes, with its hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Layer {
    /// The input batch (node 0 of every graph).
    Input(Input),
    /// 2-d convolution.
    Conv2d(Conv2d),
    /// Batch normalisation over channels.
    BatchNorm(BatchNorm),
    /// `max(x, 0)`.
    Relu(Relu),
    /// `x > 0 ? x : slope·x`.
    LeakyRelu(LeakyRelu),
    /// Max pooling.
    MaxPool(MaxPool),
    /// Average pooling.
    AvgPool(AvgPool),
    /// Average over all spatial positions: `[c, h, w] -> [c, 1, 1]`.
    GlobalAvgPool(GlobalAvgPool),
    /// Fully connected; the input is flattened per sample.
    Linear(Linear),
    /// Inverted dropout (training only).
    Dropout(Dropout),
    /// Element-wise sum of two inputs of the same shape (residual connections).
    Add(Add),
}

/// What every layer provides besides its builder method: the engine's view of a layer.
pub(crate) trait LayerOps {
    /// Forward FLOPs per image (multiply-adds × 2) of `node`; the cheap layers count none.
    fn flops(&self, _graph: &Graph, _node: &Node) -> f64 {
        0.0
    }

    /// Whether the backward pass reads the layer's output, so that a consumer may not
    /// overwrite it in place.
    fn backward_reads_output(&self) -> bool {
        false
    }

    /// Lowers the forward pass of node `n` into `l`; returns the node's output tensor.
    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId;

    /// Lowers the backward pass of node `n`, whose output gradient is `dy`: parameter
    /// gradients first (they read `dy` before any in-place reuse of it), then one
    /// contribution per input ([`Lowering::contribute`]).
    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId);

    /// What the two parts of the layer's parameter region hold.
    fn param_kinds(&self) -> (ParamKind, ParamKind) {
        (ParamKind::Weight, ParamKind::Bias)
    }

    /// The PyTorch shape of the first part of the parameter region (`weight`) and the length
    /// of the second (`bias`, 0 if none); `None` for a layer without parameters.
    fn pytorch_shapes(&self, _graph: &Graph, _node: &Node) -> Option<(Vec<usize>, usize)> {
        None
    }

    /// The layer's `state_dict` entries besides its parameters (batch norm's running
    /// statistics), under `prefix`, from the state buffer `stats`.
    fn pytorch_buffers(
        &self,
        _graph: &Graph,
        _node: &Node,
        _prefix: &str,
        _stats: &[f32],
    ) -> Result<Vec<ExportTensor>> {
        Ok(vec![])
    }
}

impl Layer {
    /// The layer's implementation of the engine's operations.
    pub(crate) fn ops(&self) -> &dyn LayerOps {
        match self {
            Layer::Input(l) => l,
            Layer::Conv2d(l) => l,
            Layer::BatchNorm(l) => l,
            Layer::Relu(l) => l,
            Layer::LeakyRelu(l) => l,
            Layer::MaxPool(l) => l,
            Layer::AvgPool(l) => l,
            Layer::GlobalAvgPool(l) => l,
            Layer::Linear(l) => l,
            Layer::Dropout(l) => l,
            Layer::Add(l) => l,
        }
    }

    /// Whether this is a batch-norm layer.
    pub fn is_batch_norm(&self) -> bool {
        matches!(self, Layer::BatchNorm(_))
    }
}

/// One kernel call of a lowered program, by the layer that emits it.
///
/// Field names follow one convention: `x` is the input activation, `y` the output
/// activation, `dy` the gradient with respect to `y`, `dx` the gradient with respect to `x`
/// (written), `g` the kernel's geometry at the program's batch size, and `p` the layer's
/// region of the flat parameter buffer (and of the gradient buffer, laid out alike).
#[derive(Clone, Debug)]
pub enum Instr {
    /// A convolution kernel.
    Conv2d(conv2d::ConvOp),
    /// A fully connected kernel.
    Linear(linear::LinearOp),
    /// A batch-norm kernel.
    BatchNorm(batch_norm::BnOp),
    /// A ReLU kernel.
    Relu(relu::ReluOp),
    /// A leaky ReLU kernel.
    LeakyRelu(leaky_relu::LeakyReluOp),
    /// A pooling kernel.
    Pool(pool::PoolOp),
    /// Dropout's forward kernel.
    Dropout(dropout::DropoutOp),
    /// An element-wise kernel (sums, products, copies, gradient accumulation).
    Tensor(tensor::TensorOp),
    /// Softmax cross-entropy.
    Loss(loss::LossOp),
}

/// What every instruction provides: the tensors it reads and writes (for the memory plan),
/// how it runs, and the scratch space it needs.
pub(crate) trait Op {
    /// Tensors the instruction reads.
    fn reads(&self) -> Vec<TensorId>;
    /// Tensors the instruction writes.
    fn writes(&self) -> Vec<TensorId>;
    /// Runs the instruction.
    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()>;
    /// Elements of conv workspace the instruction needs on `be`.
    fn workspace_len<B: Backend>(&self, _be: &B) -> usize {
        0
    }
}

/// `match`es an instruction and evaluates `$e` with `$op` bound to its layer's op.
macro_rules! on_op {
    ($ins:expr, $op:ident => $e:expr) => {
        match $ins {
            Instr::Conv2d($op) => $e,
            Instr::Linear($op) => $e,
            Instr::BatchNorm($op) => $e,
            Instr::Relu($op) => $e,
            Instr::LeakyRelu($op) => $e,
            Instr::Pool($op) => $e,
            Instr::Dropout($op) => $e,
            Instr::Tensor($op) => $e,
            Instr::Loss($op) => $e,
        }
    };
}

impl Instr {
    /// Tensors the instruction reads.
    pub fn reads(&self) -> Vec<TensorId> {
        on_op!(self, op => op.reads())
    }

    /// Tensors the instruction writes.
    pub fn writes(&self) -> Vec<TensorId> {
        on_op!(self, op => op.writes())
    }

    /// Runs the instruction on the executor's buffers.
    pub(crate) fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        on_op!(self, op => op.exec(cx))
    }

    /// Elements of conv workspace the instruction needs on `be`.
    pub fn workspace_len<B: Backend>(&self, be: &B) -> usize {
        on_op!(self, op => op.workspace_len(be))
    }

    /// Whether this is a training-mode batch-norm instruction (forward with batch statistics
    /// or backward): where learners that normalise together meet.
    pub fn is_batch_norm_train(&self) -> bool {
        matches!(self, Instr::BatchNorm(batch_norm::BnOp::Train { .. } | batch_norm::BnOp::Bwd { .. }))
    }
}

/// `(c, h, w)` of a per-sample shape; a vector `[f]` is `(f, 1, 1)`.
pub(crate) fn chw(s: &Shape) -> (usize, usize, usize) {
    match s.dims() {
        [c, h, w] => (*c, *h, *w),
        [f] => (*f, 1, 1),
        d => (d.iter().product(), 1, 1),
    }
}

/// `From` conversions into an enum's variants, so that builders and lowerings write
/// `Conv2d { .. }.into()` and `l.push(ConvOp::Fwd { .. })`.
macro_rules! variants {
    ($enum:ident: $($v:ident($t:ty)),* $(,)?) => {
        $(impl From<$t> for $enum {
            fn from(x: $t) -> Self {
                $enum::$v(x)
            }
        })*
    };
}

variants!(Layer: Input(Input), Conv2d(Conv2d), BatchNorm(BatchNorm), Relu(Relu), LeakyRelu(LeakyRelu),
    MaxPool(MaxPool), AvgPool(AvgPool), GlobalAvgPool(GlobalAvgPool), Linear(Linear), Dropout(Dropout), Add(Add));
variants!(Instr: Conv2d(conv2d::ConvOp), Linear(linear::LinearOp), BatchNorm(batch_norm::BnOp), Relu(relu::ReluOp),
    LeakyRelu(leaky_relu::LeakyReluOp), Pool(pool::PoolOp), Dropout(dropout::DropoutOp), Tensor(tensor::TensorOp),
    Loss(loss::LossOp));
