//! Evaluation of the central model `z` on the test set, with batch-norm statistics either
//! averaged over the learners or recalibrated on `z` itself.

use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_tensor::Device;
use rayon::prelude::*;
use serde::Serialize;

use super::{Engine, EvalSource, Learner, TrainBatch};
use crate::error::{ReplicaError, Result};
use crate::exec::Executor;
use crate::program::Mode;

/// The central model's test loss and accuracy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct EvalResult {
    /// Mean loss per test sample.
    pub loss: f64,
    /// Fraction of test samples classified correctly, 0..1.
    pub accuracy: f64,
    /// Number of test samples evaluated.
    pub samples: usize,
}

/// A recalibration program and the statistics buffer it writes, on one learner's backend.
type Calibrator<B> = (Executor<B>, <B as crossbow_kernels::Storage>::Buffer);

pub(super) struct Evaluator<B: Backend> {
    execs: Vec<Executor<B>>,
    state: B::Buffer,
    /// The recalibration program (at the training batch size), made on first use.
    calibrate: Option<Executor<B>>,
    /// With several learners on CPU device 0: a recalibration program and statistics buffer
    /// on each learner's backend (its share of the cores), so the batches run concurrently
    /// as the learners' own do; made for the learners named (their ids).
    calibrate_learners: Option<(Vec<usize>, Vec<Calibrator<B>>)>,
    /// Batch-norm statistics recalibrated on `z` at iteration `.0`, if any.
    calibrated: Option<(u64, Vec<f32>)>,
    /// A learner's parameters, for [`Engine::evaluate_learner`] (made on first use).
    params: Option<B::Buffer>,
}

impl<B: Backend> Engine<B> {
    /// Mean batch-norm running statistics over the learners of device `d` (or of all devices,
    /// and then of every rank: a collective with several ranks).
    pub(super) fn mean_state(&self, d: Option<usize>) -> Result<Vec<f32>> {
        let n = self.graph.stats_len;
        let mut acc = vec![0.0f64; n];
        let mut count = 0usize;
        let mut tmp = vec![0.0f32; n];
        for (i, dev) in self.devices.iter().enumerate() {
            if d.is_some_and(|d| d != i) {
                continue;
            }
            for l in &dev.learners {
                if n > 0 {
                    l.backend.download(View::new(&l.replica.state, 0..n)?, &mut tmp)?;
                }
                for (a, v) in acc.iter_mut().zip(&tmp) {
                    *a += *v as f64;
                }
                count += 1;
            }
        }
        if d.is_none() && self.world.size() > 1 {
            acc.push(count as f64);
            self.world.all_reduce_sum_f64(&mut acc)?;
            count = acc.pop().unwrap_or(0.0) as usize;
        }
        Ok(acc.into_iter().map(|a| (a / count.max(1) as f64) as f32).collect())
    }

    /// Evaluate the central model with the first learner's own batch-norm running statistics
    /// (`true`) instead of the mean over the learners (`false`, the default) when no
    /// recalibrated statistics are current.
    pub fn set_eval_first_learner_stats(&mut self, on: bool) {
        self.eval_first_learner = on;
    }

