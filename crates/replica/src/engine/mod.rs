//! The engine: k learners spread over D devices, one iteration at a time.
//!
//! Each device holds its learners (a replica, an executor and the synchroniser's buffers
//! each, bound to the learner's own backend: a worker thread on a CPU device, a stream on a
//! GPU), a copy of the central model `z`, and a contribution buffer for the all-reduce. An
//! iteration hands every learner its own batch; learners on a device run concurrently and
//! never wait for one another during forward/backward; then the [`Synchroniser`] runs (see
//! [`crate::sync`] for the call sequence). Learners can be added (as a copy of `z` with zero
//! momentum) and removed between iterations, which is how the auto-tuner acts.
//!
//! The parts, one file each: [`devices`] (what a device is: [`DeviceFactory`], CPU and CUDA
//! devices, memory budgets), [`source`] (where batches come from), [`learner`] (one learner's
//! forward, backward and local step), [`step`] (one iteration over every device, then the
//! synchroniser), [`losses`] (the learners' losses, read every iteration or one late),
//! [`evaluation`] (the central model on the test set, batch-norm statistics)
//! [`tuning`] (the auto-tuner driving the learner count) and [`snapshot`] (the whole state on
//! the host, for checkpoints).

pub mod devices;
pub mod evaluation;
pub mod learner;
pub mod losses;
pub mod snapshot;
pub mod source;
pub mod step;
pub mod tuning;

use std::sync::Arc;

use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_tensor::Device;
use serde::Serialize;

pub use crate::comm::nccl::{self, AllReduceChoice, NcclAllReduce};
pub use devices::{CpuDevices, CudaDevices, DeviceFactory, cpu_memory_budget};
pub use evaluation::EvalResult;
pub use learner::Learner;
pub use losses::{LossRead, LossRecord};
pub use snapshot::{DeviceSnapshot, EngineSnapshot, LearnerSnapshot};
pub use source::{EvalSource, EvalVisitor, TrainBatch, TrainSource};
pub use step::IterationRecord;
pub use tuning::{AutoTuner, TuningEvent};

use crate::error::{ReplicaError, Result};
use crate::exec::Executor;
use crate::graph::Graph;
use crate::plan::{MemoryPlan, plan};
use crate::program::{Mode, Program, lower};
use crate::replica::{Replica, initial_params, initial_state};
use crate::schedule::Schedule;
use crate::sync::{AllReduce, Central, LearnerBuffers, Synchroniser};
use crate::world::{ProcessGroup, Solo, learner_offset};
use evaluation::Evaluator;

