//! Adapters from the data pipeline to the engine's batch sources.

use std::sync::Arc;

use crossbow_data::{Batch, Dataset, EvalBatches, Normalize, Pipeline};
use crossbow_replica::ReplicaError;
use crossbow_replica::engine::{EvalSource, EvalVisitor, TrainBatch, TrainSource};

/// A pipeline batch handed to a learner.
pub struct DataBatch(pub Batch);

impl TrainBatch for DataBatch {
    fn images(&self) -> &[f32] {
        self.0.images()
    }
    fn labels(&self) -> &[f32] {
        self.0.labels()
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
        self.pipeline.next_batch().map(DataBatch).map_err(|e| ReplicaError::Data(e.to_string()))
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
