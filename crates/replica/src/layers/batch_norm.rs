//! Batch normalisation over channels: training with batch statistics (saved for the
//! backward pass, blended into running statistics with `momentum`), evaluation with the
//! running statistics, recalibration (momentum 1), and learners that normalise together
//! ([`group_batch_norm`]). Parameters `[gamma(C), beta(C)]`; running statistics
//! `[mean(C), var(C)]` (unbiased variance, PyTorch's convention) in the replica's state buffer.
//!
//! A batch norm whose output only a ReLU reads, or only a residual sum that only a ReLU reads,
//! is lowered together with them ([`Chain`]): one fused kernel computes
//! `relu(bn(x) + residual?)`, and one computes the gradients of all three.

use std::sync::Arc;

use crossbow_kernels::batch_norm::{BatchNormGeom, Epilogue};
use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_tensor::Init;
use serde::Serialize;

use super::{Instr, LayerOps, Op, chw};
use crate::error::{ReplicaError, Result};
use crate::exec::{ExecCx, Executor};
use crate::export::ExportTensor;
use crate::graph::{Graph, GraphBuilder, Node, NodeId};
use crate::program::{Lowering, Mode, ParamRange, TensorId};
use crate::sync::ParamKind;

/// Batch normalisation's constants.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchNorm {
    /// Added to the variance before the square root, > 0 (PyTorch default 1e-5).
    pub eps: f32,
    /// Running-statistics update rate, in `[0, 1]`: `r = (1 - momentum) r + momentum * batch`.
    pub momentum: f32,
}

impl BatchNorm {
    /// The kernels' geometry of `node` (this layer) at batch `batch`.
    pub fn geom(&self, node: &Node, batch: usize) -> BatchNormGeom {
        let (c, h, w) = chw(&node.shape);
        BatchNormGeom { batch, channels: c, spatial: h * w, eps: self.eps, momentum: self.momentum }
    }
}

impl GraphBuilder {
    /// Batch normalisation of `x` (PyTorch defaults `eps = 1e-5`, `momentum = 0.1`).
    pub fn batch_norm(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        self.batch_norm_with(name, x, 1e-5, 0.1)
    }

    /// Batch normalisation of `x` with explicit constants.
    pub fn batch_norm_with(&mut self, name: &str, x: NodeId, eps: f32, momentum: f32) -> Result<NodeId> {
        self.check(x)?;
        let shape = self.shape(x).clone();
        let c = shape.dims()[0];
        let region = self.region(c, c, Init::Constant { value: 1.0 }, Init::Constant { value: 0.0 }, (1, 1));
        let stats = self.stats_region(2 * c);
        Ok(self.push(name.into(), BatchNorm { eps, momentum }.into(), vec![x], shape, Some(region), Some(stats)))
    }
}

/// Batch norm's kernel calls.
#[derive(Clone, Debug)]
pub enum BnOp {
    /// Forward with batch statistics: saves `[mean, inv_std]` for the backward pass and
    /// updates the running statistics.
    Train {
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
        /// Fused: a residual added to the normalised values.
        res: Option<TensorId>,
        /// Fused: the (sum) rectified.
        relu: bool,
    },
    /// Forward with the running statistics (evaluation).
    Infer {
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
        /// Fused: a residual added to the normalised values.
        res: Option<TensorId>,
        /// Fused: the (sum) rectified.
        relu: bool,
    },
    /// Backward: `dx`, and `[dgamma, dbeta]` at `p` in the gradient buffer.
    Bwd {
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
        /// Fused ReLU: the fused forward output, whose sign masks `dy` (`dy` is then
        /// overwritten, see `batch_norm_backward_fused`).
        mask: Option<TensorId>,
        /// Fused residual: where its gradient (the masked `dy`) goes.
        dres: Option<TensorId>,
    },
}

impl BnOp {
    /// Whether this is a fused backward call (it may overwrite `dy`).
    fn fused_backward(&self) -> bool {
        matches!(self, BnOp::Bwd { mask, dres, .. } if mask.is_some() || dres.is_some())
    }
}

