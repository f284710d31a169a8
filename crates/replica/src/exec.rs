//! Running a planned [`Program`] on a backend.

use std::sync::Arc;

use crossbow_kernels::batch_norm::BatchNormGeom;
use crossbow_kernels::dropout::DropoutConfig;
use crossbow_kernels::{Backend, View, ViewMut};

use crate::error::{ReplicaError, Result};
use crate::graph::Graph;
use crate::plan::{MemoryPlan, plan};
use crate::program::{Instr, Mode, Program, TensorId, lower};

/// A model lowered at one batch size with its buffers: what one learner (training) or one
/// evaluator needs besides the replica's parameter, gradient and state buffers.
pub struct Executor<B: Backend> {
    program: Arc<Program>,
    plan: Arc<MemoryPlan>,
    slots: Vec<B::Buffer>,
    workspace: B::Buffer,
    labels: B::Buffer,
    stats: B::Buffer,
    saved: B::Buffer,
    /// Grouped batch norm's scratch: one activation (allocated on first use).
    scratch: Option<B::Buffer>,
    /// Grouped batch norm's per-channel scratch: `[params(2C) | running(2C)]`.
    scratch_small: Option<B::Buffer>,
}

/// Sizes of what an executor allocates, in `f32` elements.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ExecutorFootprint {
    /// Activation and gradient slots, as planned.
    pub planned: usize,
    /// Activations and gradients if nothing were reused.
    pub unplanned: usize,
    /// Conv scratch space.
    pub workspace: usize,
    /// Labels, loss statistics and batch-norm saved statistics.
    pub small: usize,
}

impl<B: Backend> Executor<B> {
    /// Lowers `graph` at `batch` in `mode`, plans its memory and allocates its buffers on `be`.
    pub fn new(be: &B, graph: &Graph, batch: usize, mode: Mode) -> Result<Self> {
        let program = Arc::new(lower(graph, batch, mode)?);
        let plan = Arc::new(plan(&program));
        Self::from_parts(be, graph, program, plan)
    }

    /// An executor sharing an already lowered and planned program (several learners of one
    /// model share one).
    pub fn from_parts(be: &B, graph: &Graph, program: Arc<Program>, plan: Arc<MemoryPlan>) -> Result<Self> {
        let slots = plan.slot_len.iter().map(|&n| be.alloc(n)).collect::<Result<Vec<_>, _>>()?;
        let ws = workspace_len(be, &program);
        Ok(Executor {
            workspace: be.alloc(ws.max(1))?,
            labels: be.alloc(program.batch)?,
            stats: be.alloc(2)?,
            saved: be.alloc(graph.stats_len.max(1))?,
            scratch: None,
            scratch_small: None,
            slots,
            program,
            plan,
        })
    }

    /// Grows the conv workspace if `be` (e.g. a backend with more threads) needs more.
    pub fn ensure_workspace(&mut self, be: &B) -> Result<()> {
        let need = workspace_len(be, &self.program);
        if B::buffer_len(&self.workspace) < need {
            self.workspace = be.alloc(need)?;
        }
        Ok(())
    }

