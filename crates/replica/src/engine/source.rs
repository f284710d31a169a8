//! Where the engine's batches come from: training batches (one per learner per iteration)
//! and the test set.

use crate::error::Result;

/// One training batch: images `[batch, c, h, w]` flattened and class-index labels.
pub trait TrainBatch: Send {
    /// The images, `[batch, c, h, w]` flattened in that order.
    fn images(&self) -> &[f32];
    /// One class index per image, as `f32` (`0.0`, `1.0`, ...).
    fn labels(&self) -> &[f32];
}

/// A stream of training batches.
pub trait TrainSource {
    /// The batch type this source yields.
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
