//! The engine: k learners spread over D devices, one iteration at a time.
//!
//! Each device holds its learners (a replica, an executor and the synchroniser's buffers
//! each, bound to the learner's own backend: a worker thread on a CPU device, a stream on a
//! GPU), a copy of the central model `z`, and a contribution buffer for the all-reduce. An
//! iteration hands every learner its own batch; learners on a device run concurrently and
//! never wait for one another during forward/backward; then the [`Synchroniser`] runs (see
//! [`crate::sync`] for the call sequence). Learners can be added (as a copy of `z` with zero
//! momentum) and removed between iterations, which is how the auto-tuner acts.

use std::sync::Arc;
use std::time::Instant;

use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::{Backend, CpuBackend, View, ViewMut};
use crossbow_tensor::Device;
use rayon::prelude::*;
use serde::Serialize;

use crate::error::{ReplicaError, Result};
use crate::exec::{Executor, mix};
use crate::graph::Graph;
use crate::plan::{MemoryPlan, plan};
use crate::program::{Mode, Program, lower};
use crate::replica::{Replica, initial_params, initial_state};
use crate::schedule::Schedule;
use crate::sync::{AllReduce, Central, LearnerBuffers, LearnerRef, StepInfo, Synchroniser};

/// Makes backends for the engine's devices.
pub trait DeviceFactory<B: Backend>: Send + Sync {
    /// The devices, in order.
    fn devices(&self) -> Vec<Device>;
    /// A backend for one learner of device `d` when `learners` learners share the device.
    fn learner_backend(&self, d: usize, learners: usize) -> Result<B>;
    /// The backend for device-level work (synchronisation, evaluation) on device `d`.
    fn device_backend(&self, d: usize) -> Result<B>;
    /// How many of device `d`'s learners may run at once on host threads (the CPU cores of a
    /// CPU device; 1 for a GPU, whose learners run concurrently on streams).
    fn host_threads(&self, d: usize) -> usize;
    /// Device memory available to learners, in bytes, if known (the tuner's budget).
    fn memory_budget(&self, _d: usize) -> Option<u64> {
        None
    }
    /// Whether a learner's backend depends on how many learners share the device (a CPU
    /// device splits its threads among them), so learners get new backends when the count
    /// changes.
    fn rebind_on_change(&self) -> bool {
        false
    }
}

/// CPU devices: `count` devices of `threads` threads each. A device's learners share its
/// threads; a device with fewer learners than threads gives each learner several threads for
/// its ops.
#[derive(Clone, Debug)]
pub struct CpuDevices {
    pub count: usize,
    pub threads: usize,
}

impl DeviceFactory<CpuBackend> for CpuDevices {
    fn devices(&self) -> Vec<Device> {
        (0..self.count).map(Device::Cpu).collect()
    }

    fn learner_backend(&self, d: usize, learners: usize) -> Result<CpuBackend> {
        Ok(CpuBackend::with_threads(d, (self.threads / learners.max(1)).max(1))?)
    }

    fn device_backend(&self, d: usize) -> Result<CpuBackend> {
        Ok(CpuBackend::with_threads(d, self.threads.max(1))?)
    }

    fn host_threads(&self, _d: usize) -> usize {
        self.threads.max(1)
    }

    fn rebind_on_change(&self) -> bool {
        true
    }
}

/// One training batch: images `[batch, c, h, w]` flattened and class-index labels.
pub trait TrainBatch: Send {
    fn images(&self) -> &[f32];
    fn labels(&self) -> &[f32];
}

/// A stream of training batches.
pub trait TrainSource {
    type Batch: TrainBatch;
    /// The next batch.
    fn next_batch(&mut self) -> Result<Self::Batch>;
    /// Samples in one epoch (one pass over the training set by all learners together).
    fn samples_per_epoch(&self) -> usize;
}

/// What an [`EvalSource`] calls for every batch: `f(images, labels)`.
pub type EvalVisitor<'a> = dyn FnMut(&[f32], &[f32]) -> Result<()> + 'a;

