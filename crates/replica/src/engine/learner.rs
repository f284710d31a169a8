//! One learner: a replica and an executor on the learner's own backend (a worker thread on a
//! CPU device, a stream on a GPU), and its part of an iteration.

use crossbow_kernels::Backend;

use super::TrainBatch;
use crate::error::Result;
use crate::exec::{Executor, mix};
use crate::replica::Replica;
use crate::sync::{LearnerBuffers, StepInfo, Synchroniser};

/// One learner: a replica and an executor on the learner's own backend.
pub struct Learner<B: Backend> {
    pub(super) id: usize,
    pub(super) slot: usize,
    pub(super) backend: B,
    pub(super) replica: Replica<B>,
    pub(super) exec: Executor<B>,
    /// The synchroniser's own per-learner buffers.
    pub(super) sync_buffers: Vec<B::Buffer>,
    /// `(sum of per-sample losses, correct predictions)` of the learner's last batch whose
    /// loss was read.
    pub(super) last_loss: (f64, usize),
    /// Its last batch's loss statistics on their way to the host ([`super::LossRead::Lagged`]).
    pub(super) pending_loss: Option<super::losses::PendingRead<B>>,
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

    /// The learner's backend and its buffers as a synchroniser sees them.
    pub(super) fn sync_view(&mut self) -> (&B, LearnerBuffers<'_, B>) {
        (
            &self.backend,
            LearnerBuffers {
                index: self.slot,
                params: &mut self.replica.params,
                grads: &self.replica.grads,
                velocity: &mut self.replica.velocity,
                sync_state: &mut self.sync_buffers,
            },
        )
    }

    /// The learner's part of an iteration, on its own backend: wait for the previous device
    /// reduction (it may read the gradients about to be overwritten), forward and backward
    /// on `batch`, wait for `z`, then the synchroniser's learner step. Returns an event that
    /// marks the end of the step.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn train_step<T: TrainBatch>(
        &mut self,
        sync: &dyn Synchroniser<B>,
        info: &StepInfo,
        batch: &T,
        z: &B::Buffer,
        z_ready: &B::Event,
        reduced: Option<&B::Event>,
        seed: u64,
        len: usize,
    ) -> Result<B::Event> {
        if let Some(r) = reduced {
            self.backend.wait(r)?;
        }
        self.exec.upload_batch(&self.backend, batch.images(), batch.labels())?;
        // Forward and backward only enqueue work on the learner's backend: on a GPU they are
        // replayed as one CUDA graph while they stay identical (`Backend::replayable`).
        let (exec, replica, be) = (&mut self.exec, &mut self.replica, &self.backend);
        let seed = mix(seed, self.id as u64);
        be.replayable(|| exec.run(be, &replica.params, Some(&mut replica.grads), &mut replica.state, seed))?;
        self.finish_step(sync, info, z, z_ready, len)
    }

    /// The end of the learner's part of an iteration, after its forward and backward: wait
    /// for `z`, then the synchroniser's learner step. Returns an event that marks its end.
    pub(super) fn finish_step(
        &mut self,
        sync: &dyn Synchroniser<B>,
        info: &StepInfo,
        z: &B::Buffer,
        z_ready: &B::Event,
        len: usize,
    ) -> Result<B::Event> {
        self.backend.wait(z_ready)?;
        let (be, lb) = self.sync_view();
        sync.learner_step(be, info, lb, z, len)?;
        Ok(self.backend.record()?)
    }
}
