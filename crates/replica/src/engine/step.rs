//! One iteration: every learner computes and steps on its own batch, every device reduces,
//! the all-reduce sums across devices, and every device updates its central model.

use std::time::Instant;

use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::{Backend, View, ViewMut};
use rayon::prelude::*;
use serde::Serialize;

use super::{BnGroup, DeviceState, Engine, Learner, LossRead, TrainBatch};
use crate::error::{ReplicaError, Result};
use crate::exec::{GroupMember, group_batch_norm, mix};
use crate::sync::{LearnerRef, StepInfo, Synchroniser};

/// What one iteration did.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct IterationRecord {
    /// Iterations completed, this one included (the first record has 1).
    pub iteration: u64,
    /// Epochs completed at the end of the iteration.
    pub epoch: f64,
    /// Learning rate used by this iteration, after the schedule.
    pub lr: f64,
    /// Mean training loss over all learners' batches (of every rank) of iteration
    /// `loss_iteration`: this one, or with [`LossRead::Lagged`] the one before (0 when
    /// `loss_images` is 0).
    pub loss: f64,
    /// Training accuracy over the same batches.
    pub accuracy: f64,
    /// The iteration (completed count) whose batches `loss` and `accuracy` are of: this
    /// record's, or with [`LossRead::Lagged`] the one before (0: none yet). After
    /// [`IterationRecord::add_losses`] they cover several iterations, up to this one.
    pub loss_iteration: u64,
    /// Images `loss` and `accuracy` cover (0 when no loss had been read yet).
    pub loss_images: usize,
    /// Training images processed by all learners together in this iteration (of every rank).
    pub images: usize,
    /// Wall time of the whole iteration (every device, the all-reduce, the central update).
    pub seconds: f64,
    /// Each device's own compute time: its learners' forward, backward and local steps and
    /// its reduction (the iteration's time for devices whose work is asynchronous, GPUs).
    pub device_seconds: Vec<f64>,
    /// Learners per device during the iteration (this rank's devices).
    pub learners: Vec<usize>,
    /// Seconds of the all-reduce between ranks (0 in a single process): download of the
    /// process total, the collective, upload to every device.
    #[serde(default)]
    pub rank_allreduce_seconds: f64,
}

