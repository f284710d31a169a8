//! The engine's whole state on the host, for checkpoints: every device's central model and
//! synchroniser buffers, every learner's parameters, momentum, batch-norm statistics and
//! synchroniser buffers, and the counters. [`Engine::restore`] on an engine with the same
//! layout continues bit for bit as if the run had not stopped; on another layout it carries
//! the learners over and says what changed.

use crossbow_kernels::{Backend, View, ViewMut};
use serde::{Deserialize, Serialize};

use super::Engine;
use crate::checkpoint::{CheckpointFile, Tensor};
use crate::error::{ReplicaError, Result};

/// One learner's state.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnerSnapshot {
    /// The learner's id (its dropout stream).
    pub id: usize,
    /// The learner's slot in `0..k`.
    pub slot: usize,
    /// Parameters `w`.
    pub params: Vec<f32>,
    /// Momentum of the local optimiser.
    pub velocity: Vec<f32>,
    /// Batch-norm running statistics.
    pub stats: Vec<f32>,
    /// The synchroniser's per-learner buffers.
    pub sync_buffers: Vec<Vec<f32>>,
}

/// One device's state.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSnapshot {
    /// The device's name (`cpu:0`, `cuda:1`).
    pub device: String,
    /// The central model `z`.
    pub z: Vec<f32>,
    /// The synchroniser's per-device buffers.
    pub sync_state: Vec<Vec<f32>>,
    /// The learners, in the device's order.
    pub learners: Vec<LearnerSnapshot>,
}

/// The engine's state, downloaded.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSnapshot {
    /// The model's name.
    pub model: String,
    /// Iterations run.
    pub iteration: u64,
    /// Training samples consumed.
    pub samples: u64,
    /// Learning-rate stage of the schedule reached.
    pub stage: usize,
    /// Next learner id.
    pub next_id: usize,
    /// The base learning rate (lowered after a divergence rollback).
    pub base_lr: f32,
    /// Every device.
    pub devices: Vec<DeviceSnapshot>,
}

/// The JSON part of an [`EngineSnapshot`] (the tensors go in separately).
#[derive(Serialize, Deserialize)]
struct Header {
    model: String,
    param_len: usize,
    stats_len: usize,
    iteration: u64,
    samples: u64,
    stage: usize,
    next_id: usize,
    base_lr: f32,
    devices: Vec<DeviceHeader>,
}

#[derive(Serialize, Deserialize)]
struct DeviceHeader {
    device: String,
    sync_buffers: usize,
    learners: Vec<LearnerHeader>,
}

#[derive(Serialize, Deserialize)]
struct LearnerHeader {
    id: usize,
    slot: usize,
    sync_buffers: usize,
}

impl EngineSnapshot {
    /// Learners per device.
    pub fn layout(&self) -> Vec<usize> {
        self.devices.iter().map(|d| d.learners.len()).collect()
    }

    /// The snapshot of one process holding the devices of every rank, in rank order: what a
    /// checkpoint of a job of several ranks holds. The counters are rank 0's (every rank has
    /// the same); `next_id` is the largest (an id above every learner of every rank).
    pub fn merge_ranks(parts: Vec<EngineSnapshot>) -> Result<Self> {
        let mut it = parts.into_iter();
        let mut all = it.next().ok_or_else(|| ReplicaError::Processes("no rank's state to merge".into()))?;
        for (r, p) in it.enumerate() {
            if (p.iteration, p.samples, p.stage, &p.model) != (all.iteration, all.samples, all.stage, &all.model) {
                return Err(ReplicaError::Processes(format!(
                    "rank {} is at iteration {} (stage {}, {} samples, model {}), rank 0 at {} (stage {}, {} samples, model {}): the ranks' states disagree",
                    r + 1,
                    p.iteration,
                    p.stage,
                    p.samples,
                    p.model,
                    all.iteration,
                    all.stage,
                    all.samples,
                    all.model
                )));
            }
            all.next_id = all.next_id.max(p.next_id);
            all.devices.extend(p.devices);
        }
        Ok(all)
    }

