//! The prefetching training pipeline: a deterministic, endless stream of shuffled, augmented,
//! normalised batches produced ahead of time by worker threads into recycled buffers.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError, bounded, select, unbounded};
use crossbow_tensor::{Rng, Shape, ShapeError, Tensor};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::stream;
use crate::transform::Transform;
use crate::{Augment, DataError, Dataset, Normalize};

/// A position in the batch stream: batch `batch` of epoch `epoch` (both from 0). Saved in
/// checkpoints; a [`Pipeline`] started at a cursor produces exactly the batches an
/// uninterrupted pipeline would have produced from there on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Cursor {
    /// The epoch (one pass over the shuffled training set).
    pub epoch: u64,
    /// The index of the batch within the epoch.
    pub batch: u64,
}

/// Settings of a [`Pipeline`]. [`PipelineConfig::new`] gives the defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineConfig {
    /// Images per batch (at least 1, at most the dataset size).
    pub batch_size: usize,
    /// Worker threads producing batches (at least 1). Default 2.
    pub workers: usize,
    /// How many batches may be produced ahead of the consumer (at least 1). Default 16; set it to
    /// at least the number of batches taken per iteration (learners) so a whole iteration's worth
    /// is ready.
    pub prefetch: usize,
    /// Seed of the shuffles and augmentation draws.
    pub seed: u64,
    /// Augmentation; `None` (default) means the dataset's [`Dataset::default_augment`].
    pub augment: Option<Augment>,
    /// Normalisation; `None` (default) means the dataset's [`Dataset::default_normalize`]
    /// resolved against it (its own statistics, or for folder data ImageNet's).
    pub normalize: Option<Normalize>,
    /// Drop the last, partial batch of each epoch (default `true`: every batch has
    /// `batch_size` images and an epoch has `len / batch_size` batches; the samples dropped differ
    /// from epoch to epoch). With `false` the last batch of an epoch may be short.
    pub drop_last: bool,
    /// Where the stream starts (default: epoch 0, batch 0).
    pub start: Cursor,
    /// Produce only a share of the stream (default `None`: every batch): see [`Share`].
    pub share: Option<Share>,
}

/// The batches of the stream a pipeline produces when it feeds one rank of several: of every
/// `period` consecutive batches from [`PipelineConfig::start`] (one iteration of every rank's
/// learners), those at positions `from..to` (this rank's learners'). The others are skipped,
/// never augmented; the batches produced are bit for bit those of the whole stream at the
/// same positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Batches per period (the learners of all ranks).
    pub period: u64,
    /// The first position kept in each period.
    pub from: u64,
    /// One past the last position kept.
    pub to: u64,
}

impl PipelineConfig {
    /// The defaults for a batch size and a seed.
    pub fn new(batch_size: usize, seed: u64) -> Self {
        PipelineConfig {
            batch_size,
            workers: 2,
            prefetch: 16,
            seed,
            augment: None,
            normalize: None,
            drop_last: true,
            start: Cursor::default(),
            share: None,
        }
    }
}

/// The reusable storage of one batch.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    images: Vec<f32>,
    labels: Vec<f32>,
    indices: Vec<u32>,
    /// A streamed dataset's decoded image before its transform, and the decoder's buffers.
    stage: Vec<u8>,
    scratch: Option<Box<crate::folder::Scratch>>,
}

impl Buffers {
    pub(crate) fn new(batch_size: usize, image_len: usize) -> Self {
        Buffers {
            images: vec![0.0; batch_size * image_len],
            labels: vec![0.0; batch_size],
            indices: vec![0; batch_size],
            stage: Vec::new(),
            scratch: None,
        }
    }

    /// Writes sample `j` of the batch: dataset image `index`, transformed. A streamed
    /// dataset's file is decoded here (a bad one replaced by the next that decodes, whose index
    /// and label the batch then holds); the error names a file that stops the run.
    #[inline]
    pub(crate) fn put(
        &mut self,
        j: usize,
        dataset: &Dataset,
        index: usize,
        transform: &Transform,
        placement: crate::transform::Placement,
    ) -> Result<(), String> {
        let n = dataset.image_len();
        let (src, index) = match dataset.files() {
            None => (&dataset.pixels()[index * n..(index + 1) * n], index),
            Some(files) => {
                self.stage.resize(n, 0);
                let used = files.load(index, &mut self.scratch, &mut self.stage)?;
                (&self.stage[..], used)
            }
        };
        transform.apply(src, &mut self.images[j * n..(j + 1) * n], placement);
        self.labels[j] = dataset.labels()[index] as f32;
        self.indices[j] = index as u32;
        Ok(())
    }