    /// The program.
    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }

    /// The memory plan.
    pub fn plan(&self) -> &Arc<MemoryPlan> {
        &self.plan
    }

    /// Batch size.
    pub fn batch(&self) -> usize {
        self.program.batch
    }

    /// What this executor allocated.
    pub fn footprint(&self) -> ExecutorFootprint {
        ExecutorFootprint {
            planned: self.plan.planned_len(),
            unplanned: self.plan.unplanned_len,
            workspace: B::buffer_len(&self.workspace),
            small: B::buffer_len(&self.labels) + 2 + B::buffer_len(&self.saved),
        }
    }

    /// Downloads tensor `t` of the last run (e.g. the logits, for inspection and tests).
    pub fn download_tensor(&self, be: &B, t: TensorId) -> Result<Vec<f32>> {
        let s = self.plan.slot_of[t];
        let len = self.program.tensors[t].len;
        let mut v = vec![0.0; len];
        be.download(View::new(&self.slots[s], 0..len)?, &mut v)?;
        Ok(v)
    }

    /// Copies a batch (images `[batch, c, h, w]` flattened, labels as `f32` class indices) to
    /// the device.
    pub fn upload_batch(&mut self, be: &B, images: &[f32], labels: &[f32]) -> Result<()> {
        let t = self.program.input;
        let len = self.program.tensors[t].len;
        if images.len() != len || labels.len() != self.program.batch {
            return Err(ReplicaError::Data(format!(
                "batch has {} image values and {} labels, the executor expects {len} and {}",
                images.len(),
                labels.len(),
                self.program.batch
            )));
        }
        let s = self.plan.slot_of[t];
        be.upload(images, ViewMut::new(&mut self.slots[s], 0..len)?)?;
        be.upload(labels, ViewMut::whole(&mut self.labels))?;
        Ok(())
    }

    /// The input batch buffer region (for on-device augmentation or copies).
    pub fn input_view_mut(&mut self) -> Result<ViewMut<'_, B>> {
        let t = self.program.input;
        let s = self.plan.slot_of[t];
        Ok(ViewMut::new(&mut self.slots[s], 0..self.program.tensors[t].len)?)
    }

    /// Runs the program. Training programs need `grads` (overwritten with the gradient of the
    /// mean loss) and update the batch-norm running statistics in `state`; evaluation
    /// programs only read `state`. `seed` seeds this call's dropout masks.
    pub fn run(
        &mut self,
        be: &B,
        params: &B::Buffer,
        mut grads: Option<&mut B::Buffer>,
        state: &mut B::Buffer,
        seed: u64,
    ) -> Result<()> {
        let program = Arc::clone(&self.program);
        if program.mode == Mode::Train && grads.is_none() {
            return Err(ReplicaError::Config("a training program needs a gradient buffer".into()));
        }
        for ins in &program.instrs {
            self.exec(be, ins, params, grads.as_deref_mut(), state, seed)?;
        }
        Ok(())
    }

    /// Runs the training program from instruction `from` up to the first batch-norm
    /// instruction of training (`BnTrain` or `BnBwd`), which it leaves for
    /// [`group_batch_norm`]; returns that instruction's index, or the program's length when it
    /// ran to the end. Learners that normalise together run their programs this way, in
    /// lockstep from one batch-norm layer to the next.
    pub fn run_until_batch_norm(
        &mut self,
        be: &B,
        params: &B::Buffer,
        mut grads: Option<&mut B::Buffer>,
        state: &mut B::Buffer,
        seed: u64,
        from: usize,
    ) -> Result<usize> {
        let program = Arc::clone(&self.program);
        if program.mode != Mode::Train || grads.is_none() {
            return Err(ReplicaError::Config("grouped batch norm runs training programs only".into()));
        }
        for (i, ins) in program.instrs.iter().enumerate().skip(from) {
            if matches!(ins, Instr::BnTrain { .. } | Instr::BnBwd { .. }) {
                return Ok(i);
            }
            self.exec(be, ins, params, grads.as_deref_mut(), state, seed)?;
        }
        Ok(program.instrs.len())
    }

    /// Grows grouped batch norm's scratch buffers to `big` and `small` elements.
    fn scratch_buffers(&mut self, be: &B, big: usize, small: usize) -> Result<()> {
        if big > 0 && self.scratch.as_ref().is_none_or(|b| B::buffer_len(b) < big) {
            self.scratch = Some(be.alloc(big)?);
        }
        if self.scratch_small.as_ref().is_none_or(|b| B::buffer_len(b) < small) {
            self.scratch_small = Some(be.alloc(small.max(1))?);
        }
        Ok(())
    }

    /// `(sum of per-sample losses, correct predictions)` of the last run (waits for the device).
    pub fn loss_stats(&self, be: &B) -> Result<(f64, usize)> {
        let mut s = [0.0f32; 2];
        be.download(View::whole(&self.stats), &mut s)?;
        Ok((s[0] as f64, s[1].round() as usize))
    }

    fn exec(
        &mut self,
        be: &B,
        ins: &Instr,
        params: &B::Buffer,
        grads: Option<&mut B::Buffer>,
        state: &mut B::Buffer,
        seed: u64,
    ) -> Result<()> {
        if let Instr::Dropout { p, node, x, y, mask } = ins {
            // Two outputs (y and the mask), in two slots.
            return self.exec_dropout(be, *p, *node, *x, *y, *mask, seed);
        }
        let prog = Arc::clone(&self.program);
        let plan = Arc::clone(&self.plan);
        let len = |t: TensorId| prog.tensors[t].len;
        let slot = |t: TensorId| plan.slot_of[t];
        let pv = |r: &std::ops::Range<usize>| View::<B>::new(params, r.clone());
        let ws = ViewMut::whole(&mut self.workspace);
        let mut sp = SlotSplit::<B>::new(&mut self.slots, ins.writes().first().map(|&t| slot(t)))?;
        macro_rules! read {
            ($t:expr) => {
                sp.read(slot($t), len($t))
            };
        }
        let stats_region = |s: usize, c: usize| s..s + c;
        match ins {
            Instr::ConvFwd { g, x, y, p } => be.conv2d_forward(g, read!(*x)?, pv(p)?, sp.write(len(*y))?, ws)?,
            Instr::ConvBwdData { g, dy, dx, p } => {
                be.conv2d_backward_data(g, read!(*dy)?, pv(p)?, sp.write(len(*dx))?, ws)?
            }
            Instr::ConvBwdParams { g, x, dy, p } => {
                be.conv2d_backward_params(g, read!(*x)?, read!(*dy)?, grad_view::<B>(grads, p.clone())?, ws)?
            }
            Instr::LinearFwd { g, x, y, p } => be.linear_forward(g, read!(*x)?, pv(p)?, sp.write(len(*y))?)?,
            Instr::LinearBwdData { g, dy, dx, p } => {
                be.linear_backward_data(g, read!(*dy)?, pv(p)?, sp.write(len(*dx))?)?
            }
            Instr::LinearBwdParams { g, x, dy, p } => {
                be.linear_backward_params(g, read!(*x)?, read!(*dy)?, grad_view::<B>(grads, p.clone())?)?
            }
            Instr::BnTrain { g, x, y, p, stats } => {
                let r = stats_region(*stats, g.stats_len());
                let saved = ViewMut::new(&mut self.saved, r.clone())?;
                let running = ViewMut::new(state, r)?;
                be.batch_norm_forward_train(g, read!(*x)?, pv(p)?, sp.write(len(*y))?, saved, running)?
            }
            Instr::BnInfer { g, x, y, p, stats } => {
                let running = View::new(&*state, stats_region(*stats, g.stats_len()))?;
                be.batch_norm_forward_infer(g, read!(*x)?, pv(p)?, running, sp.write(len(*y))?)?
            }
            Instr::BnBwd { g, x, dy, dx, p, stats } => {
                let saved = View::new(&self.saved, stats_region(*stats, g.stats_len()))?;
                be.batch_norm_backward(
                    g,
                    read!(*x)?,
                    read!(*dy)?,
                    pv(p)?,
                    saved,
                    sp.write(len(*dx))?,
                    grad_view::<B>(grads, p.clone())?,
                )?
            }
            Instr::Relu { x, y } => be.relu_forward(read!(*x)?, sp.write(len(*y))?)?,
            Instr::ReluInPlace { y } => be.relu_forward_inplace(sp.write(len(*y))?)?,
            Instr::ReluBwd { y, dy, dx } => be.relu_backward(read!(*y)?, read!(*dy)?, sp.write(len(*dx))?)?,
            Instr::ReluBwdInPlace { y, d } => be.relu_backward_inplace(read!(*y)?, sp.write(len(*d))?)?,
            Instr::MaxPool { g, x, y } => be.max_pool_forward(g, read!(*x)?, sp.write(len(*y))?)?,
            Instr::MaxPoolBwd { g, x, y, dy, dx } => {
                be.max_pool_backward(g, read!(*x)?, read!(*y)?, read!(*dy)?, sp.write(len(*dx))?)?
            }
            Instr::AvgPool { g, x, y } => be.avg_pool_forward(g, read!(*x)?, sp.write(len(*y))?)?,
            Instr::AvgPoolBwd { g, dy, dx } => be.avg_pool_backward(g, read!(*dy)?, sp.write(len(*dx))?)?,
            Instr::Dropout { .. } => {
                return Err(ReplicaError::Model("internal: dropout reached the slot split".into()));
            }
            Instr::Mul { a, b, y } => be.mul(read!(*a)?, read!(*b)?, sp.write(len(*y))?)?,
            Instr::Add { a, b, y } => be.add(read!(*a)?, read!(*b)?, sp.write(len(*y))?)?,
            Instr::Copy { src, dst } => be.copy(read!(*src)?, sp.write(len(*dst))?)?,
            Instr::Accumulate { src, dst } => be.axpy(1.0, read!(*src)?, sp.write(len(*dst))?)?,
            Instr::Loss { g, logits, dlogits } => {
                let d = match dlogits {
                    Some(t) => Some(sp.write(len(*t))?),
                    None => None,
                };
                be.softmax_xent(g, read!(*logits)?, View::whole(&self.labels), d, ViewMut::whole(&mut self.stats))?
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn exec_dropout(
        &mut self,
        be: &B,
        p: f32,
        node: usize,
        x: TensorId,
        y: TensorId,
        mask: TensorId,
        seed: u64,
    ) -> Result<()> {
        let prog = &self.program;
        let (sx, sy, sm) = (self.plan.slot_of[x], self.plan.slot_of[y], self.plan.slot_of[mask]);
        let [bx, by, bm] = self
            .slots
            .get_disjoint_mut([sx, sy, sm])
            .map_err(|_| ReplicaError::Model("memory plan error: dropout tensors share a slot".into()))?;
        let cfg = DropoutConfig { p, seed: mix(seed, node as u64) };
        be.dropout_forward(
            &cfg,
            View::new(&*bx, 0..prog.tensors[x].len)?,
            ViewMut::new(by, 0..prog.tensors[y].len)?,
            ViewMut::new(bm, 0..prog.tensors[mask].len)?,
        )?;
        Ok(())
    }
}

/// The program's slots split into the one an instruction writes and the others it reads.
struct SlotSplit<'a, B: Backend> {
    lo: &'a [B::Buffer],
    hi: &'a [B::Buffer],
    w: Option<usize>,
    out: Option<&'a mut B::Buffer>,
}

impl<'a, B: Backend> SlotSplit<'a, B> {
    fn new(slots: &'a mut [B::Buffer], w: Option<usize>) -> Result<Self> {
        match w {
            Some(w) => {
                let (lo, rest) = slots.split_at_mut(w);
                let (out, hi) = rest
                    .split_first_mut()
                    .ok_or_else(|| ReplicaError::Model(format!("internal: slot {w} out of range")))?;
                Ok(SlotSplit { lo, hi, w: Some(w), out: Some(out) })
            }
            None => Ok(SlotSplit { lo: slots, hi: &[], w: None, out: None }),
        }
    }

    fn read(&self, s: usize, len: usize) -> Result<View<'a, B>> {
        let buf = match self.w {
            Some(w) if s == w => {
                return Err(ReplicaError::Model(format!("internal: memory plan reads slot {s} while writing it")));
            }
            Some(w) if s > w => &self.hi[s - w - 1],
            _ => &self.lo[s],
        };
        Ok(View::new(buf, 0..len)?)
    }

    fn write(&mut self, len: usize) -> Result<ViewMut<'a, B>> {
        let b = self.out.take().ok_or_else(|| ReplicaError::Model("internal: instruction writes twice".into()))?;
        Ok(ViewMut::new(b, 0..len)?)
    }
}

