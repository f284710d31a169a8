//! The learners' losses and the central model's health, read back from the devices every
//! iteration ([`LossRead::Now`]) or one iteration late ([`LossRead::Lagged`]).
//!
//! Reading a learner's loss waits for its iteration to end. On a GPU that wait, every
//! iteration, leaves the host idle while the device finishes and the device idle while the
//! host then prepares the next iteration. A lagged read starts the copies of iteration `i`'s
//! loss statistics (and of the central model's sum of squares) when iteration `i`'s work has
//! been issued, and finishes those of iteration `i - 1`, long done by then: the host stays
//! one iteration ahead of the device. The parameters are the same bits either way; only the
//! iteration a record's loss belongs to ([`IterationRecord::loss_iteration`]) and the moment
//! a divergence is seen (one iteration later) change.
//!
//! Whoever looks at the run between iterations (an evaluation, a checkpoint, the end) calls
//! [`Engine::flush_losses`] first, so that every iteration's loss is counted by then. Adding
//! or removing a learner finishes its reads first and hands them to the next iteration's
//! record; restoring a snapshot drops them (they belong to the trajectory left behind).

use crossbow_kernels::{Backend, View, ViewMut};
use serde::Serialize;

use super::{Engine, IterationRecord};
use crate::error::{ReplicaError, Result};

/// When the learners' losses are read back from their devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossRead {
    /// At the end of every iteration (the host waits for the iteration's work).
    #[default]
    Now,
    /// One iteration late: the host never waits for the iteration it just issued.
    Lagged,
}

impl std::str::FromStr for LossRead {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "now" => Ok(LossRead::Now),
            "lagged" => Ok(LossRead::Lagged),
            _ => Err(format!("must be 'now' or 'lagged', got {s:?}")),
        }
    }
}

impl std::fmt::Display for LossRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossRead::Now => "now",
            LossRead::Lagged => "lagged",
        })
    }
}

/// The losses of iterations read after their own record was returned (by
/// [`Engine::flush_losses`]): every rank's learners.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LossRecord {
    /// The last iteration covered (completed count, as [`IterationRecord::iteration`]).
    pub iteration: u64,
    /// Mean training loss over the images covered.
    pub loss: f64,
    /// Training accuracy over the images covered.
    pub accuracy: f64,
    /// Images covered.
    pub images: usize,
}

/// Sums over learners' batches: this rank's, or every rank's once reduced.
#[derive(Clone, Debug, Default)]
pub(super) struct LossTotals {
    /// The last iteration covered (completed count; 0: none).
    pub iteration: u64,
    /// Sum of per-sample losses.
    pub loss: f64,
    /// Correct predictions.
    pub correct: usize,
    /// Images covered.
    pub images: usize,
    /// The epoch of the last iteration covered.
    pub epoch: f64,
    /// The first divergence found: why.
    pub bad: Option<String>,
}

impl LossTotals {
    fn merge(&mut self, o: LossTotals) {
        if o.iteration > self.iteration {
            self.iteration = o.iteration;
            self.epoch = o.epoch;
        }
        self.loss += o.loss;
        self.correct += o.correct;
        self.images += o.images;
        if self.bad.is_none() {
            self.bad = o.bad;
        }
    }

    /// Counts one learner's `(loss sum, correct)` of its batch at iteration `at` (0-based).
    fn add_learner(&mut self, id: usize, device: &str, stats: (f64, usize), batch: usize, at: u64, epoch: f64) {
        if !stats.0.is_finite() && self.bad.is_none() {
            self.bad = Some(format!(
                "learner {id} on {device} has loss {} at iteration {at} (epoch {epoch:.3}); lower the learning rate",
                stats.0
            ));
        }
        self.loss += stats.0;
        self.correct += stats.1;
        self.images += batch;
        if at + 1 > self.iteration {
            self.iteration = at + 1;
            self.epoch = epoch;
        }
    }
}