    /// The part of this (whole-job) snapshot that one rank restores: its `layout.len()`
    /// devices take the job's devices from `device_offset` on (their central model and
    /// synchroniser buffers; device 0's where the snapshot has fewer), and its learners take
    /// the snapshot's learners in global order (device by device) from `learner_offset` on,
    /// `layout[d]` on device `d`, each with its global position as slot; what the snapshot
    /// lacks is left out (the engine's restore starts those learners fresh). `next_id` is
    /// the id from which the rank numbers learners it adds.
    pub fn slice_for_rank(
        &self,
        layout: &[usize],
        device_offset: usize,
        learner_offset: usize,
        next_id: usize,
    ) -> Result<Self> {
        let first = self.devices.first().ok_or_else(|| ReplicaError::Config("checkpoint has no devices".into()))?;
        let saved: Vec<&LearnerSnapshot> = self.devices.iter().flat_map(|d| &d.learners).collect();
        let mut at = learner_offset;
        let mut devices = Vec::with_capacity(layout.len());
        for (d, &m) in layout.iter().enumerate() {
            let src = self.devices.get(device_offset + d).unwrap_or(first);
            let mut learners = vec![];
            for _ in 0..m {
                if let Some(l) = saved.get(at) {
                    learners.push(LearnerSnapshot { slot: at, ..(*l).clone() });
                }
                at += 1;
            }
            devices.push(DeviceSnapshot {
                device: src.device.clone(),
                z: src.z.clone(),
                sync_state: src.sync_state.clone(),
                learners,
            });
        }
        Ok(EngineSnapshot { devices, next_id, ..self.clone_counters() })
    }

    fn clone_counters(&self) -> Self {
        EngineSnapshot {
            model: self.model.clone(),
            iteration: self.iteration,
            samples: self.samples,
            stage: self.stage,
            next_id: self.next_id,
            base_lr: self.base_lr,
            devices: vec![],
        }
    }

    /// Puts the snapshot into `file`: tensors named `engine/dev{d}/z`,
    /// `engine/dev{d}/sync{i}`, `engine/dev{d}/learner{j}/{params,velocity,stats,sync{i}}`,
    /// and the counters under the state's `engine` key.
    pub fn to_checkpoint(&self, file: &mut CheckpointFile) -> Result<()> {
        let param_len = self.devices.first().map(|d| d.z.len()).unwrap_or(0);
        let stats_len = self.devices.first().and_then(|d| d.learners.first()).map(|l| l.stats.len()).unwrap_or(0);
        let header = Header {
            model: self.model.clone(),
            param_len,
            stats_len,
            iteration: self.iteration,
            samples: self.samples,
            stage: self.stage,
            next_id: self.next_id,
            base_lr: self.base_lr,
            devices: self
                .devices
                .iter()
                .map(|d| DeviceHeader {
                    device: d.device.clone(),
                    sync_buffers: d.sync_state.len(),
                    learners: d
                        .learners
                        .iter()
                        .map(|l| LearnerHeader { id: l.id, slot: l.slot, sync_buffers: l.sync_buffers.len() })
                        .collect(),
                })
                .collect(),
        };
        let t = &mut file.tensors;
        for (d, dev) in self.devices.iter().enumerate() {
            t.insert(format!("engine/dev{d}/z"), Tensor::vector(dev.z.clone()));
            for (i, b) in dev.sync_state.iter().enumerate() {
                t.insert(format!("engine/dev{d}/sync{i}"), Tensor::vector(b.clone()));
            }
            for (j, l) in dev.learners.iter().enumerate() {
                let p = format!("engine/dev{d}/learner{j}");
                t.insert(format!("{p}/params"), Tensor::vector(l.params.clone()));
                t.insert(format!("{p}/velocity"), Tensor::vector(l.velocity.clone()));
                t.insert(format!("{p}/stats"), Tensor::vector(l.stats.clone()));
                for (i, b) in l.sync_buffers.iter().enumerate() {
                    t.insert(format!("{p}/sync{i}"), Tensor::vector(b.clone()));
                }
            }
        }
        let header = serde_json::to_value(header).map_err(|e| ReplicaError::Config(format!("engine state: {e}")))?;
        match file.state.as_object_mut() {
            Some(o) => {
                o.insert("engine".into(), header);
                Ok(())
            }
            None => Err(ReplicaError::Config("checkpoint state is not a JSON object".into())),
        }
    }