impl Op for BnOp {
    fn reads(&self) -> Vec<TensorId> {
        match self {
            BnOp::Train { x, res, .. } | BnOp::Infer { x, res, .. } => std::iter::once(*x).chain(*res).collect(),
            BnOp::Bwd { x, dy, mask, .. } => [*x, *dy].into_iter().chain(*mask).collect(),
        }
    }

    fn writes(&self) -> Vec<TensorId> {
        match self {
            BnOp::Train { y, .. } | BnOp::Infer { y, .. } => vec![*y],
            BnOp::Bwd { dx, dres, dy, .. } => {
                let dy = self.fused_backward().then_some(*dy);
                std::iter::once(*dx).chain(*dres).chain(dy).collect()
            }
        }
    }

    fn exec<B: Backend>(&self, cx: &mut ExecCx<'_, B>) -> Result<()> {
        let be = cx.be;
        match self {
            BnOp::Train { g, x, y, p, stats, res, relu } => {
                let r = *stats..stats + g.stats_len();
                let (saved, running) = (cx.saved_mut(r.clone())?, cx.state_mut(r)?);
                let ep = Epilogue { residual: res.map(|t| cx.read(t)).transpose()?, relu: *relu };
                be.batch_norm_forward_train_fused(g, cx.read(*x)?, ep, cx.params(p)?, cx.write(*y)?, saved, running)?
            }
            BnOp::Infer { g, x, y, p, stats, res, relu } => {
                let running = cx.state(*stats..stats + g.stats_len())?;
                let ep = Epilogue { residual: res.map(|t| cx.read(t)).transpose()?, relu: *relu };
                be.batch_norm_forward_infer_fused(g, cx.read(*x)?, ep, cx.params(p)?, running, cx.write(*y)?)?
            }
            BnOp::Bwd { g, x, dy, dx, p, stats, mask, dres } => {
                let saved = cx.saved(*stats..stats + g.stats_len())?;
                let (xv, gamma) = (cx.read(*x)?, cx.params(p)?);
                if self.fused_backward() {
                    let mask = mask.map(|t| cx.read(t)).transpose()?;
                    let dres = dres.map(|t| cx.write(t)).transpose()?;
                    let (dyv, dxv) = (cx.write(*dy)?, cx.write(*dx)?);
                    be.batch_norm_backward_fused(g, xv, mask, dyv, gamma, saved, dxv, dres, cx.grads(p)?)?
                } else {
                    be.batch_norm_backward(g, xv, cx.read(*dy)?, gamma, saved, cx.write(*dx)?, cx.grads(p)?)?
                }
            }
        }
        Ok(())
    }
}

impl LayerOps for BatchNorm {
    /// Batch statistics in training and recalibration (momentum 1 there, so the running
    /// statistics become the batch's), the running statistics in evaluation.
    fn lower_forward(&self, l: &mut Lowering<'_>, n: NodeId) -> TensorId {
        let (x, y) = (l.input(n, 0), l.activation(n));
        let node = l.node(n);
        let mut g = self.geom(node, l.batch);
        if l.mode == Mode::Calibrate {
            g.momentum = 1.0;
        }
        let (p, stats) = (l.params(n), node.stats.unwrap_or_default());
        l.push(if l.mode == Mode::Eval {
            BnOp::Infer { g, x, y, p, stats, res: None, relu: false }
        } else {
            BnOp::Train { g, x, y, p, stats, res: None, relu: false }
        });
        y
    }

    fn lower_backward(&self, l: &mut Lowering<'_>, n: NodeId, dy: TensorId) {
        let node = l.node(n);
        let (g, x, p, stats) = (self.geom(node, l.batch), l.input(n, 0), l.params(n), node.stats.unwrap_or_default());
        l.contribute(node.inputs[0], |dx| {
            Instr::BatchNorm(BnOp::Bwd { g, x, dy, dx, p, stats, mask: None, dres: None })
        });
    }

    fn param_kinds(&self) -> (ParamKind, ParamKind) {
        (ParamKind::BnScale, ParamKind::BnShift)
    }

    fn pytorch_shapes(&self, _graph: &Graph, node: &Node) -> Option<(Vec<usize>, usize)> {
        let c = chw(&node.shape).0;
        Some((vec![c], c))
    }

