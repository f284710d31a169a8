//! Lowering a [`Graph`] at a batch size into a straight-line program of kernel calls over
//! numbered tensors: the training program (forward with batch statistics, fused loss and
//! gradient, backward) and the evaluation program (forward with running statistics, loss and
//! accuracy). The memory plan ([`crate::plan`]) then maps tensors to reusable buffers.

use crossbow_kernels::softmax_xent::SoftmaxXentGeom;

use crate::error::{ReplicaError, Result};
use crate::graph::{Graph, Node, NodeId};
use crate::layers::batch_norm;
use crate::layers::loss::LossOp;
use crate::layers::tensor::TensorOp;

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

pub use crate::layers::Instr;

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

/// A program being lowered: the context every layer's lowering writes into.
pub(crate) struct Lowering<'g> {
    /// The graph.
    pub(crate) g: &'g Graph,
    /// Samples per batch.
    pub(crate) batch: usize,
    /// What the program is for.
    pub(crate) mode: Mode,
    /// The nodes that read each node's output.
    pub(crate) consumers: Vec<Vec<NodeId>>,
    tensors: Vec<TensorInfo>,
    instrs: Vec<Instr>,
    act: Vec<Option<TensorId>>,
    grad: Vec<Option<TensorId>>,
}

/// Whether [`lower`] fuses batch norm with the ReLU and residual sum after it
/// (`crate::layers::batch_norm::Chain`): on unless `CROSSBOW_FUSION=0`. The fused and the plain
/// programs compute the same bits; the switch is for measuring what fusion is worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    /// Batch norm, residual sum and ReLU in one kernel where the graph allows.
    On,
    /// One kernel per node.
    Off,
}

impl Fusion {
    /// The default: `CROSSBOW_FUSION` (`1`/`on` or `0`/`off`; unset is on). A bad value is an
    /// error naming the variable.
    pub fn from_env() -> Result<Fusion> {
        match std::env::var("CROSSBOW_FUSION") {
            Err(std::env::VarError::NotPresent) => Ok(Fusion::On),
            Ok(v) => Fusion::parse(&v),
            Err(e) => Err(ReplicaError::Config(format!("CROSSBOW_FUSION: {e}"))),
        }
    }

    /// A value of `CROSSBOW_FUSION`.
    pub fn parse(v: &str) -> Result<Fusion> {
        if v == "1" || v.eq_ignore_ascii_case("on") {
            Ok(Fusion::On)
        } else if v == "0" || v.eq_ignore_ascii_case("off") {
            Ok(Fusion::Off)
        } else {
            Err(ReplicaError::Config(format!("CROSSBOW_FUSION={v:?}: expected 1/on or 0/off")))
        }
    }
}

impl<'g> Lowering<'g> {
    /// A new tensor of `len` elements.
    pub(crate) fn new_tensor(&mut self, kind: TensorKind, len: usize) -> TensorId {
        let id = self.tensors.len();
        self.tensors.push(TensorInfo { kind, len, storage: id });
        id
    }

    /// A new tensor sharing `of`'s storage (an in-place output).
    pub(crate) fn alias(&mut self, kind: TensorKind, of: TensorId) -> TensorId {
        let id = self.tensors.len();
        let storage = self.tensors[of].storage;
        let len = self.tensors[of].len;
        self.tensors.push(TensorInfo { kind, len, storage });
        id
    }

    /// A new tensor for node `n`'s output.
    pub(crate) fn activation(&mut self, n: NodeId) -> TensorId {
        let len = self.len(n);
        self.new_tensor(TensorKind::Activation(n), len)
    }

    /// Elements of node `n`'s output for the whole batch.
    pub(crate) fn len(&self, n: NodeId) -> usize {
        self.batch * self.g.per_sample(n)
    }