/// The engine's fixed settings.
#[derive(Clone, Debug, Serialize)]
pub struct EngineConfig {
    /// Batch size per learner.
    pub batch_size: usize,
    /// Base learning rate, momentum, weight decay, Nesterov.
    pub sgd: SgdConfig,
    /// How the learning rate changes over epochs (warm-up, steps).
    pub schedule: Schedule,
    /// Seed of the initial parameters and of every iteration's dropout masks.
    pub seed: u64,
    /// Batch size for evaluation.
    pub eval_batch_size: usize,
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

/// A model's training program at a batch size and its memory plan: what every learner of an
/// engine runs. Made once ([`TrainPlan::new`]) and shared: by a memory check before an engine
/// exists and by the engine itself ([`Engine::in_world_planned`]).
#[derive(Clone, Debug)]
pub struct TrainPlan {
    /// The training program (forward, loss, backward).
    pub program: Arc<Program>,
    /// Its memory plan (activation and gradient slots).
    pub plan: Arc<MemoryPlan>,
}

impl TrainPlan {
    /// `graph` lowered at `batch` for training, and planned.
    pub fn new(graph: &Graph, batch: usize) -> Result<Self> {
        let program = Arc::new(lower(graph, batch, Mode::Train)?);
        let plan = Arc::new(plan(&program));
        Ok(TrainPlan { program, plan })
    }
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
    /// Step between the ids of learners added later (the number of ranks: rank `r` gives
    /// ids `r, r + size, ...` above the initial ones, so ids stay unique across ranks).
    id_stride: usize,
    /// The processes this engine is one of (see [`crate::world`]).
    world: Arc<dyn ProcessGroup>,
    /// Learners of every rank, by rank, as last agreed ([`Engine::sync_layout`]).
    world_counts: Vec<usize>,
    /// The iteration at which the layout was last agreed (none: it must be agreed again).
    layout_agreed_at: Option<u64>,
    iteration: u64,
    samples: u64,
    stage: usize,
    evaluator: Option<Evaluator<B>>,
    /// Evaluate with the first learner's batch-norm statistics (see
    /// [`Engine::set_eval_first_learner_stats`]).
    eval_first_learner: bool,
    /// Whose batch statistics batch norm uses in training ([`Engine::set_bn_group`]).
    bn_group: BnGroup,
    /// When the learners' losses are read ([`Engine::set_loss_read`]).
    loss_read: LossRead,
    /// Losses read early (before a learner was added or removed), for the next record.
    stash: Option<losses::LossTotals>,
    /// The central model's sum of squares on its way to the host ([`LossRead::Lagged`]).
    central_read: Option<losses::PendingRead<B>>,
    /// Where that sum is computed.
    central_sq: Option<B::Buffer>,
    /// Images per iteration kept fixed whatever the learner count ([`Engine::set_global_batch`]).
    global_batch: Option<usize>,
}

/// Whose batch statistics a learner's batch-norm layers normalise with in training.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BnGroup {
    /// Its own batch's (`b` images): every learner is an ordinary batch-normalised model.
    #[default]
    Learner,
    /// The batches of all the learners of its device together (`k·b` images), as
    /// synchronised batch norm does across GPUs; each learner keeps its own `γ`, `β` and
    /// running statistics. With one learner on a device this is plain batch norm, bit for
    /// bit. The statistics travel through the host (a few hundred floats per layer).
    Device,
}

impl std::str::FromStr for BnGroup {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "learner" => Ok(BnGroup::Learner),
            "device" => Ok(BnGroup::Device),
            _ => Err(format!("must be 'learner' or 'device', got {s:?}")),
        }
    }
}