    /// Writes samples `0..len` of the batch from a streamed dataset's files `start..start +
    /// len`, unaugmented (as evaluation wants), decoding in parallel on rayon's pool (each task with its
    /// own decoder buffers). The error names a file that stops the run.
    pub(crate) fn put_streamed_parallel(
        &mut self,
        dataset: &Dataset,
        start: usize,
        len: usize,
        transform: &Transform,
    ) -> Result<(), String> {
        use rayon::prelude::*;
        let Some(files) = dataset.files() else { return Err("the dataset is held in memory".into()) };
        let n = dataset.image_len();
        self.images[..len * n]
            .par_chunks_mut(n)
            .zip(self.labels[..len].par_iter_mut())
            .zip(self.indices[..len].par_iter_mut())
            .enumerate()
            .try_for_each_init(
                || (None, vec![0u8; n]),
                |(scratch, stage), (j, ((image, label), index))| {
                    let used = files.load(start + j, scratch, stage)?;
                    transform.apply(stage, image, crate::transform::Placement::default());
                    *label = dataset.labels()[used] as f32;
                    *index = used as u32;
                    Ok(())
                },
            )
    }
}

/// One batch: `len` images (`f32`, NCHW, normalised) and their labels (class indices as `f32`).
///
/// Its buffers go back to the pipeline (or [`crate::EvalBatches`]) that made it when it is
/// dropped, so a steady stream of batches allocates nothing; drop batches once used.
#[derive(Debug)]
pub struct Batch {
    buffers: Buffers,
    len: usize,
    image_shape: [usize; 3],
    cursor: Cursor,
    recycle: Sender<Buffers>,
}

impl Batch {
    pub(crate) fn new(
        buffers: Buffers,
        len: usize,
        image_shape: [usize; 3],
        cursor: Cursor,
        recycle: Sender<Buffers>,
    ) -> Self {
        Batch { buffers, len, image_shape, cursor, recycle }
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a batch without images (never produced by this crate).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The epoch this batch belongs to (0 for test batches).
    pub fn epoch(&self) -> u64 {
        self.cursor.epoch
    }

    /// The index of this batch within its epoch (within the test set for test batches).
    pub fn index(&self) -> u64 {
        self.cursor.batch
    }

    /// `(epoch, index)` of this batch.
    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// `[c, h, w]` of one image.
    pub fn image_shape(&self) -> [usize; 3] {
        self.image_shape
    }

    /// The NCHW shape of [`Batch::images`].
    pub fn shape(&self) -> Shape {
        let [c, h, w] = self.image_shape;
        Shape::nchw(self.len, c, h, w)
    }

    /// The images, NCHW, normalised.
    pub fn images(&self) -> &[f32] {
        let n = self.len * self.image_shape.iter().product::<usize>();
        &self.buffers.images[..n]
    }

    /// The labels: class indices as `f32` (exact: every index is below 2^24).
    pub fn labels(&self) -> &[f32] {
        &self.buffers.labels[..self.len]
    }

    /// The dataset index of every image (which samples this batch holds).
    pub fn sample_indices(&self) -> &[u32] {
        &self.buffers.indices[..self.len]
    }

    /// Copies the batch into tensors: images `[n, c, h, w]` and labels `[n]` (allocates).
    pub fn to_tensors(&self) -> Result<(Tensor, Tensor), ShapeError> {
        Ok((
            Tensor::from_vec(self.shape(), self.images().to_vec())?,
            Tensor::from_vec(Shape::new([self.len]), self.labels().to_vec())?,
        ))
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // The producer may be gone already: then the buffers are simply freed.
        let _ = self.recycle.send(std::mem::take(&mut self.buffers));
    }
}

type Produced = (u64, Result<(Buffers, usize), String>);

/// What the workers share (read-only apart from the atomics and the permutation cache).
struct Shared {
    dataset: Arc<Dataset>,
    transform: Transform,
    batch_size: usize,
    batches_per_epoch: u64,
    seed: u64,
    /// The next batch to claim, counted among the batches produced (see [`Shared::seq_of`]).
    next_seq: AtomicU64,
    /// The stream position of the first batch.
    phase: u64,
    /// Of every `period` batches, the `width` from `from` are produced.
    period: u64,
    from: u64,
    width: u64,
    stop: AtomicBool,
    /// The permutations of the most recent epochs (workers may straddle an epoch boundary).
    perms: Mutex<VecDeque<(u64, Arc<Vec<u32>>)>>,
}

const PERM_CACHE: usize = 3;

impl Shared {
    /// The stream position of the `k`-th batch produced.
    fn seq_of(&self, k: u64) -> u64 {
        self.phase + (k / self.width) * self.period + self.from + k % self.width
    }