    /// `running_mean`, `running_var`, and `num_batches_tracked` (an `int64` scalar written
    /// as 0: crossbow does not count batches, and PyTorch only reads it when
    /// `momentum=None`).
    fn pytorch_buffers(&self, graph: &Graph, node: &Node, prefix: &str, stats: &[f32]) -> Result<Vec<ExportTensor>> {
        let c = chw(&node.shape).0;
        let Some(s) = node.stats.filter(|&s| s + 2 * c <= stats.len()) else {
            return Err(ReplicaError::Model(format!(
                "{}: batch-norm node '{}' has no running statistics in the state buffer",
                graph.name, node.name
            )));
        };
        Ok(vec![
            ExportTensor::f32(format!("{prefix}.running_mean"), vec![c], &stats[s..s + c]),
            ExportTensor::f32(format!("{prefix}.running_var"), vec![c], &stats[s + c..s + 2 * c]),
            ExportTensor::i64(format!("{prefix}.num_batches_tracked"), vec![], &[0]),
        ])
    }
}

/// A batch norm lowered together with the nodes after it: `relu(bn(x) + residual?)`, one
/// fused instruction each way. Found by [`chains`]; the batch-norm and sum nodes then lower
/// nothing of their own, and the ReLU node lowers the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chain {
    /// The batch-norm node.
    pub(crate) bn: NodeId,
    /// The residual sum's node, if any.
    pub(crate) add: Option<NodeId>,
    /// The sum's other input (the residual), if any.
    pub(crate) residual: Option<NodeId>,
    /// The ReLU node: the chain's output.
    pub(crate) relu: NodeId,
}

/// Every fusable chain of `graph`, by its ReLU node: a batch norm (not of the input batch, not
/// the output) whose only consumer is a ReLU, or a residual sum with another node whose only
/// consumer is a ReLU. Where two batch norms meet in one sum (a projection shortcut), the
/// first absorbs the sum and the other is the residual.
pub(crate) fn chains(graph: &Graph, consumers: &[Vec<NodeId>]) -> Vec<Option<Chain>> {
    let mut out: Vec<Option<Chain>> = vec![None; graph.nodes.len()];
    let only = |n: NodeId| match consumers[n].as_slice() {
        [c] if n != graph.output => Some(*c),
        _ => None,
    };
    let is_relu = |n: NodeId| matches!(graph.nodes[n].layer, super::Layer::Relu(_));
    for (bn, node) in graph.nodes.iter().enumerate() {
        if !node.layer.is_batch_norm() || node.inputs.first().is_none_or(|&x| x == 0) {
            continue;
        }
        let Some(c) = only(bn) else { continue };
        let chain = if is_relu(c) {
            Chain { bn, add: None, residual: None, relu: c }
        } else if matches!(graph.nodes[c].layer, super::Layer::Add(_)) {
            let ins = &graph.nodes[c].inputs;
            let residual = if ins[0] == bn { ins[1] } else { ins[0] };
            match only(c) {
                Some(r) if residual != bn && is_relu(r) => {
                    Chain { bn, add: Some(c), residual: Some(residual), relu: r }
                }
                _ => continue,
            }
        } else {
            continue;
        };
        if out[chain.relu].is_none() {
            out[chain.relu] = Some(chain);
        }
    }
    out
}

/// The forward pass of `ch`: `y = relu(bn(x) + residual?)` into the ReLU node's activation.
pub(crate) fn lower_chain_forward(l: &mut Lowering<'_>, ch: Chain) -> TensorId {
    let super::Layer::BatchNorm(bn) = &l.node(ch.bn).layer else {
        unreachable!("chain {ch:?} starts at a batch-norm node")
    };
    let (x, y, res) = (l.input(ch.bn, 0), l.activation(ch.relu), ch.residual.map(|r| l.act(r)));
    let node = l.node(ch.bn);
    let mut g = bn.geom(node, l.batch);
    if l.mode == Mode::Calibrate {
        g.momentum = 1.0;
    }
    let (p, stats) = (l.params(ch.bn), node.stats.unwrap_or_default());
    l.push(if l.mode == Mode::Eval {
        BnOp::Infer { g, x, y, p, stats, res, relu: true }
    } else {
        BnOp::Train { g, x, y, p, stats, res, relu: true }
    });
    y
}