    /// The running statistics of the first learner of the job (device 0 of rank 0); with
    /// several ranks rank 0 sends them to every rank (a collective).
    fn first_learner_state(&self) -> Result<Vec<f32>> {
        let n = self.graph.stats_len;
        let mut out = vec![0.0f32; n];
        if self.world.rank() == 0
            && n > 0
            && let Some(l) = self.devices.first().and_then(|d| d.learners.first())
        {
            l.backend.download(View::new(&l.replica.state, 0..n)?, &mut out)?;
        }
        if self.world.size() > 1 {
            let mut bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.world.broadcast_bytes(0, &mut bytes)?;
            if bytes.len() != 4 * n {
                return Err(ReplicaError::Config("rank 0 sent batch-norm statistics of another size".into()));
            }
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Ok(out)
    }

    /// Recalibrates the batch-norm statistics for the central model: runs `batches` (training
    /// batches of the engine's batch size) through `z` (device 0's copy) in training mode,
    /// without gradients, and keeps the mean of their batch statistics (means and unbiased
    /// variances, as PyTorch's cumulative average) for the next [`Engine::evaluate`] before
    /// another iteration. A model without batch norm has nothing to recalibrate. The
    /// learners' own running statistics are not touched.
    pub fn recalibrate<T: TrainBatch>(&mut self, batches: Vec<T>) -> Result<()> {
        let n = self.graph.stats_len;
        if n == 0 || batches.is_empty() {
            return Ok(());
        }
        self.ensure_evaluator()?;
        // On CPU cores, one learner's forward pass at the training batch uses the cores less
        // well than the learners' passes side by side (as in training); a GPU keeps its one
        // program (the learners' programs would cost memory the tuner did not plan for).
        let d0 = &self.devices[0];
        let on_learners = d0.learners.len() > 1 && d0.pool.is_some() && matches!(d0.device, Device::Cpu(_));
        let per_batch = if on_learners {
            self.calibrate_on_learners(batches)?
        } else {
            let dev = &self.devices[0];
            let be = &dev.backend;
            let ev = self.evaluator.as_mut().ok_or_else(|| ReplicaError::Config("evaluator".into()))?;
            if ev.calibrate.is_none() {
                ev.calibrate = Some(Executor::new(be, &self.graph, self.cfg.batch_size, Mode::Calibrate)?);
            }
            let ex = ev.calibrate.as_mut().ok_or_else(|| ReplicaError::Config("calibration program".into()))?;
            let mut out = Vec::with_capacity(batches.len());
            for b in &batches {
                out.push(batch_stats(be, ex, &dev.central.z, &mut ev.state, b, n)?);
            }
            out
        };
        // Summed in the batches' order whichever path measured them: the same bits.
        let mut acc = vec![0.0f64; n];
        for st in &per_batch {
            for (a, v) in acc.iter_mut().zip(st) {
                *a += *v as f64;
            }
        }
        let mean = acc.into_iter().map(|a| (a / per_batch.len() as f64) as f32).collect();
        let ev = self.evaluator.as_mut().ok_or_else(|| ReplicaError::Config("evaluator".into()))?;
        ev.calibrated = Some((self.iteration, mean));
        Ok(())
    }

    /// Each recalibration batch's statistics, measured on the backends of device 0's learners
    /// concurrently (batch `i` on learner `i mod k`), in the batches' order. A batch's
    /// statistics do not depend on the threads that compute them, so this gives the bits the
    /// device's own backend gives, in about the time one learner's forward passes take.
    fn calibrate_on_learners<T: TrainBatch>(&mut self, batches: Vec<T>) -> Result<Vec<Vec<f32>>> {
        let n = self.graph.stats_len;
        let Engine { devices, evaluator, graph, cfg, .. } = self;
        let dev = &mut devices[0];
        let ev = evaluator.as_mut().ok_or_else(|| ReplicaError::Config("evaluator".into()))?;
        let ids: Vec<usize> = dev.learners.iter().map(|l| l.id).collect();
        if ev.calibrate_learners.as_ref().is_none_or(|(made_for, _)| *made_for != ids) {
            // Made afresh when the tuner has changed the learners (their backends with them).
            ev.calibrate_learners = None;
            let mut made = Vec::with_capacity(ids.len());
            for l in &dev.learners {
                made.push((
                    Executor::new(&l.backend, graph, cfg.batch_size, Mode::Calibrate)?,
                    l.backend.alloc(n.max(1))?,
                ));
            }
            ev.calibrate_learners = Some((ids, made));
        }
        let Some((_, execs)) = ev.calibrate_learners.as_mut() else {
            return Err(ReplicaError::Config("calibration programs".into()));
        };
        let k = execs.len();
        // z was last written on the device's stream.
        let z_ready = dev.backend.record()?;
        let z = &dev.central.z;
        let count = batches.len();
        let mut shares: Vec<Vec<(usize, T)>> = (0..k).map(|_| vec![]).collect();
        for (i, b) in batches.into_iter().enumerate() {
            shares[i % k].push((i, b));
        }
        type Item<'a, B, T> =
            ((&'a mut Learner<B>, &'a mut (Executor<B>, <B as crossbow_kernels::Storage>::Buffer)), Vec<(usize, T)>);
        let work = |((l, (ex, state)), share): Item<'_, B, T>| -> Result<Vec<(usize, Vec<f32>)>> {
            l.backend.wait(&z_ready)?;
            share.iter().map(|(i, b)| Ok((*i, batch_stats(&l.backend, ex, z, state, b, n)?))).collect()
        };
        let items: Vec<Item<'_, B, T>> = dev.learners.iter_mut().zip(execs.iter_mut()).zip(shares).collect();
        let parts = match &dev.pool {
            Some(p) => p.install(|| items.into_par_iter().map(work).collect::<Result<Vec<_>>>())?,
            None => items.into_iter().map(work).collect::<Result<Vec<_>>>()?,
        };
        let mut per_batch = vec![vec![]; count];
        for (i, st) in parts.into_iter().flatten() {
            per_batch[i] = st;
        }
        Ok(per_batch)
    }

