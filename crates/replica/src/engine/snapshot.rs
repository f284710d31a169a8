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
        let b = self.cfg.batch_size.max(1) as f64;
        self.devices
            .iter()
            .flat_map(|d| d.learners.iter().map(move |l| (d.device.to_string(), l.id, l.last_loss.0 / b)))
            .collect()
    }

    /// Whether every value of the central model (device 0's copy) is finite.
    pub fn central_is_finite(&self) -> Result<bool> {
        let dev = self.devices.first().ok_or_else(|| ReplicaError::Config("no devices".into()))?;
        Ok(Self::download(&dev.backend, &dev.central.z, self.graph.param_len)?.iter().all(|v| v.is_finite()))
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
    /// one line per difference (empty when the layout is the same).
    pub fn restore(&mut self, snap: &EngineSnapshot) -> Result<Vec<String>> {
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
        let exact = snap.layout() == self.layout()
            && snap.devices.iter().all(|d| d.sync_state.len() == want_sync)
            && snap.devices.iter().flat_map(|d| &d.learners).all(|l| l.sync_buffers.len() == want_lsync);
        if !exact {
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