/// The test set, in batches.
pub trait EvalSource {
    /// Number of test samples.
    fn samples(&self) -> usize;
    /// Calls `f(images, labels)` for every batch of at most `batch` samples.
    fn for_each_batch(&mut self, batch: usize, f: &mut EvalVisitor<'_>) -> Result<()>;
}

/// The engine's fixed settings.
#[derive(Clone, Debug, Serialize)]
pub struct EngineConfig {
    /// Batch size per learner.
    pub batch_size: usize,
    /// Base learning rate, momentum, weight decay, Nesterov.
    pub sgd: SgdConfig,
    pub schedule: Schedule,
    pub seed: u64,
    /// Batch size for evaluation.
    pub eval_batch_size: usize,
}

/// One learner: a replica and an executor on the learner's own backend.
pub struct Learner<B: Backend> {
    id: usize,
    slot: usize,
    backend: B,
    replica: Replica<B>,
    exec: Executor<B>,
    extra: Vec<B::Buffer>,
    loss: (f64, usize),
}

impl<B: Backend> Learner<B> {
    /// The learner's global id (stable while it lives).
    pub fn id(&self) -> usize {
        self.id
    }

    /// The learner's slot in `0..k`, the index a synchroniser sees (a removed learner's slot
    /// goes to the next learner added).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The learner's replica.
    pub fn replica(&self) -> &Replica<B> {
        &self.replica
    }

    /// The learner's backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }
}

struct DeviceState<B: Backend> {
    device: Device,
    backend: B,
    learners: Vec<Learner<B>>,
    central: Central<B>,
    contribution: B::Buffer,
    /// Recorded on the device's stream after the last device reduction: a learner's next
    /// forward/backward waits for it, since the reduction may read its gradients.
    reduced: Option<B::Event>,
    pool: Option<rayon::ThreadPool>,
}

/// What one iteration did.
#[derive(Clone, Debug, Serialize)]
pub struct IterationRecord {
    pub iteration: u64,
    /// Epochs completed at the end of the iteration.
    pub epoch: f64,
    pub lr: f64,
    /// Mean training loss over all learners' batches.
    pub loss: f64,
    /// Training accuracy over all learners' batches.
    pub accuracy: f64,
    pub images: usize,
    pub seconds: f64,
    /// Learners per device during the iteration.
    pub learners: Vec<usize>,
}

/// The central model's test loss and accuracy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct EvalResult {
    pub loss: f64,
    pub accuracy: f64,
    pub samples: usize,
}

/// Learners and buffers of the engine, for reports and the tuner.
#[derive(Clone, Debug, Serialize)]
pub struct Footprint {
    /// Bytes of one learner: replica, synchroniser buffers, planned activations, workspace.
    pub bytes_per_learner: u64,
    /// Activation bytes per learner without the memory plan.
    pub unplanned_activation_bytes: u64,
    /// Activation bytes per learner with the plan.
    pub planned_activation_bytes: u64,
    /// Bytes per device besides its learners (central model, synchroniser, evaluation).
    pub fixed_bytes_per_device: u64,
}

/// The multi-learner engine.
pub struct Engine<B: Backend> {
    graph: Arc<Graph>,
    program: Arc<Program>,
    plan: Arc<MemoryPlan>,
    cfg: EngineConfig,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    allreduce: Box<dyn AllReduce<B>>,
    devices: Vec<DeviceState<B>>,
    next_id: usize,
    iteration: u64,
    samples: u64,
    stage: usize,
    evaluator: Option<Evaluator<B>>,
}

struct Evaluator<B: Backend> {
    execs: Vec<Executor<B>>,
    state: B::Buffer,
    /// The recalibration program (at the training batch size), made on first use.
    calibrate: Option<Executor<B>>,
    /// Batch-norm statistics recalibrated on `z` at iteration `.0`, if any.
    calibrated: Option<(u64, Vec<f32>)>,
}