fn grad_view<B: Backend>(g: Option<&mut B::Buffer>, r: std::ops::Range<usize>) -> Result<ViewMut<'_, B>> {
    let g = g.ok_or_else(|| ReplicaError::Config("gradient buffer missing".into()))?;
    Ok(ViewMut::new(g, r)?)
}

/// One learner's part in [`group_batch_norm`]: its backend, executor (paused at the same
/// batch-norm instruction as the others'), parameters, gradients and running statistics.
pub struct GroupMember<'a, B: Backend> {
    /// The learner's backend.
    pub be: &'a B,
    /// Its executor, paused by [`Executor::run_until_batch_norm`].
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
        Instr::BnTrain { g, x, y, p, stats } => group_forward(members, &g, x, y, &p, stats),
        Instr::BnBwd { g, x, dy, dx, p, stats } => group_backward(members, &g, x, dy, dx, &p, stats),
        other => Err(ReplicaError::Config(format!("grouped batch norm: instruction {at} is {other:?}"))),
    }
}

fn group_forward<B: Backend>(
    members: &mut [GroupMember<'_, B>],
    g: &BatchNormGeom,
    x: TensorId,
    y: TensorId,
    p: &std::ops::Range<usize>,
    stats: usize,
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
        let [bx, by] = ex
            .slots
            .get_disjoint_mut([sx, sy])
            .map_err(|_| ReplicaError::Model("grouped batch norm: input and output share a slot".into()))?;
        // y = γ (x − mean) / sqrt(var + eps) + β with the group's statistics.
        m.be.batch_norm_forward_infer(
            g,
            View::new(&*bx, 0..xlen)?,
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

/// Mixes two words into a seed (SplitMix64 finaliser).
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The largest conv workspace any instruction of `program` needs on `be`.
pub fn workspace_len<B: Backend>(be: &B, program: &Program) -> usize {
    program
        .instrs
        .iter()
        .filter_map(|i| match i {
            Instr::ConvFwd { g, .. } | Instr::ConvBwdData { g, .. } | Instr::ConvBwdParams { g, .. } => {
                Some(be.conv2d_workspace_len(g))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use crossbow_kernels::testing::random_vec;
    use crossbow_kernels::{CpuBackend, View};
    use crossbow_tensor::{Rng, Shape};

    use super::*;
    use crate::graph::GraphBuilder;
    use crate::models::ModelKind;
    use crate::replica::Replica;

    fn batch(g: &Graph, n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let per: usize = g.input_shape().dims().iter().product();
        let mut r = Rng::new(seed);
        let x = random_vec(seed, n * per, 1.0);
        let y = (0..n).map(|_| r.below(g.classes) as f32).collect();
        (x, y)
    }

    /// The mean loss at `params` (a host vector), with scratch gradients.
    fn loss<B: Backend>(be: &B, ex: &mut Executor<B>, rep: &mut Replica<B>, params: &[f32]) -> f64 {
        let len = params.len();
        let mut p = be.alloc(len).unwrap();
        be.upload(params, ViewMut::new(&mut p, 0..len).unwrap()).unwrap();
        let mut grads = be.alloc(B::buffer_len(&rep.grads)).unwrap();
        ex.run(be, &p, Some(&mut grads), &mut rep.state, 7).unwrap();
        ex.loss_stats(be).unwrap().0 / ex.batch() as f64
    }

    /// The whole backward pass against directional finite differences of the whole forward
    /// pass (f32, h = 1e-2 along unit directions; bound 2% relative + 2e-4 absolute), on any
    /// backend.
    fn check_model<B: Backend>(be: &B, g: &Graph, n: usize) {
        let mut rep = Replica::init(be, g, 3).unwrap();
        let mut ex = Executor::new(be, g, n, Mode::Train).unwrap();
        let (x, y) = batch(g, n, 11);
        ex.upload_batch(be, &x, &y).unwrap();
        let p0 = rep.params_to_host(be, g.param_len).unwrap();
        ex.run(be, &rep.params, Some(&mut rep.grads), &mut rep.state, 7).unwrap();
        let mut grad = vec![0.0f32; g.param_len];
        be.download(View::new(&rep.grads, 0..g.param_len).unwrap(), &mut grad).unwrap();
        assert!(grad.iter().all(|v| v.is_finite()));
        for d in 0..4u64 {
            let mut v = random_vec(100 + d, g.param_len, 1.0);
            let norm = v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt() as f32;
            v.iter_mut().for_each(|a| *a /= norm);
            let h = 1e-2f32;
            let plus: Vec<f32> = p0.iter().zip(&v).map(|(p, d)| p + h * d).collect();
            let minus: Vec<f32> = p0.iter().zip(&v).map(|(p, d)| p - h * d).collect();
            let fd = (loss(be, &mut ex, &mut rep, &plus) - loss(be, &mut ex, &mut rep, &minus)) / (2.0 * h as f64);
            let an: f64 = grad.iter().zip(&v).map(|(g, d)| *g as f64 * *d as f64).sum();
            assert!(
                (fd - an).abs() <= 0.02 * fd.abs().max(an.abs()) + 2e-4,
                "{}: direction {d}: finite difference {fd} vs backward {an}",
                g.name
            );
        }
    }

    // The GPU kernel emulator runs whole models too slowly for CI (a minute for LeNet-5,
    // several for a ResNet), so the zoo's gradients run on the CPU and a real GPU; the mixed
    // graph (every lowering path, batch norm included) covers the emulator.
    crossbow_kernels::test_backends! {
        lenet_gradients: [cpu_threads, cuda],
        resnet_gradients: [cpu, cuda],
        mixed_graph_gradients,
    }

    fn lenet_gradients<B: Backend>(be: &B) {
        check_model(be, &ModelKind::LeNet5.build(&Shape::new(vec![1, 28, 28]), 10).unwrap(), 4);
    }

    fn resnet_gradients<B: Backend>(be: &B) {
        check_model(be, &ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 8, 8]), 5).unwrap(), 4);
    }

    /// Fan-out, identity and projection shortcuts, both pools, dropout, a linear layer with
    /// batch norm after it: every lowering path of the program builder.
    fn mixed_graph_gradients<B: Backend>(be: &B) {
        let mut b = GraphBuilder::new("mixed", Shape::new(vec![2, 9, 9])).unwrap();
        let x = b.input();
        let a = b.conv2d("a", x, 4, 3, 1, 1, true).unwrap();
        let a = b.relu("ra", a).unwrap();
        let p = b.max_pool("mp", a, 3, 2, 1, true).unwrap();
        let c1 = b.conv2d("c1", p, 4, 3, 1, 1, false).unwrap();
        let c1 = b.batch_norm("bn1", c1).unwrap();
        let s = b.add("add", c1, p).unwrap();
        let s = b.relu("rs", s).unwrap();
        let c2 = b.conv2d("c2", s, 6, 1, 2, 0, false).unwrap();
        let q = b.avg_pool("ap", s, 2, 2, 0, false).unwrap();
        let q2 = b.conv2d("c3", q, 6, 1, 1, 0, true).unwrap();
        let c2 = b.avg_pool("ap2", c2, 2, 1, 0, false).unwrap();
        let t = b.add("add2", c2, q2).unwrap();
        let d = b.dropout("drop", t, 0.3).unwrap();
        let f = b.linear("fc1", d, 12, true).unwrap();
        let f = b.batch_norm("bnf", f).unwrap();
        let f = b.relu("rf", f).unwrap();
        let out = b.linear("fc2", f, 3, true).unwrap();
        let g = b.finish(out).unwrap();
        check_model(be, &g, 5);
    }

    #[test]
    fn eval_matches_train_forward_without_bn_and_dropout() {
        // LeNet has neither batch norm nor dropout: the evaluation loss equals the training loss.
        let g = ModelKind::LeNet5.build(&Shape::new(vec![1, 28, 28]), 10).unwrap();
        let be = CpuBackend::new(0);
        let mut rep = Replica::init(&be, &g, 1).unwrap();
        let (x, y) = batch(&g, 6, 2);
        let mut tr = Executor::new(&be, &g, 6, Mode::Train).unwrap();
        let mut ev = Executor::new(&be, &g, 6, Mode::Eval).unwrap();
        tr.upload_batch(&be, &x, &y).unwrap();
        ev.upload_batch(&be, &x, &y).unwrap();
        tr.run(&be, &rep.params, Some(&mut rep.grads), &mut rep.state, 0).unwrap();
        ev.run(&be, &rep.params, None, &mut rep.state, 0).unwrap();
        assert_eq!(tr.loss_stats(&be).unwrap(), ev.loss_stats(&be).unwrap());
        assert!(ev.footprint().planned < tr.footprint().planned);
    }

    /// The calibration program writes each batch-norm layer's batch statistics (mean and
    /// unbiased variance) into the running statistics: the numbers a training forward pass
    /// blends into them with momentum 0.1 (`r = 0.9 r + 0.1 batch`), and the loss is the
    /// training forward pass's loss.
    #[test]
    fn calibrate_program_takes_the_batch_statistics() {
        let g = ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 8, 8]), 5).unwrap();
        let be = CpuBackend::new(0);
        let mut rep = Replica::init(&be, &g, 4).unwrap();
        let (x, y) = batch(&g, 6, 3);
        let initial = rep.state.clone();
        let mut tr = Executor::new(&be, &g, 6, Mode::Train).unwrap();
        tr.upload_batch(&be, &x, &y).unwrap();
        let mut train_state = initial.clone();
        tr.run(&be, &rep.params, Some(&mut rep.grads), &mut train_state, 0).unwrap();
        let mut cal = Executor::new(&be, &g, 6, Mode::Calibrate).unwrap();
        assert!(cal.footprint().planned < tr.footprint().planned, "no backward in the calibration program");
        cal.upload_batch(&be, &x, &y).unwrap();
        let mut cal_state = initial.clone();
        cal.run(&be, &rep.params, None, &mut cal_state, 0).unwrap();
        assert_eq!(tr.loss_stats(&be).unwrap(), cal.loss_stats(&be).unwrap());
        let n = g.stats_len;
        assert!(n > 0);
        for i in 0..n {
            let blended = 0.9 * initial[i] as f64 + 0.1 * cal_state[i] as f64;
            let got = train_state[i] as f64;
            assert!(
                (got - blended).abs() <= 1e-5 * got.abs().max(1.0),
                "stat {i}: train {got} vs 0.9 r + 0.1 batch {blended}"
            );
        }
        assert!(cal_state.iter().zip(&initial).any(|(a, b)| a != b));
    }

    #[test]
    fn bad_batches_are_errors() {
        let g = ModelKind::LeNet5.build(&Shape::new(vec![1, 28, 28]), 10).unwrap();
        let be = CpuBackend::new(0);
        let mut ex = Executor::new(&be, &g, 2, Mode::Eval).unwrap();
        let e = ex.upload_batch(&be, &[0.0; 10], &[0.0; 2]).unwrap_err().to_string();
        assert!(e.contains("1568"), "{e}");
        let mut rep = Replica::init(&be, &g, 1).unwrap();
        let mut tr = Executor::new(&be, &g, 2, Mode::Train).unwrap();
        assert!(tr.run(&be, &rep.params, None, &mut rep.state, 0).is_err());
        // A label out of range is an error from the loss kernel.
        tr.upload_batch(&be, &vec![0.0; 1568], &[0.0, 10.0]).unwrap();
        let e = tr.run(&be, &rep.params, Some(&mut rep.grads), &mut rep.state, 0).unwrap_err().to_string();
        assert!(e.contains("label"), "{e}");
        let _ = View::<CpuBackend>::whole(&rep.params);
    }
}