    /// Reads the snapshot [`EngineSnapshot::to_checkpoint`] put into `file` (read from
    /// `path`, named in errors).
    pub fn from_checkpoint(file: &CheckpointFile, path: &std::path::Path) -> Result<Self> {
        let bad = |msg: String| ReplicaError::Config(format!("checkpoint {}: {msg}", path.display()));
        let header: Header = serde_json::from_value(file.state.get("engine").cloned().unwrap_or_default())
            .map_err(|e| bad(format!("engine state is missing or unreadable: {e}")))?;
        let get = |name: String, len: usize| -> Result<Vec<f32>> {
            let t = file.tensor(path, &name).map_err(|e| ReplicaError::Config(e.to_string()))?;
            if t.data.len() != len {
                return Err(bad(format!("tensor '{name}' has {} values, expected {len}", t.data.len())));
            }
            Ok(t.data.clone())
        };
        let (pl, sl) = (header.param_len, header.stats_len);
        let mut devices = vec![];
        for (d, dh) in header.devices.iter().enumerate() {
            let z = get(format!("engine/dev{d}/z"), pl)?;
            let sync_state =
                (0..dh.sync_buffers).map(|i| get(format!("engine/dev{d}/sync{i}"), pl)).collect::<Result<_>>()?;
            let mut learners = vec![];
            for (j, lh) in dh.learners.iter().enumerate() {
                let p = format!("engine/dev{d}/learner{j}");
                learners.push(LearnerSnapshot {
                    id: lh.id,
                    slot: lh.slot,
                    params: get(format!("{p}/params"), pl)?,
                    velocity: get(format!("{p}/velocity"), pl)?,
                    stats: get(format!("{p}/stats"), sl)?,
                    sync_buffers: (0..lh.sync_buffers)
                        .map(|i| get(format!("{p}/sync{i}"), pl))
                        .collect::<Result<_>>()?,
                });
            }
            devices.push(DeviceSnapshot { device: dh.device.clone(), z, sync_state, learners });
        }
        if devices.is_empty() || devices.iter().any(|d| d.learners.is_empty()) {
            return Err(bad("has no learners".into()));
        }
        // Counters a run can reach (2^53 iterations would take longer than the age of the
        // universe); beyond, a forged or damaged value would wrap round when counting on.
        const MOST: u64 = 1 << 53;
        for (what, v) in
            [("iteration", header.iteration), ("samples", header.samples), ("next_id", header.next_id as u64)]
        {
            if v > MOST {
                return Err(bad(format!("{what} {v} is out of range (at most 2^53)")));
            }
        }
        if !(header.base_lr.is_finite() && header.base_lr >= 0.0) {
            return Err(bad(format!("base learning rate {} is not a rate", header.base_lr)));
        }
        Ok(EngineSnapshot {
            model: header.model,
            iteration: header.iteration,
            samples: header.samples,
            stage: header.stage,
            next_id: header.next_id,
            base_lr: header.base_lr,
            devices,
        })
    }
}

impl<B: Backend> Engine<B> {
    fn download(be: &B, buf: &B::Buffer, len: usize) -> Result<Vec<f32>> {
        let mut v = vec![0.0; len];
        if len > 0 {
            be.download(View::new(buf, 0..len)?, &mut v)?;
        }
        Ok(v)
    }

