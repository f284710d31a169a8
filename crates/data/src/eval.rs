//! Test-set batches: in order, not augmented, normalised.

use crossbeam_channel::{Receiver, Sender, unbounded};

use crate::pipeline::{Buffers, Cursor};
use crate::transform::{Placement, Transform};
use crate::{Augment, Batch, DataError, Dataset, Normalize};

/// An iterator over a dataset (usually the test set) in order, in batches of `batch_size`
/// images, normalised and not augmented; the last batch may be short. Batch `i` has cursor
/// `(epoch 0, batch i)`.
///
/// Batches dropped before the next one is asked for give their buffers back, so a whole pass
/// allocates one batch's worth of memory.
///
/// A streamed dataset ([`crate::DecodeMode::Streaming`]) is decoded batch by batch, the images
/// of a batch in parallel on rayon's pool. A file that stops the run (`--on-bad-image fail`)
/// is an error of [`EvalBatches::try_next`]; the iterator then ends and
/// [`EvalBatches::error`] holds it.
pub struct EvalBatches<'a> {
    dataset: &'a Dataset,
    transform: Transform,
    batch_size: usize,
    next: usize,
    recycle: Sender<Buffers>,
    free: Receiver<Buffers>,
    error: Option<DataError>,
}

impl std::fmt::Debug for EvalBatches<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvalBatches")
            .field("dataset", &self.dataset.name())
            .field("batch_size", &self.batch_size)
            .field("next", &self.next)
            .finish()
    }
}

impl<'a> EvalBatches<'a> {
    /// Batches of `dataset` normalised by `normalize` (the training set's normalisation).
    /// Errors: batch size 0, or a normalisation for another number of channels.
    pub fn new(dataset: &'a Dataset, batch_size: usize, normalize: &Normalize) -> Result<Self, DataError> {
        if batch_size == 0 {
            return Err(DataError::config("batch size must be at least 1"));
        }
        let transform = Transform::new(dataset.image_shape(), Augment::none(), normalize)?;
        let (recycle, free) = unbounded();
        Ok(EvalBatches { dataset, transform, batch_size, next: 0, recycle, free, error: None })
    }

    /// The error that ended the iteration early, if one did.
    pub fn error(&self) -> Option<&DataError> {
        self.error.as_ref()
    }

    /// The next batch, `None` after the last; an error names a file of a streamed dataset that
    /// stops the run.
    pub fn try_next(&mut self) -> Result<Option<Batch>, DataError> {
        let n = self.dataset.len();
        let Some(start) = self.next.checked_mul(self.batch_size) else { return Ok(None) };
        if start >= n {
            return Ok(None);
        }
        let end = (start + self.batch_size).min(n);
        let mut buf = self.free.try_recv().unwrap_or_else(|_| Buffers::new(self.batch_size, self.dataset.image_len()));
        if self.dataset.is_streamed() {
            buf.put_streamed_parallel(self.dataset, start, end - start, &self.transform)
                .map_err(DataError::Pipeline)?;
        } else {
            for (j, index) in (start..end).enumerate() {
                buf.put(j, self.dataset, index, &self.transform, Placement::default()).map_err(DataError::Pipeline)?;
            }
        }
        let batch = Batch::new(
            buf,
            end - start,
            self.dataset.image_shape(),
            Cursor { epoch: 0, batch: self.next as u64 },
            self.recycle.clone(),
        );
        self.next += 1;
        Ok(Some(batch))
    }

    /// Number of batches (`ceil(len / batch_size)`).
    pub fn num_batches(&self) -> usize {
        self.dataset.len().div_ceil(self.batch_size)
    }
}

impl Iterator for EvalBatches<'_> {
    type Item = Batch;

    /// Ends early on an error (see [`EvalBatches::error`]).
    fn next(&mut self) -> Option<Batch> {
        if self.error.is_some() {
            return None;
        }
        match self.try_next() {
            Ok(b) => b,
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.num_batches().saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for EvalBatches<'_> {}