/// A started read of a learner's loss statistics, or of the central model's sum of squares:
/// the iteration (0-based) and epoch it belongs to.
pub(super) struct PendingRead<B: Backend> {
    at: u64,
    epoch: f64,
    read: B::Pending,
}

/// `(sum of per-sample losses, correct predictions)` from a learner's two statistics.
fn stats_of(v: &[f32]) -> (f64, usize) {
    (v.first().copied().unwrap_or(f32::NAN) as f64, v.get(1).map_or(0, |c| c.round() as usize))
}

impl<B: Backend> Engine<B> {
    /// When the learners' losses are read from now on (see [`LossRead`]). Switching to
    /// [`LossRead::Now`] keeps the reads in flight for the next record.
    pub fn set_loss_read(&mut self, read: LossRead) -> Result<()> {
        if read == LossRead::Now {
            self.stash_losses()?;
        }
        self.loss_read = read;
        Ok(())
    }

    /// When the learners' losses are read.
    pub fn loss_read(&self) -> LossRead {
        self.loss_read
    }

    /// This iteration's losses, read now (waits for every learner's work).
    pub(super) fn read_losses_now(&mut self, epoch: f64) -> Result<LossTotals> {
        let mut t = self.stash.take().unwrap_or_default();
        let (at, b) = (self.iteration, self.program.batch);
        for dev in &mut self.devices {
            let name = dev.device.to_string();
            for l in &mut dev.learners {
                l.last_loss = l.exec.loss_stats(&l.backend)?;
                t.add_learner(l.id, &name, l.last_loss, b, at, epoch);
            }
        }
        Ok(t)
    }

    /// Starts reading this iteration's losses and the central model's sum of squares, and
    /// returns what the reads started one iteration earlier found.
    pub(super) fn read_losses_lagged(&mut self, epoch: f64) -> Result<LossTotals> {
        let at = self.iteration;
        let mut started = Vec::with_capacity(self.learners());
        for dev in &self.devices {
            for l in &dev.learners {
                started.push(l.exec.start_loss_read(&l.backend)?);
            }
        }
        let central = self.start_central_read()?;
        let mut t = self.finish_reads()?;
        for (l, read) in self.devices.iter_mut().flat_map(|d| d.learners.iter_mut()).zip(started) {
            l.pending_loss = Some(PendingRead { at, epoch, read });
        }
        self.central_read = Some(PendingRead { at, epoch, read: central });
        if let Some(s) = self.stash.take() {
            t.merge(s);
        }
        Ok(t)
    }

    /// Device 0's central model's sum of squares, started on its way to the host.
    fn start_central_read(&mut self) -> Result<B::Pending> {
        let len = self.graph.param_len;
        let dev = self.devices.first().ok_or_else(|| ReplicaError::Config("no devices".into()))?;
        if self.central_sq.is_none() {
            self.central_sq = Some(dev.backend.alloc(1)?);
        }
        let out = self.central_sq.as_mut().ok_or_else(|| ReplicaError::Config("no scratch buffer".into()))?;
        dev.backend.sum_squares(View::new(&dev.central.z, 0..len)?, ViewMut::whole(out))?;
        Ok(dev.backend.start_download(View::whole(out))?)
    }

    /// Finishes every read in flight: the learners' and the central model's.
    fn finish_reads(&mut self) -> Result<LossTotals> {
        let mut t = LossTotals::default();
        let b = self.program.batch;
        for dev in &mut self.devices {
            let name = dev.device.to_string();
            for l in &mut dev.learners {
                if let Some(p) = l.pending_loss.take() {
                    l.last_loss = stats_of(&l.backend.finish_download(p.read)?);
                    t.add_learner(l.id, &name, l.last_loss, b, p.at, p.epoch);
                }
            }
        }
        if let (Some(p), Some(dev)) = (self.central_read.take(), self.devices.first()) {
            let s = dev.backend.finish_download(p.read)?;
            if !s.first().is_some_and(|v| v.is_finite()) && t.bad.is_none() {
                t.bad = Some(format!(
                    "the central model has a NaN or infinite value (or values beyond about 1e19) after iteration {} (epoch {:.3})",
                    p.at + 1,
                    p.epoch
                ));
            }
        }
        Ok(t)
    }