impl<B: Backend> Engine<B> {
    /// An engine for `graph` with `learners[d]` learners on device `d` of `factory`, every
    /// replica starting from the same initial parameters (from `cfg.seed`).
    pub fn new(
        graph: Graph,
        cfg: EngineConfig,
        factory: Box<dyn DeviceFactory<B>>,
        sync: Box<dyn Synchroniser<B>>,
        allreduce: Box<dyn AllReduce<B>>,
        learners: &[usize],
    ) -> Result<Self> {
        cfg.sgd.validate()?;
        cfg.schedule.validate().map_err(ReplicaError::Config)?;
        let devices = factory.devices();
        if devices.is_empty() {
            return Err(ReplicaError::Config("no devices".into()));
        }
        if learners.len() != devices.len() || learners.contains(&0) {
            return Err(ReplicaError::Config(format!(
                "need at least one learner on each of the {} devices, got {learners:?}",
                devices.len()
            )));
        }
        if cfg.eval_batch_size == 0 {
            return Err(ReplicaError::Config("evaluation batch size must be at least 1".into()));
        }
        let program = Arc::new(lower(&graph, cfg.batch_size, Mode::Train)?);
        let plan = Arc::new(plan(&program));
        let graph = Arc::new(graph);
        let init = initial_params(&graph, cfg.seed);
        let state = initial_state(&graph);
        let len = graph.param_len;
        let mut engine = Engine {
            graph,
            program,
            plan,
            cfg,
            factory,
            sync,
            allreduce,
            devices: vec![],
            next_id: 0,
            iteration: 0,
            samples: 0,
            stage: 0,
            evaluator: None,
        };
        for (d, dev) in devices.into_iter().enumerate() {
            let backend = engine.factory.device_backend(d)?;
            let mut z = backend.alloc(len.max(1))?;
            backend.upload(&init, ViewMut::new(&mut z, 0..len)?)?;
            let extra =
                (0..engine.sync.device_buffers()).map(|_| backend.alloc(len.max(1))).collect::<Result<Vec<_>, _>>()?;
            let contribution = backend.alloc(len.max(1))?;
            let threads = engine.factory.host_threads(d);
            let pool = if threads > 1 {
                Some(
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .thread_name(move |i| format!("crossbow-dev{d}-learner{i}"))
                        .build()
                        .map_err(|e| ReplicaError::Config(format!("cannot start {threads} threads for {dev}: {e}")))?,
                )
            } else {
                None
            };
            engine.devices.push(DeviceState {
                device: dev,
                backend,
                learners: vec![],
                central: Central { z, extra },
                contribution,
                reduced: None,
                pool,
            });
            for _ in 0..learners[d] {
                let l = engine.new_learner(d, learners[d], &init, &state)?;
                engine.devices[d].learners.push(l);
            }
        }
        engine.learners_changed()?;
        Ok(engine)
    }

    /// Tells the synchroniser the learner count and lets it reset its view of `z`'s history
    /// on every device (at the start, and after learners are added or removed).
    fn learners_changed(&mut self) -> Result<()> {
        let k = self.learners();
        self.sync.set_learners(k);
        let len = self.graph.param_len;
        let sync = &*self.sync;
        for dev in &mut self.devices {
            for l in &dev.learners {
                l.backend.synchronize()?;
            }
            dev.backend.synchronize()?;
            let mut lbs: Vec<LearnerBuffers<'_, B>> = dev
                .learners
                .iter_mut()
                .map(|l| LearnerBuffers {
                    index: l.slot,
                    params: &mut l.replica.params,
                    grads: &l.replica.grads,
                    velocity: &mut l.replica.velocity,
                    extra: &mut l.extra,
                })
                .collect();
            sync.reset(&dev.backend, &mut dev.central, &mut lbs, len)?;
            dev.backend.synchronize()?;
            dev.reduced = None;
        }
        Ok(())
    }

    /// The smallest slot in `0..` no learner holds.
    fn free_slot(&self) -> usize {
        let used: Vec<usize> = self.devices.iter().flat_map(|d| d.learners.iter().map(|l| l.slot)).collect();
        (0..).find(|s| !used.contains(s)).unwrap_or(used.len())
    }

