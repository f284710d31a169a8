//! Running a planned [`Program`] on a backend.

use std::sync::Arc;

use crossbow_kernels::{Backend, View, ViewMut};

use crate::error::{ReplicaError, Result};
use crate::graph::Graph;
pub use crate::layers::{GroupMember, group_batch_norm};
use crate::plan::{MemoryPlan, plan};
use crate::program::{Instr, Mode, ParamRange, Program, TensorId, TensorInfo, lower};

/// A model lowered at one batch size with its buffers: what one learner (training) or one
/// evaluator needs besides the replica's parameter, gradient and state buffers.
pub struct Executor<B: Backend> {
    pub(crate) program: Arc<Program>,
    pub(crate) plan: Arc<MemoryPlan>,
    pub(crate) slots: Vec<B::Buffer>,
    workspace: B::Buffer,
    labels: B::Buffer,
    stats: B::Buffer,
    pub(crate) saved: B::Buffer,
    /// Grouped batch norm's scratch: one activation (allocated on first use).
    pub(crate) scratch: Option<B::Buffer>,
    /// Grouped batch norm's per-channel scratch: `[params(2C) | running(2C)]`.
    pub(crate) scratch_small: Option<B::Buffer>,
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
            if ins.is_batch_norm_train() {
                return Ok(i);
            }
            self.exec(be, ins, params, grads.as_deref_mut(), state, seed)?;
        }
        Ok(program.instrs.len())
    }

    /// Grows grouped batch norm's scratch buffers to `big` and `small` elements.
    pub(crate) fn scratch_buffers(&mut self, be: &B, big: usize, small: usize) -> Result<()> {
        if big > 0 && self.scratch.as_ref().is_none_or(|b| B::buffer_len(b) < big) {
            self.scratch = Some(be.alloc(big)?);
        }
        if self.scratch_small.as_ref().is_none_or(|b| B::buffer_len(b) < small) {
            self.scratch_small = Some(be.alloc(small.max(1))?);
        }
        Ok(())
    }

    /// Starts reading the loss statistics of the last batch (`[sum of losses, correct]`)
    /// behind the work issued so far ([`Backend::start_download`]).
    pub fn start_loss_read(&self, be: &B) -> Result<B::Pending> {
        Ok(be.start_download(View::whole(&self.stats))?)
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
        let program = Arc::clone(&self.program);
        let plan = Arc::clone(&self.plan);
        let writes: Vec<usize> = ins.writes().iter().map(|&t| plan.slot_of[t]).collect();
        let slots = self
            .slots
            .iter_mut()
            .enumerate()
            .map(|(i, b)| if writes.contains(&i) { Slot::Written(Some(b)) } else { Slot::Read(&*b) })
            .collect();
        let mut cx = ExecCx {
            be,
            slots,
            tensors: &program.tensors,
            slot_of: &plan.slot_of,
            params,
            grads,
            workspace: Some(&mut self.workspace),
            saved: Some(&mut self.saved),
            state: Some(state),
            labels: &self.labels,
            loss: Some(&mut self.stats),
            seed,
        };
        ins.exec(&mut cx)
    }
}

/// A program slot as one instruction sees it: read, or written (once).
enum Slot<'a, B: Backend> {
    Read(&'a B::Buffer),
    Written(Option<&'a mut B::Buffer>),
}

/// What an instruction runs with: the backend, its tensors (the slots it writes apart from
/// the ones it reads) and the replica's and executor's other buffers. Each mutable buffer
/// can be taken once per instruction.
pub(crate) struct ExecCx<'a, B: Backend> {
    /// The backend.
    pub(crate) be: &'a B,
    slots: Vec<Slot<'a, B>>,
    tensors: &'a [TensorInfo],
    slot_of: &'a [usize],
    params: &'a B::Buffer,
    grads: Option<&'a mut B::Buffer>,
    workspace: Option<&'a mut B::Buffer>,
    saved: Option<&'a mut B::Buffer>,
    state: Option<&'a mut B::Buffer>,
    labels: &'a B::Buffer,
    loss: Option<&'a mut B::Buffer>,
    /// The seed of this run's dropout masks.
    pub(crate) seed: u64,
}