    /// Node `n`.
    pub(crate) fn node(&self, n: NodeId) -> &'g Node {
        &self.g.nodes[n]
    }

    /// Node `n`'s region of the parameter buffer (empty for layers without parameters).
    pub(crate) fn params(&self, n: NodeId) -> ParamRange {
        self.g.nodes[n].params.as_ref().map(|r| r.range()).unwrap_or_default()
    }

    /// The output tensor of node `n`, lowered before `n`'s consumers.
    pub(crate) fn act(&self, n: NodeId) -> TensorId {
        self.act[n].unwrap_or_else(|| unreachable!("activation of node {n} used before it is defined"))
    }

    /// The output tensor of node `n`'s `i`-th input.
    pub(crate) fn input(&self, n: NodeId, i: usize) -> TensorId {
        self.act(self.g.nodes[n].inputs[i])
    }

    /// Appends an instruction.
    pub(crate) fn push(&mut self, ins: impl Into<Instr>) {
        self.instrs.push(ins.into());
    }

    /// Appends instructions.
    pub(crate) fn push_all(&mut self, ins: impl IntoIterator<Item = Instr>) {
        self.instrs.extend(ins);
    }

    /// The first tensor of kind `kind` (a dropout mask, for its backward pass).
    pub(crate) fn find(&self, kind: &TensorKind) -> Option<TensorId> {
        self.tensors.iter().position(|t| t.kind == *kind)
    }

    /// Whether the next gradient contribution to node `src` is its first.
    pub(crate) fn first_grad(&self, src: NodeId) -> bool {
        self.grad[src].is_none()
    }

    /// Makes `dy` (read by nobody else) node `src`'s gradient tensor, for an in-place
    /// backward kernel that turns it into the input's gradient. Only for a first contribution.
    pub(crate) fn grad_in_place(&mut self, src: NodeId, dy: TensorId) -> TensorId {
        let dx = self.alias(TensorKind::Gradient(src), dy);
        self.grad[src] = Some(dx);
        dx
    }

    /// Adds a gradient contribution to node `src`'s output, computed by the instruction
    /// `emit(dx)` writes: the first contribution goes straight into `src`'s gradient tensor,
    /// a later one into a partial tensor that is then accumulated. Nothing for the input
    /// batch (node 0), which needs no gradient.
    pub(crate) fn contribute(&mut self, src: NodeId, emit: impl FnOnce(TensorId) -> Instr) {
        if let Some((dx, acc)) = self.contribution(src) {
            self.instrs.push(emit(dx));
            self.instrs.extend(acc);
        }
    }

    /// Where a gradient contribution to node `src` is written, and the accumulation to push
    /// after the instruction that writes it, as [`Lowering::contribute`] does (for an
    /// instruction that writes several contributions); `None` for the input batch.
    pub(crate) fn contribution(&mut self, src: NodeId) -> Option<(TensorId, Option<Instr>)> {
        if src == 0 {
            return None;
        }
        let len = self.len(src);
        Some(match self.grad[src] {
            None => {
                let dx = self.new_tensor(TensorKind::Gradient(src), len);
                self.grad[src] = Some(dx);
                (dx, None)
            }
            Some(dst) => {
                let t = self.new_tensor(TensorKind::Partial(src), len);
                (t, Some(TensorOp::Accumulate { src: t, dst }.into()))
            }
        })
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

/// Lowers `graph` at `batch` in `mode`, fused as [`Fusion::from_env`] says.
pub fn lower(graph: &Graph, batch: usize, mode: Mode) -> Result<Program> {
    lower_with(graph, batch, mode, Fusion::from_env()?)
}

/// Lowers `graph` at `batch` in `mode`, with or without fused batch-norm chains.
pub fn lower_with(graph: &Graph, batch: usize, mode: Mode, fusion: Fusion) -> Result<Program> {
    if batch == 0 {
        return Err(ReplicaError::Config("batch size must be at least 1".into()));
    }
    let n_nodes = graph.nodes.len();
    let consumers: Vec<Vec<NodeId>> = (0..n_nodes).map(|n| graph.consumers(n)).collect();
    check_size(graph, batch, &consumers)?;
    let mut l = Lowering {
        g: graph,
        batch,
        mode,
        consumers,
        tensors: vec![],
        instrs: vec![],
        act: vec![None; n_nodes],
        grad: vec![None; n_nodes],
    };
    let input = l.new_tensor(TensorKind::Input, l.len(0));
    l.act[0] = Some(input);
    // Fused chains: lowered at their ReLU node; their batch-norm and sum nodes lower nothing.
    let chains = match fusion {
        Fusion::On => batch_norm::chains(graph, &l.consumers),
        Fusion::Off => vec![None; n_nodes],
    };
    let mut absorbed = vec![false; n_nodes];
    for ch in chains.iter().flatten() {
        absorbed[ch.bn] = true;
        if let Some(a) = ch.add {
            absorbed[a] = true;
        }
    }
    // The forward pass: each layer lowers itself, in topological order.
    for (n, node) in graph.nodes.iter().enumerate().skip(1) {
        if absorbed[n] {
            continue;
        }
        let y = match chains[n] {
            Some(ch) => batch_norm::lower_chain_forward(&mut l, ch),
            None => node.layer.ops().lower_forward(&mut l, n),
        };
        l.act[n] = Some(y);
    }

    let out = graph.output;
    let g = SoftmaxXentGeom::mean(batch, graph.classes);
    let logits = l.act(out);
    if mode != Mode::Train {
        l.push(LossOp { g, logits, dlogits: None });
        return Ok(Program { mode, batch, tensors: l.tensors, instrs: l.instrs, input, classes: graph.classes });
    }
    let dlogits = l.new_tensor(TensorKind::Gradient(out), l.len(out));
    l.push(LossOp { g, logits, dlogits: Some(dlogits) });
    l.grad[out] = Some(dlogits);

    // The backward pass, from the loss gradient at the output back to the first layer.
    for n in (1..n_nodes).rev() {
        let Some(dy) = l.grad[n] else { continue };
        match chains[n] {
            Some(ch) => batch_norm::lower_chain_backward(&mut l, ch, dy),
            None => graph.nodes[n].layer.ops().lower_backward(&mut l, n, dy),
        }
    }
    Ok(Program { mode, batch, tensors: l.tensors, instrs: l.instrs, input, classes: graph.classes })
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
