//! Running a planned [`Program`] on a backend.

use std::sync::Arc;

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