    /// The stream position of the start of the period of the `k`-th batch produced.
    fn period_start(&self, k: u64) -> u64 {
        self.phase + (k / self.width) * self.period
    }

    fn permutation(&self, epoch: u64) -> Arc<Vec<u32>> {
        let mut cache = self.perms.lock();
        if let Some((_, p)) = cache.iter().find(|(e, _)| *e == epoch) {
            return Arc::clone(p);
        }
        let mut v = if cache.len() >= PERM_CACHE {
            cache.pop_front().and_then(|(_, p)| Arc::try_unwrap(p).ok()).unwrap_or_default()
        } else {
            Vec::new()
        };
        v.clear();
        v.extend(0..self.dataset.len() as u32);
        Rng::derive(self.seed, stream::permutation(epoch)).shuffle(&mut v);
        let p = Arc::new(v);
        cache.push_back((epoch, Arc::clone(&p)));
        p
    }

    /// Fills `buf` with batch number `seq` of the stream; returns its length.
    fn fill(&self, seq: u64, buf: &mut Buffers) -> Result<usize, String> {
        let epoch = seq / self.batches_per_epoch;
        let index = seq % self.batches_per_epoch;
        let perm = self.permutation(epoch);
        let start = index as usize * self.batch_size;
        let end = (start + self.batch_size).min(perm.len());
        let mut rng = Rng::derive(self.seed, stream::augmentation(epoch, index));
        for (j, &s) in perm[start..end].iter().enumerate() {
            let placement = self.transform.draw(&mut rng);
            buf.put(j, &self.dataset, s as usize, &self.transform, placement)?;
        }
        Ok(end - start)
    }
}

/// The training input pipeline.
///
/// An endless, deterministic stream of batches: epoch `e` visits the training set in the order
/// of a permutation drawn from `(seed, e)`, cut into consecutive batches; batch `i` of epoch `e`
/// is augmented with draws from `(seed, e, i)` only. So the stream depends on the dataset, the
/// seed, the batch size, the augmentation, the normalisation and `drop_last` — never on the
/// number of workers, the prefetch depth or timing — and [`Pipeline::cursor`] plus
/// [`PipelineConfig::start`] resume it exactly.
///
/// Worker threads claim batch numbers in order, fill recycled buffers and hand them over; the
/// pipeline delivers them in order. At most `prefetch` batches are produced ahead of the
/// consumer. Dropping the pipeline stops and joins the workers (batches still held stay valid).
pub struct Pipeline {
    shared: Arc<Shared>,
    normalize: Normalize,
    augment: Augment,
    next_seq: u64,
    pending: Vec<Produced>,
    results: Receiver<Produced>,
    tickets: Sender<()>,
    recycle: Sender<Buffers>,
    shutdown: Option<Sender<()>>,
    workers: Vec<JoinHandle<()>>,
    failed: Option<String>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("dataset", &self.shared.dataset.name())
            .field("batch_size", &self.shared.batch_size)
            .field("batches_per_epoch", &self.shared.batches_per_epoch)
            .field("workers", &self.workers.len())
            .field("cursor", &self.cursor())
            .finish()
    }
}