    fn new_learner(&mut self, d: usize, on_device: usize, params: &[f32], state: &[f32]) -> Result<Learner<B>> {
        let backend = self.factory.learner_backend(d, on_device)?;
        let replica = Replica::from_host(&backend, params, state)?;
        let exec = Executor::from_parts(&backend, &self.graph, Arc::clone(&self.program), Arc::clone(&self.plan))?;
        let len = self.graph.param_len.max(1);
        let extra = (0..self.sync.learner_buffers()).map(|_| backend.alloc(len)).collect::<Result<Vec<_>, _>>()?;
        let id = self.next_id;
        self.next_id += 1;
        let slot = self.free_slot();
        Ok(Learner { id, slot, backend, replica, exec, extra, loss: (0.0, 0) })
    }

    /// The model.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The settings.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The synchroniser's name and settings.
    pub fn synchroniser(&self) -> (&str, crate::sync::Settings) {
        (self.sync.name(), self.sync.settings())
    }

    /// The devices.
    pub fn devices(&self) -> Vec<Device> {
        self.devices.iter().map(|d| d.device).collect()
    }

    /// Learners per device.
    pub fn layout(&self) -> Vec<usize> {
        self.devices.iter().map(|d| d.learners.len()).collect()
    }

    /// Total learners.
    pub fn learners(&self) -> usize {
        self.devices.iter().map(|d| d.learners.len()).sum()
    }

    /// Iterations run so far.
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// Training samples consumed so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The learning rate at the current progress.
    pub fn current_lr(&self, samples_per_epoch: usize) -> f64 {
        self.cfg.schedule.lr(self.cfg.sgd.lr as f64, self.epoch(samples_per_epoch))
    }

    fn epoch(&self, per_epoch: usize) -> f64 {
        self.samples as f64 / per_epoch.max(1) as f64
    }

    /// Memory figures per learner and per device.
    pub fn footprint(&self) -> Footprint {
        let len = self.graph.param_len as u64;
        let act = self.plan.planned_len() as u64 * 4;
        let ws = self
            .devices
            .first()
            .and_then(|d| d.learners.first())
            .map(|l| l.exec.footprint().workspace as u64 * 4)
            .unwrap_or(0);
        let small = (self.program.batch + 2 + self.graph.stats_len) as u64 * 4;
        let replica = Replica::<B>::bytes(&self.graph) as u64;
        let extra = self.sync.learner_buffers() as u64 * len * 4;
        Footprint {
            bytes_per_learner: replica + extra + act + ws + small,
            unplanned_activation_bytes: self.plan.unplanned_len as u64 * 4,
            planned_activation_bytes: act,
            fixed_bytes_per_device: (2 + self.sync.device_buffers() as u64) * len * 4,
        }
    }

    /// A learner of device `d`, by position.
    pub fn learner(&self, d: usize, j: usize) -> Option<&Learner<B>> {
        self.devices.get(d)?.learners.get(j)
    }

    /// The central model of device `d`, downloaded.
    pub fn central_to_host(&self, d: usize) -> Result<Vec<f32>> {
        let dev = self.devices.get(d).ok_or_else(|| ReplicaError::Config(format!("no device {d}")))?;
        let len = self.graph.param_len;
        let mut v = vec![0.0; len];
        dev.backend.download(View::new(&dev.central.z, 0..len)?, &mut v)?;
        Ok(v)
    }

    /// The parameters of learner `j` of device `d`, downloaded.
    pub fn learner_params(&self, d: usize, j: usize) -> Result<Vec<f32>> {
        let l = self.learner(d, j).ok_or_else(|| ReplicaError::Config(format!("no learner {j} on device {d}")))?;
        l.replica.params_to_host(&l.backend, self.graph.param_len)
    }

    /// Adds a learner to device `d`: a copy of the device's central model with zero momentum
    /// and the device's mean batch-norm statistics. The learners of the device are given
    /// fresh backends sized for the new count.
    pub fn add_learner(&mut self, d: usize) -> Result<()> {
        let z = self.central_to_host(d)?;
        let state = self.mean_state(Some(d))?;
        let n = self.devices[d].learners.len() + 1;
        let l = self.new_learner(d, n, &z, &state)?;
        self.devices[d].learners.push(l);
        self.rebind(d)?;
        self.learners_changed()
    }