impl<B: Backend> Engine<B> {
    /// Runs one iteration: `batches` must hold one batch per learner of this rank (device
    /// order, then learner order). `samples_per_epoch` converts progress into epochs for the
    /// schedule. With several ranks it is a collective; see [`Engine::sync_layout`] for which
    /// batches of the global order are this rank's.
    pub fn step<T: TrainBatch>(&mut self, batches: Vec<T>, samples_per_epoch: usize) -> Result<IterationRecord> {
        self.sync_layout()?;
        let k = self.learners();
        if batches.len() != k {
            return Err(ReplicaError::Config(format!("iteration needs {k} batches, got {}", batches.len())));
        }
        let start = Instant::now();
        let epoch = self.epoch(samples_per_epoch);
        let lr = self.cfg.schedule.lr(self.cfg.sgd.lr as f64, epoch);
        let stage = self.cfg.schedule.stage(epoch);
        let info = StepInfo {
            iteration: self.iteration,
            epoch,
            sgd: SgdConfig { lr: lr as f32, ..self.cfg.sgd },
            base_lr: self.cfg.sgd.lr,
            learners: self.world_learners(),
            lr_dropped: stage > self.stage,
        };
        let len = self.graph.param_len;
        let seed = mix(self.cfg.seed, self.iteration);

        // Hand out the batches, device by device.
        let mut per_device: Vec<Vec<T>> = Vec::with_capacity(self.devices.len());
        let mut it = batches.into_iter();
        for dev in &self.devices {
            per_device.push(it.by_ref().take(dev.learners.len()).collect());
        }

        // Phase A: every learner computes and steps; every device reduces.
        let sync = &*self.sync;
        let group_bn = self.bn_group == BnGroup::Device && self.graph.stats_len > 0;
        let results: Vec<Result<f64>> = if self.devices.len() == 1 {
            // One device: run it on this thread.
            let bs = per_device.pop().unwrap_or_default();
            vec![self.devices[0].run_learners(sync, &info, bs, seed, len, group_bn)]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .devices
                    .iter_mut()
                    .zip(per_device)
                    .map(|(dev, bs)| {
                        let name = format!("crossbow-{}", dev.device);
                        std::thread::Builder::new()
                            .name(name)
                            .spawn_scoped(s, move || dev.run_learners(sync, &info, bs, seed, len, group_bn))
                    })
                    .collect();
                // A thread that could not be started is an error, not a panic; the threads that
                // did start are joined all the same.
                handles
                    .into_iter()
                    .map(|h| match h {
                        Ok(h) => h
                            .join()
                            .unwrap_or_else(|_| Err(ReplicaError::DeviceThread("a device thread panicked".into()))),
                        Err(e) => Err(ReplicaError::DeviceThread(format!("cannot start a device thread: {e}"))),
                    })
                    .collect()
            })
        };
        let mut device_seconds = results.into_iter().collect::<Result<Vec<f64>>>()?;

        // Phase B: all-reduce the contributions.
        {
            let mut parts: Vec<(&B, &mut B::Buffer)> =
                self.devices.iter_mut().map(|d| (&d.backend, &mut d.contribution)).collect();
            self.allreduce.all_reduce_sum(&mut parts, len)?;
        }
        // Then across ranks: the process total (identical on every device now) goes through
        // the host once per process, and every device receives the same global total.
        // (NCCL's communicator spans every rank's GPUs: its all-reduce above was global.)
        let mut rank_allreduce_seconds = 0.0;
        if self.world.size() > 1 && !self.allreduce.spans_ranks() {
            let t0 = Instant::now();
            let mut host = vec![0.0f32; len];
            let first = &self.devices[0];
            first.backend.download(View::new(&first.contribution, 0..len)?, &mut host)?;
            self.world.all_reduce_sum_f32(&mut host)?;
            for dev in &mut self.devices {
                dev.backend.upload(&host, ViewMut::new(&mut dev.contribution, 0..len)?)?;
            }
            rank_allreduce_seconds = t0.elapsed().as_secs_f64();
        }

        // Phase C: every device updates its central model, then its learners (on their own
        // streams, after the update).
        for dev in &mut self.devices {
            sync.apply_device(&dev.backend, &info, &mut dev.contribution, &mut dev.central, len)?;
            if !sync.after_apply_needed(&info) {
                continue;
            }
            let z_new = dev.backend.record()?;
            for l in &mut dev.learners {
                l.backend.wait(&z_new)?;
                let (be, lb) = l.sync_view();
                sync.after_apply(be, &info, lb, &dev.central.z, len)?;
            }
        }

        // Losses: this iteration's (waiting for the devices), or the previous iteration's
        // while this one's are on their way (`LossRead::Lagged`).
        let mut t = match self.loss_read {
            LossRead::Now => self.read_losses_now(epoch)?,
            LossRead::Lagged => self.read_losses_lagged(epoch)?,
        };
        let mut images = self.learners() * self.program.batch;
        // Every rank sees the same totals, so every rank stops on a diverged learner of any
        // rank (a NaN loss makes the sum NaN everywhere).
        self.reduce_totals(&mut t, &mut images)?;
        if let Some(why) = t.bad {
            return Err(ReplicaError::Diverged(why));
        }
        let seconds = start.elapsed().as_secs_f64();
        if !self.factory.synchronous() {
            device_seconds.iter_mut().for_each(|s| *s = seconds);
        }
        self.iteration += 1;
        self.samples += images as u64;
        self.stage = stage;
        Ok(IterationRecord {
            iteration: self.iteration,
            epoch: self.epoch(samples_per_epoch),
            lr,
            loss: t.loss / t.images.max(1) as f64,
            accuracy: t.correct as f64 / t.images.max(1) as f64,
            loss_iteration: t.iteration,
            loss_images: t.images,
            images,
            seconds,
            device_seconds,
            learners: self.layout(),
            rank_allreduce_seconds,
        })
    }
}