    fn upload(be: &B, src: &[f32], buf: &mut B::Buffer) -> Result<()> {
        if !src.is_empty() {
            be.upload(src, ViewMut::new(buf, 0..src.len())?)?;
        }
        Ok(())
    }

    /// Downloads the whole state (waits for every device).
    pub fn snapshot(&self) -> Result<EngineSnapshot> {
        let (pl, sl) = (self.graph.param_len, self.graph.stats_len);
        let mut devices = vec![];
        for dev in &self.devices {
            for l in &dev.learners {
                l.backend.synchronize()?;
            }
            dev.backend.synchronize()?;
            let mut learners = vec![];
            for l in &dev.learners {
                let be = &l.backend;
                learners.push(LearnerSnapshot {
                    id: l.id,
                    slot: l.slot,
                    params: Self::download(be, &l.replica.params, pl)?,
                    velocity: Self::download(be, &l.replica.velocity, pl)?,
                    stats: Self::download(be, &l.replica.state, sl)?,
                    sync_buffers: l.sync_buffers.iter().map(|b| Self::download(be, b, pl)).collect::<Result<_>>()?,
                });
            }
            devices.push(DeviceSnapshot {
                device: dev.device.to_string(),
                z: Self::download(&dev.backend, &dev.central.z, pl)?,
                sync_state: dev
                    .central
                    .sync_state
                    .iter()
                    .map(|b| Self::download(&dev.backend, b, pl))
                    .collect::<Result<_>>()?,
                learners,
            });
        }
        Ok(EngineSnapshot {
            model: self.graph.name.clone(),
            iteration: self.iteration,
            samples: self.samples,
            stage: self.stage,
            next_id: self.next_id,
            base_lr: self.cfg.sgd.lr,
            devices,
        })
    }

    /// The batch-norm statistics the central model is evaluated with now: recalibrated on
    /// `z` if [`Engine::recalibrate`] ran since the last iteration, else the learners' mean
    /// (what an export of `z` should carry).
    pub fn central_stats(&self) -> Result<Vec<f32>> {
        match self.calibrated_state() {
            Some(s) => Ok(s.to_vec()),
            None => self.mean_state(None),
        }
    }

    /// Each learner's mean loss on its last batch: `(device, learner id, loss)`.
    pub fn learner_losses(&self) -> Vec<(String, usize, f64)> {
        let b = self.program.batch.max(1) as f64;
        self.devices
            .iter()
            .flat_map(|d| d.learners.iter().map(move |l| (d.device.to_string(), l.id, l.last_loss.0 / b)))
            .collect()
    }

    /// Whether the central model (device 0's copy) is finite: its sum of squares, taken on
    /// the device with f64 partial sums, is — so one number crosses to the host each
    /// iteration, not the model (on a GPU, megabytes over PCIe and a scan per iteration).
    /// False for any NaN or infinity, and also for values beyond about 1e19, whose squares
    /// overflow the f32 sum (a diverged model all the same).
    pub fn central_is_finite(&self) -> Result<bool> {
        let dev = self.devices.first().ok_or_else(|| ReplicaError::Config("no devices".into()))?;
        let mut out = dev.backend.alloc(1)?;
        dev.backend.sum_squares(View::new(&dev.central.z, 0..self.graph.param_len)?, ViewMut::whole(&mut out))?;
        let mut s = [0.0f32];
        dev.backend.download(View::whole(&out), &mut s)?;
        Ok(s[0].is_finite())
    }

    /// Sets the base learning rate (before the schedule), e.g. halved after a divergence.
    pub fn set_base_lr(&mut self, lr: f32) -> Result<()> {
        let sgd = crossbow_kernels::optim::SgdConfig { lr, ..self.cfg.sgd };
        sgd.validate()?;
        self.cfg.sgd = sgd;
        Ok(())
    }