/// The backward pass of `ch` from the ReLU's output gradient `dy`: one fused instruction
/// writes the gradients of batch norm's input and of the residual.
pub(crate) fn lower_chain_backward(l: &mut Lowering<'_>, ch: Chain, dy: TensorId) {
    let super::Layer::BatchNorm(bn) = &l.node(ch.bn).layer else {
        unreachable!("chain {ch:?} starts at a batch-norm node")
    };
    let node = l.node(ch.bn);
    let (g, x, p, stats) = (bn.geom(node, l.batch), l.input(ch.bn, 0), l.params(ch.bn), node.stats.unwrap_or_default());
    let mask = Some(l.act(ch.relu));
    let Some((dx, acc_x)) = l.contribution(node.inputs[0]) else {
        unreachable!("chain {ch:?} normalises a node, not the input batch")
    };
    let (dres, acc_r) = match ch.residual.and_then(|r| l.contribution(r)) {
        Some((d, acc)) => (Some(d), acc),
        None => (None, None),
    };
    l.push(BnOp::Bwd { g, x, dy, dx, p, stats, mask, dres });
    l.push_all(acc_x.into_iter().chain(acc_r));
}

/// One learner's part in [`group_batch_norm`]: its backend, executor (paused at the same
/// batch-norm instruction as the others'), parameters, gradients and running statistics.
pub struct GroupMember<'a, B: Backend> {
    /// The learner's backend.
    pub be: &'a B,
    /// Its executor, paused by [`Executor::run_until_batch_norm`](crate::exec::Executor::run_until_batch_norm).
    pub exec: &'a mut Executor<B>,
    /// Its parameters.
    pub params: &'a B::Buffer,
    /// Its gradients.
    pub grads: &'a mut B::Buffer,
    /// Its batch-norm running statistics.
    pub state: &'a mut B::Buffer,
}