impl Pipeline {
    /// Starts the workers. Errors (nothing is started): batch size 0 or larger than the
    /// dataset, zero workers or prefetch, a normalisation for the wrong number of channels, a
    /// crop padding larger than the image, a start cursor past the end of an epoch.
    pub fn new(dataset: Arc<Dataset>, config: PipelineConfig) -> Result<Self, DataError> {
        let n = dataset.len();
        let b = config.batch_size;
        if b == 0 {
            return Err(DataError::config("batch size must be at least 1"));
        }
        if b > n {
            return Err(DataError::config(format!(
                "batch size {b} is larger than the {} {} set ({n} images)",
                dataset.name(),
                dataset.split()
            )));
        }
        if config.workers == 0 {
            return Err(DataError::config("the pipeline needs at least 1 worker"));
        }
        if config.prefetch == 0 {
            return Err(DataError::config("prefetch must be at least 1 batch"));
        }
        let batches_per_epoch = if config.drop_last { n / b } else { n.div_ceil(b) } as u64;
        if batches_per_epoch > u32::MAX as u64 {
            return Err(DataError::config(format!(
                "{batches_per_epoch} batches per epoch is more than the supported {}",
                u32::MAX
            )));
        }
        let start = config.start;
        if start.batch >= batches_per_epoch {
            return Err(DataError::config(format!(
                "start cursor batch {} is past the end of an epoch ({batches_per_epoch} batches of \
                 {b})",
                start.batch
            )));
        }
        if start.epoch >= stream::AUGMENT_EPOCHS {
            return Err(DataError::config(format!(
                "start cursor epoch {} is too large (at most {})",
                start.epoch,
                stream::AUGMENT_EPOCHS - 1
            )));
        }
        let start_seq = start
            .epoch
            .checked_mul(batches_per_epoch)
            .and_then(|s| s.checked_add(start.batch))
            .ok_or_else(|| DataError::config(format!("start epoch {} is too large", start.epoch)))?;
        let share = config.share.unwrap_or(Share { period: 1, from: 0, to: 1 });
        if share.period == 0 || share.from >= share.to || share.to > share.period {
            return Err(DataError::config(format!(
                "pipeline share {}..{} of every {} batches: need from < to <= period",
                share.from, share.to, share.period
            )));
        }
        let normalize = match config.normalize {
            Some(nm) => nm,
            None => dataset.default_normalize().resolve(&dataset)?,
        };
        let augment = config.augment.unwrap_or_else(|| dataset.default_augment());
        let transform = Transform::new(dataset.image_shape(), augment, &normalize)?;
        let image_len = dataset.image_len();
        let shared = Arc::new(Shared {
            dataset,
            transform,
            batch_size: b,
            batches_per_epoch,
            seed: config.seed,
            next_seq: AtomicU64::new(0),
            phase: start_seq,
            period: share.period,
            from: share.from,
            width: share.to - share.from,
            stop: AtomicBool::new(false),
            perms: Mutex::new(VecDeque::with_capacity(PERM_CACHE + 1)),
        });

        let (tickets_tx, tickets_rx) = bounded::<()>(config.prefetch);
        for _ in 0..config.prefetch {
            // Cannot fail: the channel has room for exactly `prefetch` tickets.
            let _ = tickets_tx.try_send(());
        }
        let (results_tx, results_rx) = unbounded::<Produced>();
        let (recycle_tx, recycle_rx) = unbounded::<Buffers>();
        let (shutdown_tx, shutdown_rx) = bounded::<()>(0);
        let mut pipeline = Pipeline {
            shared: Arc::clone(&shared),
            normalize,
            augment,
            next_seq: 0,
            pending: Vec::with_capacity(config.prefetch),
            results: results_rx,
            tickets: tickets_tx,
            recycle: recycle_tx,
            shutdown: Some(shutdown_tx),
            workers: Vec::with_capacity(config.workers),
            failed: None,
        };
        for i in 0..config.workers {
            let worker = Worker {
                shared: Arc::clone(&shared),
                tickets: tickets_rx.clone(),
                free: recycle_rx.clone(),
                results: results_tx.clone(),
                shutdown: shutdown_rx.clone(),
                image_len,
            };
            let handle = std::thread::Builder::new()
                .name(format!("crossbow-data-{i}"))
                .spawn(move || worker.run())
                .map_err(|e| DataError::Pipeline(format!("cannot start worker thread: {e}")))?;
            pipeline.workers.push(handle);
        }
        Ok(pipeline)
    }