    /// The batch-norm statistics [`Engine::recalibrate`] measured on `z`, while no iteration
    /// has run since.
    pub fn calibrated_state(&self) -> Option<&[f32]> {
        match self.evaluator.as_ref()?.calibrated.as_ref()? {
            (it, st) if *it == self.iteration => Some(st),
            _ => None,
        }
    }

    fn ensure_evaluator(&mut self) -> Result<()> {
        if self.evaluator.is_none() {
            let be = &self.devices[0].backend;
            let st = be.alloc(self.graph.stats_len.max(1))?;
            self.evaluator = Some(Evaluator {
                execs: vec![],
                state: st,
                calibrate: None,
                calibrate_learners: None,
                calibrated: None,
                params: None,
            });
        }
        Ok(())
    }

    /// Test loss and accuracy of the central model (device 0's copy), with the batch-norm
    /// statistics recalibrated on `z` by [`Engine::recalibrate`] since the last iteration, or
    /// else the running statistics averaged over all learners. With several ranks it is a
    /// collective and the test set is sharded: rank `r` of `n` evaluates batches `r, r + n,
    /// ...` and the sums of losses, correct answers and samples are added over the ranks
    /// (every rank returns the same result; the correct count is exactly the one-process
    /// count, the mean loss may differ from it in the last bits, its sum being in another
    /// order).
    pub fn evaluate(&mut self, data: &mut dyn EvalSource) -> Result<EvalResult> {
        self.ensure_evaluator()?;
        let state = match self.calibrated_state() {
            Some(st) => st.to_vec(),
            None if self.eval_first_learner => self.first_learner_state()?,
            None => self.mean_state(None)?,
        };
        self.evaluate_params(false, &state, data)
    }