/// Runs batch-norm instruction `at` of every member's training program with statistics over
/// all their batches together (the learners of a device normalising as one batch of `k·b`,
/// like synchronised batch norm; each keeps its own `γ`, `β` and running statistics):
///
/// * forward: every member's channel mean and variance (its own batch), combined in f64
///   into the group's (Chan et al.'s parallel formula); each member normalises with the
///   group's, saves them for the backward pass, and moves its running statistics towards
///   them (unbiased variance over the group, PyTorch's convention);
/// * backward: the exact gradient of the sum of the members' losses through the shared
///   statistics: `dx = γ·inv·(dy − ΣΣdy/N − x̂·ΣΣdy·x̂/N)` with the sums over the whole group,
///   and each member's `dγ = Σ dy·x̂`, `dβ = Σ dy` over its own samples.
///
/// Built from the backends' batch-norm kernels and per-channel host arithmetic (the
/// statistics travel through the host: a few hundred floats per layer), so it runs on every
/// backend. One member is plain batch norm: the caller then runs the program as usual.
pub fn group_batch_norm<B: Backend>(members: &mut [GroupMember<'_, B>], at: usize) -> Result<()> {
    let Some(first) = members.first() else { return Ok(()) };
    let ins = first
        .exec
        .program
        .instrs
        .get(at)
        .cloned()
        .ok_or_else(|| ReplicaError::Config(format!("grouped batch norm: no instruction {at}")))?;
    for m in members.iter() {
        if !Arc::ptr_eq(&m.exec.program, &first.exec.program)
            && m.exec.program.instrs.len() != first.exec.program.instrs.len()
        {
            return Err(ReplicaError::Config("grouped batch norm: the learners run different programs".into()));
        }
    }
    match ins {
        Instr::BatchNorm(BnOp::Train { g, x, y, p, stats, res, relu }) => {
            group_forward(members, &g, x, y, &p, stats, (res, relu))
        }
        Instr::BatchNorm(BnOp::Bwd { g, x, dy, dx, p, stats, mask, dres }) => {
            group_epilogue_backward(members, dy, mask, dres)?;
            group_backward(members, &g, x, dy, dx, &p, stats)
        }
        other => Err(ReplicaError::Config(format!("grouped batch norm: instruction {at} is {other:?}"))),
    }
}

/// A fused chain's backward epilogue, before grouped batch norm's backward pass: each member's
/// `dy` masked in place by its ReLU's output, and copied to the residual's gradient.
fn group_epilogue_backward<B: Backend>(
    members: &mut [GroupMember<'_, B>],
    dy: TensorId,
    mask: Option<TensorId>,
    dres: Option<TensorId>,
) -> Result<()> {
    for m in members.iter_mut() {
        let ex = &mut *m.exec;
        let sdy = ex.plan.slot_of[dy];
        let dylen = ex.program.tensors[dy].len;
        if let Some(y) = mask {
            let (sy, ylen) = (ex.plan.slot_of[y], ex.program.tensors[y].len);
            let [by, bdy] = ex
                .slots
                .get_disjoint_mut([sy, sdy])
                .map_err(|_| ReplicaError::Model("grouped batch norm: mask and gradient share a slot".into()))?;
            m.be.relu_backward_inplace(View::new(&*by, 0..ylen)?, ViewMut::new(bdy, 0..dylen)?)?;
        }
        if let Some(r) = dres {
            let (sr, rlen) = (ex.plan.slot_of[r], ex.program.tensors[r].len);
            let [bdy, br] = ex
                .slots
                .get_disjoint_mut([sdy, sr])
                .map_err(|_| ReplicaError::Model("grouped batch norm: gradients share a slot".into()))?;
            m.be.copy(View::new(&*bdy, 0..dylen)?, ViewMut::new(br, 0..rlen)?)?;
        }
    }
    Ok(())
}

fn group_forward<B: Backend>(
    members: &mut [GroupMember<'_, B>],
    g: &BatchNormGeom,
    x: TensorId,
    y: TensorId,
    p: &std::ops::Range<usize>,
    stats: usize,
    (res, relu): (Option<TensorId>, bool),
) -> Result<()> {
    let c = g.channels;
    let region = stats..stats + g.stats_len();
    // Each member's own batch statistics: a training-mode pass with momentum 1 into a scratch
    // "running" buffer gives [mean(C), unbiased var(C)] (its output is overwritten below).
    let own = BatchNormGeom { momentum: 1.0, ..*g };
    let n_own = g.count() as f64;
    let mut parts: Vec<(Vec<f64>, Vec<f64>)> = Vec::with_capacity(members.len());
    for m in members.iter_mut() {
        let mut host = vec![0.0f32; 2 * c];
        {
            let ex = &mut *m.exec;
            let (sy, sx) = (ex.plan.slot_of[y], ex.plan.slot_of[x]);
            let (ylen, xlen) = (ex.program.tensors[y].len, ex.program.tensors[x].len);
            ex.scratch_buffers(m.be, 0, 4 * c)?;
            let scratch = ex.scratch_small.as_mut().ok_or_else(|| ReplicaError::Config("scratch".into()))?;
            let [bx, by] = ex
                .slots
                .get_disjoint_mut([sx, sy])
                .map_err(|_| ReplicaError::Model("grouped batch norm: input and output share a slot".into()))?;
            m.be.batch_norm_forward_train(
                &own,
                View::new(&*bx, 0..xlen)?,
                View::new(m.params, p.clone())?,
                ViewMut::new(by, 0..ylen)?,
                ViewMut::new(&mut ex.saved, region.clone())?,
                ViewMut::new(scratch, 0..2 * c)?,
            )?;
            m.be.download(View::new(&*scratch, 0..2 * c)?, &mut host)?;
        }
        let mean: Vec<f64> = host[..c].iter().map(|&v| v as f64).collect();
        // Back from the unbiased variance to the sum of squared deviations.
        let m2: Vec<f64> = host[c..].iter().map(|&v| v as f64 * (n_own - 1.0).max(0.0)).collect();
        parts.push((mean, m2));
    }
    // Combine (Chan et al.): N = k·n, mean = Σ n·mean_j / N, M2 = Σ M2_j + Σ n (mean_j − mean)².
    let n_all = n_own * parts.len() as f64;
    let mut mean = vec![0.0f64; c];
    for (mj, _) in &parts {
        for (a, &v) in mean.iter_mut().zip(mj) {
            *a += v * n_own / n_all;
        }
    }
    let mut m2 = vec![0.0f64; c];
    for (mj, m2j) in &parts {
        for ch in 0..c {
            m2[ch] += m2j[ch] + n_own * (mj[ch] - mean[ch]).powi(2);
        }
    }
    let var: Vec<f64> = m2.iter().map(|v| v / n_all).collect();
    let unbias = if n_all > 1.0 { n_all / (n_all - 1.0) } else { 1.0 };
    let group_running: Vec<f32> = mean.iter().chain(var.iter()).map(|&v| v as f32).collect();
    let saved: Vec<f32> =
        mean.iter().map(|&v| v as f32).chain(var.iter().map(|&v| (1.0 / (v + g.eps as f64).sqrt()) as f32)).collect();
    let mom = g.momentum as f64;
    for m in members.iter_mut() {
        let ex = &mut *m.exec;
        let (sy, sx) = (ex.plan.slot_of[y], ex.plan.slot_of[x]);
        let (ylen, xlen) = (ex.program.tensors[y].len, ex.program.tensors[x].len);
        let scratch = ex.scratch_small.as_mut().ok_or_else(|| ReplicaError::Config("scratch".into()))?;
        m.be.upload(&group_running, ViewMut::new(scratch, 0..2 * c)?)?;
        // y = γ (x − mean) / sqrt(var + eps) + β with the group's statistics, then the
        // chain's epilogue (the residual lives in a third slot).
        let shared = || ReplicaError::Model("grouped batch norm: input, residual and output share a slot".into());
        let (bx, by, residual) = match res.map(|r| (ex.plan.slot_of[r], ex.program.tensors[r].len)) {
            Some((sr, rlen)) => {
                let [bx, by, br] = ex.slots.get_disjoint_mut([sx, sy, sr]).map_err(|_| shared())?;
                (bx, by, Some(View::new(&*br, 0..rlen)?))
            }
            None => {
                let [bx, by] = ex.slots.get_disjoint_mut([sx, sy]).map_err(|_| shared())?;
                (bx, by, None)
            }
        };
        m.be.batch_norm_forward_infer_fused(
            g,
            View::new(&*bx, 0..xlen)?,
            Epilogue { residual, relu },
            View::new(m.params, p.clone())?,
            View::new(&*scratch, 0..2 * c)?,
            ViewMut::new(by, 0..ylen)?,
        )?;
        m.be.upload(&saved, ViewMut::new(&mut ex.saved, region.clone())?)?;
        let mut running = vec![0.0f32; 2 * c];
        m.be.download(View::new(&*m.state, region.clone())?, &mut running)?;
        for ch in 0..c {
            running[ch] = ((1.0 - mom) * running[ch] as f64 + mom * mean[ch]) as f32;
            running[c + ch] = ((1.0 - mom) * running[c + ch] as f64 + mom * var[ch] * unbias) as f32;
        }
        m.be.upload(&running, ViewMut::new(m.state, region.clone())?)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn group_backward<B: Backend>(
    members: &mut [GroupMember<'_, B>],
    g: &BatchNormGeom,
    x: TensorId,
    dy: TensorId,
    dx: TensorId,
    p: &std::ops::Range<usize>,
    stats: usize,
) -> Result<()> {
    let c = g.channels;
    let region = stats..stats + g.stats_len();
    // Each member's backward with the group's saved statistics: its dγ = Σ dy·x̂ and
    // dβ = Σ dy over its own samples are right as they are; its dx is corrected below.
    let mut sums: Vec<Vec<f32>> = Vec::with_capacity(members.len());
    for m in members.iter_mut() {
        let ex = &mut *m.exec;
        let (sx, sdy, sdx) = (ex.plan.slot_of[x], ex.plan.slot_of[dy], ex.plan.slot_of[dx]);
        let (xlen, dylen, dxlen) = (ex.program.tensors[x].len, ex.program.tensors[dy].len, ex.program.tensors[dx].len);
        let [bx, bdy, bdx] = ex
            .slots
            .get_disjoint_mut([sx, sdy, sdx])
            .map_err(|_| ReplicaError::Model("grouped batch norm: backward tensors share a slot".into()))?;
        m.be.batch_norm_backward(
            g,
            View::new(&*bx, 0..xlen)?,
            View::new(&*bdy, 0..dylen)?,
            View::new(m.params, p.clone())?,
            View::new(&ex.saved, region.clone())?,
            ViewMut::new(bdx, 0..dxlen)?,
            ViewMut::new(m.grads, p.clone())?,
        )?;
        let mut d = vec![0.0f32; 2 * c];
        m.be.download(View::new(&*m.grads, p.clone())?, &mut d)?;
        sums.push(d);
    }
    let k = members.len() as f64;
    let n = g.count() as f64;
    let mut total = vec![0.0f64; 2 * c];
    for d in &sums {
        for (t, &v) in total.iter_mut().zip(d) {
            *t += v as f64;
        }
    }
    // dx_group − dx_own = γ·inv·[(Σdy_own/n − ΣΣdy/(k n)) + x̂ (Σdyx̂_own/n − ΣΣdyx̂/(k n))]
    //                   = B·x + A per channel, x̂ = (x − mean)·inv.
    // dparams holds [dγ(C), dβ(C)] = [Σ dy·x̂, Σ dy].
    let mut saved = vec![0.0f32; 2 * c];
    members[0].be.download(View::new(&members[0].exec.saved, region.clone())?, &mut saved)?;
    for (m, d) in members.iter_mut().zip(&sums) {
        let mut gamma = vec![0.0f32; c];
        m.be.download(View::new(m.params, p.start..p.start + c)?, &mut gamma)?;
        // An affine map per channel, t = B·x + A, through the inference kernel: with running
        // mean 0 and variance 1 it computes x·γ'·r + β' with r = 1/sqrt(1 + eps).
        let r = 1.0 / (1.0 + g.eps as f64).sqrt();
        let mut aff = vec![0.0f32; 2 * c];
        for ch in 0..c {
            let (mean, inv, gm) = (saved[ch] as f64, saved[c + ch] as f64, gamma[ch] as f64);
            let ddy = d[c + ch] as f64 / n - total[c + ch] / (k * n);
            let ddyx = d[ch] as f64 / n - total[ch] / (k * n);
            let b = gm * inv * inv * ddyx;
            let a = gm * inv * ddy - b * mean;
            aff[ch] = (b / r) as f32;
            aff[c + ch] = a as f32;
        }
        let ex = &mut *m.exec;
        let (xlen, dxlen) = (ex.program.tensors[x].len, ex.program.tensors[dx].len);
        let (sx, sdx) = (ex.plan.slot_of[x], ex.plan.slot_of[dx]);
        let unit: Vec<f32> = std::iter::repeat_n(0.0f32, c).chain(std::iter::repeat_n(1.0f32, c)).collect();
        ex.scratch_buffers(m.be, xlen, 4 * c)?;
        let (Some(t), Some(small)) = (ex.scratch.as_mut(), ex.scratch_small.as_mut()) else {
            return Err(ReplicaError::Config("grouped batch norm: scratch buffers".into()));
        };
        m.be.upload(&aff, ViewMut::new(small, 0..2 * c)?)?;
        m.be.upload(&unit, ViewMut::new(small, 2 * c..4 * c)?)?;
        m.be.batch_norm_forward_infer(
            g,
            View::new(&ex.slots[sx], 0..xlen)?,
            View::new(&*small, 0..2 * c)?,
            View::new(&*small, 2 * c..4 * c)?,
            ViewMut::new(t, 0..xlen)?,
        )?;
        m.be.axpy(1.0, View::new(&*t, 0..xlen)?, ViewMut::new(&mut ex.slots[sdx], 0..dxlen)?)?;
    }
    Ok(())
}