    /// The next batch of the stream (blocks until it is ready).
    ///
    /// Errors if a worker failed: a file of a streamed dataset that stops the run
    /// (`--on-bad-image fail`, or no file decodes), or a bug. The pipeline is then unusable.
    pub fn next_batch(&mut self) -> Result<Batch, DataError> {
        if let Some(msg) = &self.failed {
            return Err(DataError::Pipeline(msg.clone()));
        }
        let want = self.shared.seq_of(self.next_seq);
        let (buffers, len) = loop {
            if let Some(pos) = self.pending.iter().position(|(s, _)| *s == want) {
                let (_, produced) = self.pending.swap_remove(pos);
                match produced {
                    Ok(done) => break done,
                    Err(msg) => {
                        self.failed = Some(msg.clone());
                        return Err(DataError::Pipeline(msg));
                    }
                }
            }
            match self.results.recv() {
                Ok(item) => self.pending.push(item),
                Err(_) => {
                    let msg = "all worker threads have exited".to_string();
                    self.failed = Some(msg.clone());
                    return Err(DataError::Pipeline(msg));
                }
            }
        };
        self.next_seq += 1;
        // Let the workers produce one more batch ahead (never blocks: tickets are conserved).
        let _ = self.tickets.try_send(());
        let bpe = self.shared.batches_per_epoch;
        Ok(Batch::new(
            buffers,
            len,
            self.shared.dataset.image_shape(),
            Cursor { epoch: want / bpe, batch: want % bpe },
            self.recycle.clone(),
        ))
    }

    /// The position of the batch the next [`Pipeline::next_batch`] returns (batches produced
    /// ahead but not yet returned do not count); with a [`Share`], the start of its period.
    /// Save it in a checkpoint and pass it as [`PipelineConfig::start`] to resume.
    pub fn cursor(&self) -> Cursor {
        let bpe = self.shared.batches_per_epoch;
        let seq = self.shared.period_start(self.next_seq);
        Cursor { epoch: seq / bpe, batch: seq % bpe }
    }

    /// Batches per epoch (`len / batch_size`, rounded up when `drop_last` is off).
    pub fn batches_per_epoch(&self) -> u64 {
        self.shared.batches_per_epoch
    }

    /// Images per batch.
    pub fn batch_size(&self) -> usize {
        self.shared.batch_size
    }

    /// The training set.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.shared.dataset
    }

    /// The normalisation in use (evaluate the test set with the same one).
    pub fn normalize(&self) -> &Normalize {
        &self.normalize
    }

    /// The augmentation in use.
    pub fn augment(&self) -> Augment {
        self.augment
    }
}

impl Iterator for Pipeline {
    type Item = Result<Batch, DataError>;

    /// Endless: always `Some`.
    fn next(&mut self) -> Option<Self::Item> {
        Some(self.next_batch())
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Disconnecting the shutdown channel wakes every worker waiting for a ticket.
        self.shutdown = None;
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

struct Worker {
    shared: Arc<Shared>,
    tickets: Receiver<()>,
    free: Receiver<Buffers>,
    results: Sender<Produced>,
    shutdown: Receiver<()>,
    image_len: usize,
}

impl Worker {
    fn run(self) {
        loop {
            select! {
                recv(self.tickets) -> t => if t.is_err() { return },
                recv(self.shutdown) -> _ => return,
            }
            if self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let seq = self.shared.seq_of(self.shared.next_seq.fetch_add(1, Ordering::SeqCst));
            let mut buf = match self.free.try_recv() {
                Ok(b) => b,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                    Buffers::new(self.shared.batch_size, self.image_len)
                }
            };
            let produced = match catch_unwind(AssertUnwindSafe(|| self.shared.fill(seq, &mut buf))) {
                Ok(Ok(len)) => Ok((buf, len)),
                Ok(Err(why)) => Err(why),
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".to_string());
                    Err(format!("worker panicked on batch {seq}: {what}"))
                }
            };
            let failed = produced.is_err();
            if self.results.send((seq, produced)).is_err() || failed {
                return;
            }
        }
    }
}
