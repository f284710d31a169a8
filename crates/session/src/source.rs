//! Adapters from the data pipeline to the engine's batch sources.

use std::sync::Arc;

use crossbow_data::{Batch, Dataset, EvalBatches, Normalize, Pipeline};
use crossbow_replica::ReplicaError;
use crossbow_replica::engine::{EvalSource, EvalVisitor, TrainBatch, TrainSource};

/// A pipeline batch handed to a learner: the whole batch, or with a global batch one of the
/// equal parts the learners split it into ([`DataBatch::split`]; no copy).
pub struct DataBatch {
    whole: Arc<Batch>,
    part: usize,
    parts: usize,
}

impl DataBatch {
    /// The whole of `batch`.
    pub fn new(batch: Batch) -> Self {
        DataBatch { whole: Arc::new(batch), part: 0, parts: 1 }
    }

    /// The batch in `k` equal parts, in order (`k` must divide its images).
    pub fn split(self, k: usize) -> Result<Vec<DataBatch>, ReplicaError> {
        let n = self.labels().len();
        if k == 0 || !n.is_multiple_of(k) {
            return Err(ReplicaError::Data(format!("a batch of {n} images does not split into {k} equal parts")));
        }
        let whole = self.whole;
        Ok((0..k).map(|part| DataBatch { whole: Arc::clone(&whole), part, parts: k }).collect())
    }

    /// The rows of the whole batch this part holds.
    fn rows(&self) -> std::ops::Range<usize> {
        let per = self.whole.len() / self.parts.max(1);
        self.part * per..(self.part + 1) * per
    }
}

impl TrainBatch for DataBatch {
    fn images(&self) -> &[f32] {
        let rows = self.rows();
        let image = self.whole.images().len() / self.whole.len().max(1);
        &self.whole.images()[rows.start * image..rows.end * image]
    }
    fn labels(&self) -> &[f32] {
        &self.whole.labels()[self.rows()]
    }
}

/// The training stream: the prefetching pipeline.
pub struct PipelineSource {
    /// The prefetching, augmenting pipeline batches are taken from.
    pub pipeline: Pipeline,
}

impl TrainSource for PipelineSource {
    type Batch = DataBatch;

    fn next_batch(&mut self) -> Result<DataBatch, ReplicaError> {
        self.pipeline.next_batch().map(DataBatch::new).map_err(|e| ReplicaError::Data(e.to_string()))
    }

    /// The samples of one pipeline epoch (the last partial batch of an epoch is dropped).
    fn samples_per_epoch(&self) -> usize {
        self.pipeline.batches_per_epoch() as usize * self.pipeline.batch_size()
    }
}

/// The test set, normalised like the training set, not augmented.
pub struct TestSet {
    /// The test images and labels.
    pub dataset: Arc<Dataset>,
    /// Per-channel normalisation, the training set's.
    pub normalize: Normalize,
}

impl EvalSource for TestSet {
    fn samples(&self) -> usize {
        self.dataset.len()
    }

    fn for_each_batch(&mut self, batch: usize, f: &mut EvalVisitor<'_>) -> Result<(), ReplicaError> {
        // A batch larger than the test set is the whole set (its buffer is not allocated at
        // the size asked for).
        let batch = batch.min(self.dataset.len().max(1));
        let mut batches =
            EvalBatches::new(&self.dataset, batch, &self.normalize).map_err(|e| ReplicaError::Data(e.to_string()))?;
        while let Some(b) = batches.try_next().map_err(|e| ReplicaError::Data(e.to_string()))? {
            f(b.images(), b.labels())?;
        }
        Ok(())
    }
}