    /// Test loss and accuracy of learner `j` of device `d` (of this rank) on its own: its
    /// parameters with its own batch-norm running statistics, on the whole test set (not a
    /// collective: with several ranks each evaluates its own learners). For diagnostics: how
    /// good each learner is against the central model.
    pub fn evaluate_learner(&mut self, d: usize, j: usize, data: &mut dyn EvalSource) -> Result<EvalResult> {
        self.ensure_evaluator()?;
        let n = self.graph.stats_len;
        let l = self.learner(d, j).ok_or_else(|| ReplicaError::Config(format!("no learner {j} on device {d}")))?;
        // Its stream may still be writing the parameters.
        l.backend.synchronize()?;
        let mut state = vec![0.0f32; n];
        if n > 0 {
            l.backend.download(View::new(&l.replica.state, 0..n)?, &mut state)?;
        }
        // Through the host into a buffer of device 0, where the evaluation programs live (the
        // learner may be on another GPU).
        let params = self.learner_params(d, j)?;
        let be = &self.devices[0].backend;
        let ev = self.evaluator.as_mut().ok_or_else(|| ReplicaError::Config("evaluator".into()))?;
        if ev.params.is_none() {
            ev.params = Some(be.alloc(params.len().max(1))?);
        }
        if let Some(buf) = ev.params.as_mut() {
            be.upload(&params, ViewMut::new(buf, 0..params.len())?)?;
        }
        self.evaluate_params(true, &state, data)
    }

    /// Evaluates `z` of device 0 (sharded over the ranks) or, with `learner`, the parameters
    /// uploaded into the evaluator's own buffer (this rank alone), with batch-norm statistics
    /// `state`.
    fn evaluate_params(&mut self, learner: bool, state: &[f32], data: &mut dyn EvalSource) -> Result<EvalResult> {
        let dev = &self.devices[0];
        let be = &dev.backend;
        let ev = self.evaluator.as_mut().ok_or_else(|| ReplicaError::Config("evaluator".into()))?;
        if !state.is_empty() {
            be.upload(state, ViewMut::new(&mut ev.state, 0..state.len())?)?;
        }
        let (mut loss, mut correct, mut n) = (0.0f64, 0usize, 0usize);
        let graph = &self.graph;
        let params = match (&ev.params, learner) {
            (Some(p), true) => p,
            (None, true) => return Err(ReplicaError::Config("learner evaluation without its parameters".into())),
            (_, false) => &dev.central.z,
        };
        let (rank, ranks) = if learner { (0, 1) } else { (self.world.rank(), self.world.size().max(1)) };
        let mut batch_no = 0usize;
        let mut total = 0usize;
        data.for_each_batch(self.cfg.eval_batch_size, &mut |images, labels| {
            let b = labels.len();
            let mine = batch_no % ranks == rank;
            batch_no += 1;
            total += b;
            if b == 0 || !mine {
                return Ok(());
            }
            let pos = match ev.execs.iter().position(|e| e.batch() == b) {
                Some(p) => p,
                None => {
                    ev.execs.push(Executor::new(be, graph, b, Mode::Eval)?);
                    ev.execs.len() - 1
                }
            };
            let ex = &mut ev.execs[pos];
            ex.upload_batch(be, images, labels)?;
            ex.run(be, params, None, &mut ev.state, 0)?;
            let (l, c) = ex.loss_stats(be)?;
            loss += l;
            correct += c;
            n += b;
            Ok(())
        })?;
        if ranks > 1 {
            let mut sums = [loss, correct as f64, n as f64];
            self.world.all_reduce_sum_f64(&mut sums)?;
            (loss, correct, n) = (sums[0], sums[1] as usize, sums[2] as usize);
        }
        if total == 0 || n == 0 {
            return Err(ReplicaError::Data("the test set is empty".into()));
        }
        Ok(EvalResult { loss: loss / n as f64, accuracy: correct as f64 / n as f64, samples: n })
    }
}

/// One recalibration batch through `z` in training mode, without gradients: its batch
/// statistics (the first `n` values of the state it writes).
fn batch_stats<B: Backend, T: TrainBatch>(
    be: &B,
    ex: &mut Executor<B>,
    z: &B::Buffer,
    state: &mut B::Buffer,
    b: &T,
    n: usize,
) -> Result<Vec<f32>> {
    ex.upload_batch(be, b.images(), b.labels())?;
    ex.run(be, z, None, state, 0)?;
    let mut out = vec![0.0f32; n];
    be.download(View::new(state, 0..n)?, &mut out)?;
    Ok(out)
}