impl<B: Backend> DeviceState<B> {
    /// The device's part of an iteration: every learner's forward, backward and local step
    /// (concurrently), then the device reduction. Returns its host time.
    #[allow(clippy::too_many_arguments)]
    fn run_learners<T: TrainBatch>(
        &mut self,
        sync: &dyn Synchroniser<B>,
        info: &StepInfo,
        batches: Vec<T>,
        seed: u64,
        len: usize,
        group_bn: bool,
    ) -> Result<f64> {
        let start = Instant::now();
        let z = &self.central.z;
        // On a GPU every learner has its own stream: forward and backward need nothing from
        // other streams but the previous reduction (which may read the gradients); the
        // learner step reads z (written on the device's stream) and the device reduction
        // reads what the learner steps wrote. Events order exactly that.
        let z_ready = self.backend.record()?;
        let reduced = self.reduced.take();
        let done = if group_bn && self.learners.len() > 1 {
            self.run_grouped(sync, info, batches, seed, len, &z_ready, reduced.as_ref())?
        } else {
            let work = |(l, b): (&mut Learner<B>, T)| -> Result<B::Event> {
                l.train_step(sync, info, &b, z, &z_ready, reduced.as_ref(), seed, len)
            };
            let items: Vec<(&mut Learner<B>, T)> = self.learners.iter_mut().zip(batches).collect();
            match &self.pool {
                Some(p) if items.len() > 1 => {
                    p.install(|| items.into_par_iter().map(work).collect::<Result<Vec<_>>>())?
                }
                _ => items.into_iter().map(work).collect::<Result<Vec<_>>>()?,
            }
        };
        for e in &done {
            self.backend.wait(e)?;
        }
        let refs: Vec<LearnerRef<'_, B>> = self
            .learners
            .iter()
            .map(|l| LearnerRef {
                index: l.slot,
                params: &l.replica.params,
                grads: &l.replica.grads,
                sync_state: &l.sync_buffers,
            })
            .collect();
        sync.reduce_device(&self.backend, info, &refs, &self.central, &mut self.contribution, len)?;
        self.reduced = Some(self.backend.record()?);
        Ok(start.elapsed().as_secs_f64())
    }

    /// The learners' forward and backward passes when they normalise together
    /// ([`crate::engine::BnGroup::Device`]): in lockstep from one batch-norm layer to the
    /// next (each segment concurrently, as usual), each batch-norm layer over all their
    /// batches at once ([`crate::exec::group_batch_norm`]); then each learner's step.
    #[allow(clippy::too_many_arguments)]
    fn run_grouped<T: TrainBatch>(
        &mut self,
        sync: &dyn Synchroniser<B>,
        info: &StepInfo,
        batches: Vec<T>,
        seed: u64,
        len: usize,
        z_ready: &B::Event,
        reduced: Option<&B::Event>,
    ) -> Result<Vec<B::Event>> {
        for (l, b) in self.learners.iter_mut().zip(&batches) {
            if let Some(r) = reduced {
                l.backend.wait(r)?;
            }
            l.exec.upload_batch(&l.backend, b.images(), b.labels())?;
        }
        let end = self.learners.first().map_or(0, |l| l.exec.program().instrs.len());
        let mut at = 0usize;
        loop {
            let segment = |l: &mut Learner<B>| -> Result<usize> {
                let s = mix(seed, l.id as u64);
                l.exec.run_until_batch_norm(
                    &l.backend,
                    &l.replica.params,
                    Some(&mut l.replica.grads),
                    &mut l.replica.state,
                    s,
                    at,
                )
            };
            let stops: Vec<usize> = match &self.pool {
                Some(p) => p.install(|| self.learners.par_iter_mut().map(segment).collect::<Result<Vec<_>>>())?,
                None => self.learners.iter_mut().map(segment).collect::<Result<Vec<_>>>()?,
            };
            let stop = stops.first().copied().unwrap_or(end);
            if stops.iter().any(|&s| s != stop) {
                return Err(ReplicaError::Config(format!("grouped batch norm: learners stopped at {stops:?}")));
            }
            if stop >= end {
                break;
            }
            let mut members: Vec<GroupMember<'_, B>> = self
                .learners
                .iter_mut()
                .map(|l| GroupMember {
                    be: &l.backend,
                    exec: &mut l.exec,
                    params: &l.replica.params,
                    grads: &mut l.replica.grads,
                    state: &mut l.replica.state,
                })
                .collect();
            group_batch_norm(&mut members, stop)?;
            at = stop + 1;
        }
        let z = &self.central.z;
        self.learners.iter_mut().map(|l| l.finish_step(sync, info, z, z_ready, len)).collect()
    }
}