fn taken(what: &str) -> ReplicaError {
    ReplicaError::Model(format!("internal: an instruction takes the {what} twice"))
}

impl<'a, B: Backend> ExecCx<'a, B> {
    /// Tensor `t`, read.
    pub(crate) fn read(&self, t: TensorId) -> Result<View<'a, B>> {
        let s = self.slot_of[t];
        match &self.slots[s] {
            Slot::Read(b) => Ok(View::new(*b, 0..self.tensors[t].len)?),
            Slot::Written(_) => {
                Err(ReplicaError::Model(format!("internal: memory plan reads slot {s} while writing it")))
            }
        }
    }

    /// Tensor `t`, written.
    pub(crate) fn write(&mut self, t: TensorId) -> Result<ViewMut<'a, B>> {
        let s = self.slot_of[t];
        let len = self.tensors[t].len;
        match &mut self.slots[s] {
            Slot::Written(b) => Ok(ViewMut::new(b.take().ok_or_else(|| taken("output slot"))?, 0..len)?),
            Slot::Read(_) => Err(ReplicaError::Model(format!("internal: slot {s} is written but not planned so"))),
        }
    }

    /// A region of the parameter buffer.
    pub(crate) fn params(&self, r: &ParamRange) -> Result<View<'a, B>> {
        Ok(View::new(self.params, r.clone())?)
    }

    /// A region of the gradient buffer (training programs only).
    pub(crate) fn grads(&mut self, r: &ParamRange) -> Result<ViewMut<'a, B>> {
        let g = self.grads.take().ok_or_else(|| ReplicaError::Config("gradient buffer missing".into()))?;
        Ok(ViewMut::new(g, r.clone())?)
    }

    /// The conv workspace.
    pub(crate) fn workspace(&mut self) -> Result<ViewMut<'a, B>> {
        Ok(ViewMut::whole(self.workspace.take().ok_or_else(|| taken("workspace"))?))
    }

    /// A region of the saved batch statistics, written.
    pub(crate) fn saved_mut(&mut self, r: ParamRange) -> Result<ViewMut<'a, B>> {
        Ok(ViewMut::new(self.saved.take().ok_or_else(|| taken("saved statistics"))?, r)?)
    }

    /// A region of the saved batch statistics, read.
    pub(crate) fn saved(&mut self, r: ParamRange) -> Result<View<'a, B>> {
        let b: &'a B::Buffer = self.saved.take().ok_or_else(|| taken("saved statistics"))?;
        Ok(View::new(b, r)?)
    }

    /// A region of the running statistics (the replica's state buffer), written.
    pub(crate) fn state_mut(&mut self, r: ParamRange) -> Result<ViewMut<'a, B>> {
        Ok(ViewMut::new(self.state.take().ok_or_else(|| taken("running statistics"))?, r)?)
    }

    /// A region of the running statistics, read.
    pub(crate) fn state(&mut self, r: ParamRange) -> Result<View<'a, B>> {
        let b: &'a B::Buffer = self.state.take().ok_or_else(|| taken("running statistics"))?;
        Ok(View::new(b, r)?)
    }

    /// The batch's labels.
    pub(crate) fn labels(&self) -> View<'a, B> {
        View::whole(self.labels)
    }

    /// The loss statistics `[sum of losses, correct]`, written.
    pub(crate) fn loss_stats(&mut self) -> Result<ViewMut<'a, B>> {
        Ok(ViewMut::whole(self.loss.take().ok_or_else(|| taken("loss statistics"))?))
    }
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
    program.instrs.iter().map(|i| i.workspace_len(be)).max().unwrap_or(0)
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
        fused_chains_give_the_plain_bits_mixed: [cpu, cpu_threads, emu, cuda],
        fused_chains_give_the_plain_bits_resnet: [cpu, cuda],
    }

    /// Everything a program run leaves: loss statistics, gradients, running statistics.
    fn run_bits<B: Backend>(be: &B, g: &Graph, n: usize, mode: Mode, fusion: crate::program::Fusion) -> Vec<u32> {
        let program = Arc::new(crate::program::lower_with(g, n, mode, fusion).unwrap());
        let plan = Arc::new(plan(&program));
        let mut ex = Executor::from_parts(be, g, program, plan).unwrap();
        let mut rep = Replica::init(be, g, 5).unwrap();
        let (x, y) = batch(g, n, 13);
        ex.upload_batch(be, &x, &y).unwrap();
        let train = mode == Mode::Train;
        ex.run(be, &rep.params, train.then_some(&mut rep.grads), &mut rep.state, 9).unwrap();
        let mut out = vec![0.0f32; 2];
        be.download(View::whole(&ex.stats), &mut out).unwrap();
        for buf in [&rep.state].into_iter().chain(train.then_some(&rep.grads)) {
            let mut v = vec![0.0f32; B::buffer_len(buf)];
            be.download(View::whole(buf), &mut v).unwrap();
            out.extend(v);
        }
        out.iter().map(|v| v.to_bits()).collect()
    }

    /// Batch norm fused with its ReLU and residual sum computes the same bits as the nodes
    /// one by one, in every mode; and the fusion happens (fewer instructions, fused ones).
    fn fused_chains_give_the_plain_bits<B: Backend>(be: &B, g: &Graph, chains: usize) {
        use crate::layers::batch_norm::BnOp;
        use crate::program::{Fusion, lower_with};
        for mode in [Mode::Train, Mode::Eval, Mode::Calibrate] {
            let (on, off) = (lower_with(g, 4, mode, Fusion::On).unwrap(), lower_with(g, 4, mode, Fusion::Off).unwrap());
            let fused = |p: &Program| {
                p.instrs
                    .iter()
                    .filter(|i| {
                        matches!(i, Instr::BatchNorm(BnOp::Train { relu: true, .. } | BnOp::Infer { relu: true, .. }))
                    })
                    .count()
            };
            assert_eq!((fused(&on), fused(&off)), (chains, 0), "{} {mode:?}: fused chains", g.name);
            assert!(on.instrs.len() < off.instrs.len(), "{} {mode:?}: fusion removes instructions", g.name);
            let want = run_bits(be, g, 4, mode, Fusion::Off);
            assert_eq!(run_bits(be, g, 4, mode, Fusion::On), want, "{} {mode:?}", g.name);
        }
    }

    fn fused_chains_give_the_plain_bits_mixed<B: Backend>(be: &B) {
        fused_chains_give_the_plain_bits(be, &mixed_graph(), 2);
    }

    /// ResNet-8: the stem, and per block one conv–BN–ReLU and one BN–sum–ReLU.
    fn fused_chains_give_the_plain_bits_resnet<B: Backend>(be: &B) {
        let g = ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 8, 8]), 5).unwrap();
        fused_chains_give_the_plain_bits(be, &g, 7);
    }

    #[test]
    fn a_bad_fusion_setting_names_the_variable() {
        use crate::program::Fusion;
        assert_eq!(Fusion::parse("0").unwrap(), Fusion::Off);
        assert_eq!(Fusion::parse("ON").unwrap(), Fusion::On);
        let e = Fusion::parse("maybe").unwrap_err().to_string();
        assert!(e.contains("CROSSBOW_FUSION") && e.contains("maybe"), "{e}");
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
        check_model(be, &mixed_graph(), 5);
    }

    fn mixed_graph() -> Graph {
        let mut b = GraphBuilder::new("mixed", Shape::new(vec![2, 9, 9])).unwrap();
        let x = b.input();
        let a = b.conv2d("a", x, 4, 3, 1, 1, true).unwrap();
        let a = b.leaky_relu("ra", a, 0.1).unwrap();
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
        b.finish(out).unwrap()
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
