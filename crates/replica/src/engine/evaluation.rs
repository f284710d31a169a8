//! Evaluation of the central model `z` on the test set, with batch-norm statistics either
//! averaged over the learners or recalibrated on `z` itself.

use crossbow_kernels::{Backend, View, ViewMut};
use serde::Serialize;

use super::{Engine, EvalSource, TrainBatch};
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

pub(super) struct Evaluator<B: Backend> {
    execs: Vec<Executor<B>>,
    state: B::Buffer,
    /// The recalibration program (at the training batch size), made on first use.
    calibrate: Option<Executor<B>>,
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
        let dev = &self.devices[0];
        let be = &dev.backend;
        let ev = self.evaluator.as_mut().ok_or_else(|| ReplicaError::Config("evaluator".into()))?;
        if ev.calibrate.is_none() {
            ev.calibrate = Some(Executor::new(be, &self.graph, self.cfg.batch_size, Mode::Calibrate)?);
        }
        let ex = ev.calibrate.as_mut().ok_or_else(|| ReplicaError::Config("calibration program".into()))?;
        let mut acc = vec![0.0f64; n];
        let mut tmp = vec![0.0f32; n];
        for b in &batches {
            ex.upload_batch(be, b.images(), b.labels())?;
            ex.run(be, &dev.central.z, None, &mut ev.state, 0)?;
            be.download(View::new(&ev.state, 0..n)?, &mut tmp)?;
            for (a, v) in acc.iter_mut().zip(&tmp) {
                *a += *v as f64;
            }
        }
        let mean = acc.into_iter().map(|a| (a / batches.len() as f64) as f32).collect();
        ev.calibrated = Some((self.iteration, mean));
        Ok(())
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
            self.evaluator =
                Some(Evaluator { execs: vec![], state: st, calibrate: None, calibrated: None, params: None });
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