    /// Continues from `snap`. With the same devices and learners per device as the snapshot
    /// the run continues exactly (same ids, slots, buffers and counters). Otherwise the
    /// snapshot's learners fill this engine's learners in order (device by device), learners
    /// beyond the snapshot's start as a copy of `z` with zero momentum, learners beyond this
    /// engine's are dropped, and the synchroniser is reset as after a tuner change. Returns
    /// one line per difference (empty when the layout is the same). With several ranks a
    /// collective: each rank restores its slice ([`EngineSnapshot::slice_for_rank`]), and
    /// the resume is exact on every rank or on none.
    pub fn restore(&mut self, snap: &EngineSnapshot) -> Result<Vec<String>> {
        self.discard_losses();
        let (pl, sl) = (self.graph.param_len, self.graph.stats_len);
        let first = snap.devices.first().ok_or_else(|| ReplicaError::Config("checkpoint has no devices".into()))?;
        if first.z.len() != pl || first.learners.first().is_some_and(|l| l.stats.len() != sl) {
            return Err(ReplicaError::Config(format!(
                "checkpoint is of model '{}' with {} parameters; this model '{}' has {pl}",
                snap.model,
                first.z.len(),
                self.graph.name
            )));
        }
        let want_sync = self.sync.device_buffers();
        let want_lsync = self.sync.learner_buffers();
        let mut notes = vec![];
        let mut exact = snap.layout() == self.layout()
            && snap.devices.iter().all(|d| d.sync_state.len() == want_sync)
            && snap.devices.iter().flat_map(|d| &d.learners).all(|l| l.sync_buffers.len() == want_lsync);
        if self.world.size() > 1 {
            // Every rank continues exactly, or every rank restarts its synchroniser: the
            // ranks' synchroniser states must stay the same.
            let mut changed = [f64::from(u8::from(!exact))];
            self.world.all_reduce_sum_f64(&mut changed)?;
            if exact && changed[0] > 0.0 {
                exact = false;
                notes.push(format!(
                    "the learners of {} other rank(s) changed: the synchroniser restarts on every rank",
                    changed[0]
                ));
            }
        }
        if !exact && notes.is_empty() {
            let names: Vec<String> = snap.devices.iter().map(|d| d.device.clone()).collect();
            notes.push(format!(
                "the checkpoint had {} learners ({:?} on {}); this run has {} ({:?} on {})",
                snap.layout().iter().sum::<usize>(),
                snap.layout(),
                names.join(","),
                self.learners(),
                self.layout(),
                self.devices().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","),
            ));
        }
        let saved: Vec<&super::snapshot::LearnerSnapshot> = snap.devices.iter().flat_map(|d| &d.learners).collect();
        let mut next = 0usize;
        let mut fresh = 0usize;
        for (d, dev) in self.devices.iter_mut().enumerate() {
            for l in &dev.learners {
                l.backend.synchronize()?;
            }
            dev.backend.synchronize()?;
            let sd = snap.devices.get(d).unwrap_or(first);
            Self::upload(&dev.backend, &sd.z, &mut dev.central.z)?;
            for (i, b) in dev.central.sync_state.iter_mut().enumerate() {
                match sd.sync_state.get(i) {
                    Some(src) => Self::upload(&dev.backend, src, b)?,
                    None => Self::upload(&dev.backend, &sd.z, b)?,
                }
            }
            for l in &mut dev.learners {
                let be = &l.backend;
                match saved.get(next) {
                    Some(s) => {
                        Self::upload(be, &s.params, &mut l.replica.params)?;
                        Self::upload(be, &s.velocity, &mut l.replica.velocity)?;
                        Self::upload(be, &s.stats, &mut l.replica.state)?;
                        for (i, b) in l.sync_buffers.iter_mut().enumerate() {
                            if let Some(src) = s.sync_buffers.get(i) {
                                Self::upload(be, src, b)?;
                            }
                        }
                        if exact {
                            l.id = s.id;
                            l.slot = s.slot;
                        }
                    }
                    None => {
                        Self::upload(be, &sd.z, &mut l.replica.params)?;
                        Self::upload(be, &vec![0.0; pl], &mut l.replica.velocity)?;
                        fresh += 1;
                    }
                }
                next += 1;
            }
            dev.backend.synchronize()?;
            for l in &dev.learners {
                l.backend.synchronize()?;
            }
            dev.reduced = None;
        }
        if fresh > 0 {
            notes.push(format!("{fresh} learner(s) start as a copy of the central model with zero momentum"));
        }
        if saved.len() > next {
            notes.push(format!("{} learner(s) of the checkpoint are dropped", saved.len() - next));
        }
        self.iteration = snap.iteration;
        self.layout_agreed_at = None;
        self.samples = snap.samples;
        self.stage = snap.stage;
        self.evaluator = None;
        self.set_base_lr(snap.base_lr)?;
        if exact {
            self.next_id = snap.next_id;
        } else {
            self.next_id = self.next_id.max(snap.next_id);
            self.learners_changed()?;
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learner(id: usize, v: f32) -> LearnerSnapshot {
        LearnerSnapshot { id, slot: id, params: vec![v; 2], velocity: vec![-v; 2], stats: vec![], sync_buffers: vec![] }
    }

    fn snap(devices: Vec<(f32, Vec<LearnerSnapshot>)>, next_id: usize) -> EngineSnapshot {
        EngineSnapshot {
            model: "m".into(),
            iteration: 5,
            samples: 80,
            stage: 0,
            next_id,
            base_lr: 0.1,
            devices: devices
                .into_iter()
                .enumerate()
                .map(|(d, (z, learners))| DeviceSnapshot {
                    device: format!("cpu:{d}"),
                    z: vec![z; 2],
                    sync_state: vec![vec![z + 0.5; 2]],
                    learners,
                })
                .collect(),
        }
    }

    /// Two ranks' snapshots merge into one with the devices in rank order, and slicing the
    /// merged snapshot by the same ranks gives each rank its own part back (slots are global
    /// positions); a rank at another iteration is refused.
    #[test]
    fn ranks_merge_in_order_and_slice_back() {
        let r0 = snap(vec![(1.0, vec![learner(0, 10.0), learner(1, 11.0)])], 5);
        let r1 = snap(vec![(1.0, vec![learner(2, 12.0)])], 6);
        let all = EngineSnapshot::merge_ranks(vec![r0.clone(), r1.clone()]).unwrap();
        assert_eq!(all.layout(), [2, 1]);
        assert_eq!(all.next_id, 6);
        assert_eq!(all.devices[1].learners[0].params, [12.0, 12.0]);
        let back0 = all.slice_for_rank(&[2], 0, 0, 5).unwrap();
        assert_eq!(back0, r0);
        let back1 = all.slice_for_rank(&[1], 1, 2, 6).unwrap();
        assert_eq!(back1.devices, r1.devices);
        // Another split of the same learners: 1 device of 3 learners (one process) ...
        let one = all.slice_for_rank(&[3], 0, 0, 6).unwrap();
        let ids: Vec<usize> = one.devices[0].learners.iter().map(|l| l.id).collect();
        assert_eq!(ids, [0, 1, 2]);
        // ... or 3 ranks of 1, the last beyond the saved learners (left out, starts fresh).
        let third = all.slice_for_rank(&[2], 2, 2, 9).unwrap();
        assert_eq!(third.devices[0].learners.len(), 1);
        assert_eq!(third.devices[0].learners[0].slot, 2);
        assert_eq!(third.devices[0].z, [1.0, 1.0], "a device beyond the saved ones takes device 0's z");
        let mut late = r1;
        late.iteration = 6;
        let e = EngineSnapshot::merge_ranks(vec![r0, late]).unwrap_err().to_string();
        assert!(e.contains("rank 1 is at iteration 6") && e.contains("disagree"), "{e}");
    }
}