    /// Finishes the reads in flight and keeps what they found for the next record (before
    /// learners are added or removed).
    pub(super) fn stash_losses(&mut self) -> Result<()> {
        let t = self.finish_reads()?;
        if t.images > 0 || t.bad.is_some() {
            match &mut self.stash {
                Some(s) => s.merge(t),
                None => self.stash = Some(t),
            }
        }
        Ok(())
    }

    /// Drops the reads in flight and anything kept for the next record (a restored snapshot
    /// starts a different trajectory).
    pub(super) fn discard_losses(&mut self) {
        for l in self.devices.iter_mut().flat_map(|d| d.learners.iter_mut()) {
            if let Some(p) = l.pending_loss.take() {
                // Finished only so that its buffer is reused; the values belong to no record.
                let _ = l.backend.finish_download(p.read);
            }
        }
        if let (Some(p), Some(dev)) = (self.central_read.take(), self.devices.first()) {
            let _ = dev.backend.finish_download(p.read);
        }
        self.stash = None;
    }

    /// Sums `t` and the iteration's `images` over every rank (a collective), so every rank
    /// sees the same totals and stops on a diverged learner of any rank.
    pub(super) fn reduce_totals(&self, t: &mut LossTotals, images: &mut usize) -> Result<()> {
        if self.world.size() <= 1 {
            return Ok(());
        }
        let mut sums = [t.loss, t.correct as f64, t.images as f64, *images as f64];
        self.world.all_reduce_sum_f64(&mut sums)?;
        if !sums[0].is_finite() && t.bad.is_none() {
            t.bad = Some(format!(
                "a learner of another rank has loss {} at iteration {} (epoch {:.3}); lower the learning rate",
                sums[0],
                t.iteration.saturating_sub(1),
                t.epoch
            ));
        }
        t.loss = sums[0];
        t.correct = sums[1] as usize;
        t.images = sums[2] as usize;
        *images = sums[3] as usize;
        Ok(())
    }

    /// Finishes the loss reads still in flight (with [`LossRead::Lagged`]) and returns what
    /// they found, every rank's; `None` when none was in flight. A collective with several
    /// ranks. Call it before looking at the run between iterations (evaluation,
    /// checkpoint, the end), so every iteration's loss has been counted; an error
    /// ([`ReplicaError::Diverged`]) when a learner's loss or the central model was not
    /// finite.
    pub fn flush_losses(&mut self) -> Result<Option<LossRecord>> {
        self.stash_losses()?;
        let mut t = self.stash.take().unwrap_or_default();
        let mut none = 0usize;
        self.reduce_totals(&mut t, &mut none)?;
        if let Some(why) = t.bad {
            return Err(ReplicaError::Diverged(why));
        }
        if t.images == 0 {
            return Ok(None);
        }
        Ok(Some(LossRecord {
            iteration: t.iteration,
            loss: t.loss / t.images as f64,
            accuracy: t.correct as f64 / t.images as f64,
            images: t.images,
        }))
    }
}

impl IterationRecord {
    /// Counts `late` (losses of earlier iterations, [`Engine::flush_losses`]) in this
    /// record's loss and accuracy.
    pub fn add_losses(&mut self, late: &LossRecord) {
        let n = (self.loss_images + late.images) as f64;
        if n == 0.0 {
            return;
        }
        let (a, b) = (self.loss_images as f64, late.images as f64);
        self.loss = (self.loss * a + late.loss * b) / n;
        self.accuracy = (self.accuracy * a + late.accuracy * b) / n;
        self.loss_images += late.images;
        self.loss_iteration = self.loss_iteration.max(late.iteration);
    }
}
