use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::sync::{Central, LearnerBuffers, LearnerRef, StepInfo, Synchroniser, momentum_step, sum_into};

/// Synchronous SGD (PyTorch DDP, Horovod, TensorFlow's mirrored strategy): the k learners'
/// gradients are averaged, one momentum-SGD step is taken on `z` (weight decay applied to
/// `z`), and `z` is copied into every replica. With k learners at batch b this is one learner
/// at batch k·b (for models without batch norm, whose statistics are per learner).
#[derive(Clone, Debug, Default)]
pub struct SSgd {
    k: usize,
}

/// Per-device buffer 0: the momentum of `z`.
impl<B: Backend> Synchroniser<B> for SSgd {
    fn name(&self) -> &str {
        "ssgd"
    }

    fn settings(&self) -> crossbow_replica::Settings {
        crossbow_replica::Settings::new().int("effective_batch_multiplier", self.k as i64)
    }

    fn device_buffers(&self) -> usize {
        1
    }

    fn set_learners(&mut self, k: usize) {
        self.k = k;
    }

    fn learner_step(
        &self,
        _be: &B,
        _info: &StepInfo,
        _l: LearnerBuffers<'_, B>,
        _z: &B::Buffer,
        _len: usize,
    ) -> Result<()> {
        Ok(())
    }

    fn reduce_device(
        &self,
        be: &B,
        _info: &StepInfo,
        learners: &[LearnerRef<'_, B>],
        _c: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()> {
        sum_into(be, learners.iter().map(|l| l.grads), out, len)
    }

    fn apply_device(
        &self,
        be: &B,
        info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> Result<()> {
        be.scale(1.0 / info.learners.max(1) as f32, ViewMut::new(total, 0..len)?)?;
        let (z, v) = (&mut central.z, &mut central.sync_state[0]);
        momentum_step(be, info, z, total, v, len)
    }

    fn after_apply(&self, be: &B, _info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        be.copy(View::new(z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
        Ok(())
    }
}