    /// Removes the most recently added learner of device `d` (never the last one).
    pub fn remove_learner(&mut self, d: usize) -> Result<()> {
        let dev = self.devices.get_mut(d).ok_or_else(|| ReplicaError::Config(format!("no device {d}")))?;
        if dev.learners.len() <= 1 {
            return Err(ReplicaError::Config(format!("{} has one learner left; it cannot be removed", dev.device)));
        }
        let newest = dev.learners.iter().enumerate().max_by_key(|(_, l)| l.id).map(|(i, _)| i).unwrap_or(0);
        // Its buffers may still be in use by its stream or read by the device's: wait first.
        dev.learners[newest].backend.synchronize()?;
        dev.backend.synchronize()?;
        dev.learners.remove(newest);
        self.rebind(d)?;
        self.learners_changed()
    }

    /// Gives device `d`'s learners backends for their current count. Buffers stay where they
    /// are: the device is the same, only the thread split (CPU) changes; executor workspaces
    /// grow if the new backend needs more.
    fn rebind(&mut self, d: usize) -> Result<()> {
        if !self.factory.rebind_on_change() {
            return Ok(());
        }
        let n = self.devices[d].learners.len();
        for j in 0..n {
            let be = self.factory.learner_backend(d, n)?;
            let l = &mut self.devices[d].learners[j];
            l.backend.synchronize()?;
            l.exec.ensure_workspace(&be)?;
            l.backend = be;
        }
        Ok(())
    }

    /// Mean batch-norm running statistics over the learners of device `d` (or of all devices).
    fn mean_state(&self, d: Option<usize>) -> Result<Vec<f32>> {
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
        Ok(acc.into_iter().map(|a| (a / count.max(1) as f64) as f32).collect())
    }

    /// Runs one iteration: `batches` must hold one batch per learner (device order, then
    /// learner order). `samples_per_epoch` converts progress into epochs for the schedule.
    pub fn step<T: TrainBatch>(&mut self, batches: Vec<T>, samples_per_epoch: usize) -> Result<IterationRecord> {
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
            learners: k,
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
        let results: Vec<Result<()>> = if self.devices.len() == 1 {
            // One device: run it on this thread.
            let bs = per_device.pop().unwrap_or_default();
            vec![self.devices[0].run_learners(sync, &info, bs, seed, len)]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .devices
                    .iter_mut()
                    .zip(per_device)
                    .map(|(dev, bs)| s.spawn(move || dev.run_learners(sync, &info, bs, seed, len)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(ReplicaError::Config("a device thread panicked".into()))))
                    .collect()
            })
        };
        results.into_iter().collect::<Result<Vec<()>>>()?;

        // Phase B: all-reduce the contributions.
        {
            let mut parts: Vec<(&B, &mut B::Buffer)> =
                self.devices.iter_mut().map(|d| (&d.backend, &mut d.contribution)).collect();
            self.allreduce.all_reduce_sum(&mut parts, len)?;
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
                let lb = LearnerBuffers {
                    index: l.slot,
                    params: &mut l.replica.params,
                    grads: &l.replica.grads,
                    velocity: &mut l.replica.velocity,
                    extra: &mut l.extra,
                };
                sync.after_apply(&l.backend, &info, lb, &dev.central.z, len)?;
            }
        }

        // Losses (this waits for the devices).
        let mut loss = 0.0;
        let mut correct = 0usize;
        let mut images = 0usize;
        for dev in &mut self.devices {
            for l in &mut dev.learners {
                l.loss = l.exec.loss_stats(&l.backend)?;
                if !l.loss.0.is_finite() {
                    return Err(ReplicaError::Diverged(format!(
                        "learner {} on {} has loss {} at iteration {} (epoch {epoch:.3}); lower the learning rate",
                        l.id, dev.device, l.loss.0, self.iteration
                    )));
                }
                loss += l.loss.0;
                correct += l.loss.1;
                images += self.cfg.batch_size;
            }
        }
        self.iteration += 1;
        self.samples += images as u64;
        self.stage = stage;
        Ok(IterationRecord {
            iteration: self.iteration,
            epoch: self.epoch(samples_per_epoch),
            lr,
            loss: loss / images as f64,
            accuracy: correct as f64 / images as f64,
            images,
            seconds: start.elapsed().as_secs_f64(),
            learners: self.layout(),
        })
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
            self.evaluator = Some(Evaluator { execs: vec![], state: st, calibrate: None, calibrated: None });
        }
        Ok(())
    }

    /// Test loss and accuracy of the central model (device 0's copy), with the batch-norm
    /// statistics recalibrated on `z` by [`Engine::recalibrate`] since the last iteration, or
    /// else the running statistics averaged over all learners.
    pub fn evaluate(&mut self, data: &mut dyn EvalSource) -> Result<EvalResult> {
        self.ensure_evaluator()?;
        let state = match self.calibrated_state() {
            Some(st) => st.to_vec(),
            None => self.mean_state(None)?,
        };
        let dev = &self.devices[0];
        let be = &dev.backend;
        let ev = self.evaluator.as_mut().ok_or_else(|| ReplicaError::Config("evaluator".into()))?;
        if !state.is_empty() {
            be.upload(&state, ViewMut::new(&mut ev.state, 0..state.len())?)?;
        }
        let (mut loss, mut correct, mut n) = (0.0f64, 0usize, 0usize);
        let graph = &self.graph;
        let z = &dev.central.z;
        data.for_each_batch(self.cfg.eval_batch_size, &mut |images, labels| {
            let b = labels.len();
            if b == 0 {
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
            ex.run(be, z, None, &mut ev.state, 0)?;
            let (l, c) = ex.loss_stats(be)?;
            loss += l;
            correct += c;
            n += b;
            Ok(())
        })?;
        if n == 0 {
            return Err(ReplicaError::Data("the test set is empty".into()));
        }
        Ok(EvalResult { loss: loss / n as f64, accuracy: correct as f64 / n as f64, samples: n })
    }
}