impl std::fmt::Display for BnGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BnGroup::Learner => "learner",
            BnGroup::Device => "device",
        })
    }
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
        Self::in_world(graph, cfg, factory, sync, allreduce, learners, Arc::new(Solo))
    }

    /// [`Engine::new`] as one rank of `world`: a collective (every rank calls it). The
    /// learners of all ranks form one global order (rank 0's first, each rank's by device
    /// then learner); this rank's get global ids and synchroniser slots from its offset in
    /// that order, and the synchroniser is told the global learner count (so SMA's
    /// `alpha = 1/k` counts every rank's learners). Each iteration this rank's process total
    /// is summed with every other rank's through `world`.
    pub fn in_world(
        graph: Graph,
        cfg: EngineConfig,
        factory: Box<dyn DeviceFactory<B>>,
        sync: Box<dyn Synchroniser<B>>,
        allreduce: Box<dyn AllReduce<B>>,
        learners: &[usize],
        world: Arc<dyn ProcessGroup>,
    ) -> Result<Self> {
        let plan = TrainPlan::new(&graph, cfg.batch_size)?;
        Self::in_world_planned(graph, plan, cfg, factory, sync, allreduce, learners, world)
    }

    /// [`Engine::in_world`] with the training program already lowered and planned
    /// ([`TrainPlan::new`], e.g. by a memory check before anything is allocated): the graph
    /// is lowered once. `plan` must be `graph`'s at `cfg.batch_size`.
    #[allow(clippy::too_many_arguments)]
    pub fn in_world_planned(
        graph: Graph,
        plan: TrainPlan,
        cfg: EngineConfig,
        factory: Box<dyn DeviceFactory<B>>,
        sync: Box<dyn Synchroniser<B>>,
        allreduce: Box<dyn AllReduce<B>>,
        learners: &[usize],
        world: Arc<dyn ProcessGroup>,
    ) -> Result<Self> {
        if plan.program.batch != cfg.batch_size {
            return Err(ReplicaError::Config(format!(
                "the training plan is for batch {}, the engine's batch is {}",
                plan.program.batch, cfg.batch_size
            )));
        }
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
        let TrainPlan { program, plan } = plan;
        let graph = Arc::new(graph);
        let init = initial_params(&graph, cfg.seed);
        let state = initial_state(&graph);
        let len = graph.param_len;
        let local: usize = learners.iter().sum();
        let world_counts = world.all_gather_u64(local as u64)?.into_iter().map(|c| c as usize).collect::<Vec<_>>();
        let offset = learner_offset(&world_counts, world.rank());
        let total: usize = world_counts.iter().sum();
        let mut sync = sync;
        sync.set_model(&crate::sync::ModelLayout::of(&graph))?;
        let mut engine = Engine {
            graph,
            program,
            plan,
            cfg,
            factory,
            sync,
            allreduce,
            devices: vec![],
            next_id: offset,
            id_stride: 1,
            world: Arc::clone(&world),
            world_counts,
            layout_agreed_at: None,
            iteration: 0,
            samples: 0,
            stage: 0,
            evaluator: None,
            eval_first_learner: false,
            bn_group: BnGroup::Learner,
            loss_read: LossRead::Now,
            stash: None,
            central_read: None,
            central_sq: None,
            global_batch: None,
        };
        for (d, dev) in devices.into_iter().enumerate() {
            let backend = engine.factory.device_backend(d)?;
            let mut z = backend.alloc(len.max(1))?;
            backend.upload(&init, ViewMut::new(&mut z, 0..len)?)?;
            let sync_state =
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
                central: Central { z, sync_state },
                contribution,
                reduced: None,
                pool,
            });
            for _ in 0..learners[d] {
                let l = engine.new_learner(d, learners[d], &init, &state)?;
                engine.devices[d].learners.push(l);
            }
        }
        if world.size() > 1 {
            engine.next_id = total + world.rank();
            engine.id_stride = world.size();
        }
        // Host or NCCL, agreed by every rank (may replace `allreduce`; see `nccl`).
        engine.choose_all_reduce()?;
        engine.learners_changed()?;
        Ok(engine)
    }

    /// Whose batch statistics batch norm uses in training from the next iteration on (see
    /// [`BnGroup`]).
    pub fn set_bn_group(&mut self, group: BnGroup) {
        self.bn_group = group;
    }

    /// The batch-norm grouping in use.
    pub fn bn_group(&self) -> BnGroup {
        self.bn_group
    }

    /// Whether the devices run work asynchronously (GPUs: the host only enqueues it), where
    /// reading losses one iteration late ([`LossRead::Lagged`]) saves a wait per iteration.
    pub fn asynchronous_devices(&self) -> bool {
        !self.factory.synchronous()
    }

    /// The processes this engine is one of.
    pub fn world(&self) -> &Arc<dyn ProcessGroup> {
        &self.world
    }

    /// Learners of every rank, by rank, as last agreed (one entry, [`Engine::learners`], in a
    /// single process).
    pub fn world_layout(&self) -> &[usize] {
        &self.world_counts
    }

    /// Learners of all ranks together: the `k` of `alpha = 1/k` and of the batches an
    /// iteration takes from the global sample order.
    pub fn world_learners(&self) -> usize {
        if self.world.size() > 1 { self.world_counts.iter().sum() } else { self.learners() }
    }

    /// Where this rank's learners start in the global learner order: its learners take
    /// batches `offset .. offset + learners()` of every iteration's `world_learners()`.
    pub fn learner_offset(&self) -> usize {
        if self.world.size() > 1 { learner_offset(&self.world_counts, self.world.rank()) } else { 0 }
    }

    /// Agrees on every rank's learner count before an iteration (a collective when there are
    /// several ranks; nothing otherwise). When any rank's count changed (its auto-tuner added
    /// or removed a learner), every rank tells its synchroniser the new global count and
    /// resets, so all ranks apply the same `alpha` from the same iteration on. Called by
    /// [`Engine::step`]; call it yourself before drawing an iteration's batches, so that the
    /// offset and count you slice them with are the agreed ones.
    ///
    /// The same exchange carries the synchroniser's [`Synchroniser::proposal`]: rank 0's is
    /// applied on every rank ([`Synchroniser::agree`]); with one process, its own is.
    ///
    /// With a global batch ([`Engine::set_global_batch`]) the learners' programs are then
    /// lowered for the agreed count's share, if it changed.
    pub fn sync_layout(&mut self) -> Result<()> {
        if self.layout_agreed_at != Some(self.iteration) {
            self.agree_layout()?;
        }
        self.rebatch()
    }

    fn agree_layout(&mut self) -> Result<()> {
        if self.world.size() <= 1 {
            self.layout_agreed_at = Some(self.iteration);
            if let Some(v) = self.sync.proposal() {
                self.sync.agree(v);
            }
            return Ok(());
        }
        // One word per rank: its learner count (low 32 bits) and its synchroniser's
        // proposal plus one (high 32 bits; 0 for none).
        let mine = self.sync.proposal().map_or(0, |v| (v.min(u32::MAX as u64 - 1) + 1) << 32);
        let words = self.world.all_gather_u64(mine | self.learners() as u64)?;
        let counts: Vec<usize> = words.iter().map(|w| (w & 0xFFFF_FFFF) as usize).collect();
        self.layout_agreed_at = Some(self.iteration);
        if let Some(v) = words.first().map(|w| w >> 32).filter(|&v| v > 0) {
            self.sync.agree(v - 1);
        }
        if counts != self.world_counts {
            self.world_counts = counts;
            self.learners_changed()?;
        }
        Ok(())
    }

    /// Keeps the images of an iteration, the learners of every rank together, at `n` whatever
    /// the learner count: each of `k` learners trains on `n / k` of them. Under S-SGD the
    /// update is then the mean gradient of the same `n` images at any `k` (up to rounding; with
    /// batch norm exactly so only when a device's learners normalise together,
    /// [`BnGroup::Device`]), so a learner count chosen for speed (the auto-tuner's) leaves the
    /// optimisation as it was. The learners' programs are lowered again for the new share
    /// before the first iteration at a new count ([`Engine::sync_layout`]); a count that does
    /// not divide `n` is an error there. Every rank sets the same value. `None` (the default):
    /// every learner takes [`EngineConfig::batch_size`] images.
    pub fn set_global_batch(&mut self, n: Option<usize>) -> Result<()> {
        if n == Some(0) {
            return Err(ReplicaError::Config("the global batch must be at least 1 image".into()));
        }
        if let Some(n) = n {
            Self::share_of(n, self.world_learners())?;
        }
        self.global_batch = n;
        self.rebatch()
    }

    /// The global batch, if one is set ([`Engine::set_global_batch`]).
    pub fn global_batch(&self) -> Option<usize> {
        self.global_batch
    }

    /// Images each learner trains on per iteration now: [`EngineConfig::batch_size`], or with
    /// a global batch its share at the current learner count.
    pub fn batch_size(&self) -> usize {
        self.program.batch
    }

    /// Images the next iteration takes, the learners of every rank together: the global
    /// batch when one is set, else learners x batch.
    pub fn images_per_iteration(&self) -> usize {
        self.global_batch.unwrap_or(self.world_learners() * self.program.batch)
    }

    /// `n / k`, when `n` images divide into `k` equal shares.
    fn share_of(n: usize, k: usize) -> Result<usize> {
        if k == 0 || !n.is_multiple_of(k) {
            return Err(ReplicaError::Config(format!(
                "a global batch of {n} images does not divide into {k} equal learner batches"
            )));
        }
        Ok(n / k)
    }

    /// Lowers the learners' programs for their share of the global batch, when it changed.
    fn rebatch(&mut self) -> Result<()> {
        let Some(n) = self.global_batch else { return Ok(()) };
        let b = Self::share_of(n, self.world_learners())?;
        if b == self.program.batch {
            return Ok(());
        }
        // Reads in flight are of batches of the old size: finished and kept first.
        self.stash_losses()?;
        let TrainPlan { program, plan } = TrainPlan::new(&self.graph, b)?;
        for dev in &mut self.devices {
            for l in &mut dev.learners {
                l.backend.synchronize()?;
                l.exec = Executor::from_parts(&l.backend, &self.graph, Arc::clone(&program), Arc::clone(&plan))?;
            }
        }
        self.program = program;
        self.plan = plan;
        Ok(())
    }

    /// Tells the synchroniser the learner count and lets it reset its view of `z`'s history
    /// on every device (at the start, and after learners are added or removed).
    fn learners_changed(&mut self) -> Result<()> {
        if self.world.size() > 1 {
            // This rank's own count is known now; the others' are agreed before the next
            // iteration (`sync_layout`), which resets again if any of them changed.
            let local = self.learners();
            let rank = self.world.rank();
            if let Some(c) = self.world_counts.get_mut(rank) {
                *c = local;
            }
            // Slots in the global order: this rank's offset, then device and learner order.
            let offset = self.learner_offset();
            for (i, l) in self.devices.iter_mut().flat_map(|d| d.learners.iter_mut()).enumerate() {
                l.slot = offset + i;
            }
        }
        let k = self.world_learners();
        self.sync.set_learners(k);
        let len = self.graph.param_len;
        let sync = &*self.sync;
        for dev in &mut self.devices {
            for l in &dev.learners {
                l.backend.synchronize()?;
            }
            dev.backend.synchronize()?;
            let mut lbs: Vec<LearnerBuffers<'_, B>> = dev.learners.iter_mut().map(|l| l.sync_view().1).collect();
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
        let sync_buffers =
            (0..self.sync.learner_buffers()).map(|_| backend.alloc(len)).collect::<Result<Vec<_>, _>>()?;
        let id = self.next_id;
        self.next_id += self.id_stride;
        let slot = self.free_slot();
        Ok(Learner { id, slot, backend, replica, exec, sync_buffers, last_loss: (0.0, 0), pending_loss: None })
    }

    /// Device memory available to learners of device `d`, if known (the tuner's budget).
    pub fn memory_budget(&self, d: usize) -> Option<u64> {
        self.factory.memory_budget(d)
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

    /// The synchroniser's settings that likely made training diverge
    /// ([`crate::Synchroniser::divergence_causes`]).
    pub fn synchroniser_divergence_causes(&self) -> Vec<String> {
        self.sync.divergence_causes()
    }

    /// What the synchroniser tells the user about its settings at the current learner count
    /// ([`crate::Synchroniser::notes`]), with the engine's optimiser.
    pub fn synchroniser_notes(&self) -> Vec<crate::sync::SyncNote> {
        self.sync.notes(&self.cfg.sgd)
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
        let sync_buffers = self.sync.learner_buffers() as u64 * len * 4;
        Footprint {
            bytes_per_learner: replica + sync_buffers + act + ws + small,
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
        self.stash_losses()?;
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
        self.stash_losses()?;
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
}

impl<B: Backend> Engine<B> {
    /// Decides the all-reduce with every rank (a collective: see the module docs) and, for
    /// NCCL, replaces the engine's all-reduce with the factory's NCCL one.
    fn choose_all_reduce(&mut self) -> Result<()> {
        let offer = self.factory.nccl_offer(self.world.size());
        let table = self.world.all_gather_u64(offer.encode())?;
        let plan = crate::comm::nccl::decide(&table, self.world.rank(), offer.ready.as_ref().err().map(String::as_str))
            .map_err(ReplicaError::Config)?;
        let crate::comm::nccl::Plan::Nccl { ranks, first_rank } = plan else {
            return Ok(());
        };
        let id = crate::comm::nccl::shared_id(&*self.world)?;
        let backends: Vec<&B> = self.devices.iter().map(|d| &d.backend).collect();
        self.allreduce = self.factory.nccl_all_reduce(&backends, &id, first_rank, ranks)?;
        Ok(())
    }

    /// How the devices' contributions are summed (`"host"`, `"nccl (4 GPU(s) in all)"`).
    pub fn all_reduce_path(&self) -> String {
        self.allreduce.describe()
    }
}

#[cfg(test)]
mod tests;