impl<B: Backend> DeviceState<B> {
    fn run_learners<T: TrainBatch>(
        &mut self,
        sync: &dyn Synchroniser<B>,
        info: &StepInfo,
        batches: Vec<T>,
        seed: u64,
        len: usize,
    ) -> Result<()> {
        let z = &self.central.z;
        // On a GPU every learner has its own stream: forward and backward need nothing from
        // other streams; the learner step reads z (written on the device's stream) and the
        // device reduction reads what the learner steps wrote. Events order exactly that.
        let z_ready = self.backend.record()?;
        let reduced = self.reduced.take();
        let work = |(l, b): (&mut Learner<B>, T)| -> Result<B::Event> {
            if let Some(r) = &reduced {
                l.backend.wait(r)?;
            }
            l.exec.upload_batch(&l.backend, b.images(), b.labels())?;
            l.exec.run(
                &l.backend,
                &l.replica.params,
                Some(&mut l.replica.grads),
                &mut l.replica.state,
                mix(seed, l.id as u64),
            )?;
            l.backend.wait(&z_ready)?;
            let lb = LearnerBuffers {
                index: l.slot,
                params: &mut l.replica.params,
                grads: &l.replica.grads,
                velocity: &mut l.replica.velocity,
                extra: &mut l.extra,
            };
            sync.learner_step(&l.backend, info, lb, z, len)?;
            Ok(l.backend.record()?)
        };
        let items: Vec<(&mut Learner<B>, T)> = self.learners.iter_mut().zip(batches).collect();
        let done = match &self.pool {
            Some(p) if items.len() > 1 => p.install(|| items.into_par_iter().map(work).collect::<Result<Vec<_>>>())?,
            _ => items.into_iter().map(work).collect::<Result<Vec<_>>>()?,
        };
        for e in &done {
            self.backend.wait(e)?;
        }
        let refs: Vec<LearnerRef<'_, B>> = self
            .learners
            .iter()
            .map(|l| LearnerRef { index: l.slot, params: &l.replica.params, grads: &l.replica.grads, extra: &l.extra })
            .collect();
        sync.reduce_device(&self.backend, info, &refs, &self.central, &mut self.contribution, len)?;
        self.reduced = Some(self.backend.record()?);
        Ok(())
    }
}
