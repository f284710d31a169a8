//! The training and test sets, the model for them, and the data streams' pipelines.

use std::sync::Arc;

use crossbow_data::{
    Cursor, DEFAULT_IMAGE_SIZE, Dataset, DatasetKind, FolderOptions, LoadOptions, Normalize, Pipeline, PipelineConfig,
    Share,
};
use crossbow_replica::Graph;
use crossbow_tensor::Shape;

use crate::config::{AugmentChoice, TrainConfig};
use crate::error::SessionError;

/// The loaded training and test sets.
#[derive(Clone)]
pub struct Data {
    /// The training set (augmented by the pipeline).
    pub train: Arc<Dataset>,
    /// The test set the central model is evaluated on.
    pub test: Arc<Dataset>,
}

/// Loads (or generates) the configured dataset.
pub fn load_data(cfg: &TrainConfig) -> Result<Data, SessionError> {
    let folder = cfg.dataset == DatasetKind::Folder;
    if !folder && cfg.image_size.is_some() {
        return Err(SessionError::usage(format!(
            "{} applies to --dataset folder only ({} images are {}x{})",
            cfg.name_of("image-size"),
            cfg.dataset,
            cfg.dataset.image_shape()[1],
            cfg.dataset.image_shape()[2]
        )));
    }
    let opts = LoadOptions {
        seed: cfg.seed,
        train_size: cfg.train_size,
        test_size: cfg.test_size,
        folder: FolderOptions {
            image_size: cfg.image_size.unwrap_or(DEFAULT_IMAGE_SIZE),
            max_pixels: cfg.max_image_pixels,
            on_bad_image: cfg.on_bad_image,
            decode: cfg.decode,
        },
    };
    let (train, test) = crossbow_data::load(cfg.dataset, &cfg.data_dir, &opts)?;
    Ok(Data { train: Arc::new(train), test: Arc::new(test) })
}

/// The model for a dataset's image shape and classes.
pub fn build_graph(cfg: &TrainConfig, data: &Data) -> Result<Graph, SessionError> {
    let [c, h, w] = data.train.image_shape();
    Ok(cfg.model.build(&Shape::new(vec![c, h, w]), data.train.num_classes())?)
}

/// The pipeline of `data` for `cfg`, in batches of `batch` images.
pub(super) fn pipeline_for(
    cfg: &TrainConfig,
    data: &Data,
    batch: usize,
    prefetch: usize,
    seed: u64,
    start: Cursor,
    share: Option<Share>,
) -> Result<Pipeline, SessionError> {
    let mut pc = PipelineConfig::new(batch, seed);
    pc.start = start;
    pc.share = share;
    pc.workers = cfg.workers;
    pc.prefetch = prefetch.max(4);
    if let AugmentChoice::Set(a) = cfg.augment {
        pc.augment = Some(a);
    }
    pc.normalize = Some(normalize_for(cfg, &data.train)?);
    Ok(Pipeline::new(Arc::clone(&data.train), pc)?)
}

/// The stream of batch-norm recalibration batches of `batch` images (the engine's
/// [`crossbow_replica::engine::EngineConfig::batch_size`]), with its own seed, so the training
/// batches are the same whichever statistics evaluation uses.
pub fn calibration_pipeline(
    cfg: &TrainConfig,
    data: &Data,
    batch: usize,
    n: usize,
    start: Cursor,
) -> Result<Pipeline, SessionError> {
    pipeline_for(cfg, data, batch, n.min(8), cfg.seed ^ 0xB17_CA11B, start, None)
}

/// Images per training batch the pipeline prepares: the global batch
/// (`--global-batch-size`, split among the learners), else one learner's.
pub(super) fn train_batch(cfg: &TrainConfig) -> usize {
    cfg.global_batch_size.unwrap_or(cfg.batch_size)
}

/// The normalisation `--normalize` gives for the training set `train` (the test set is
/// normalised with the same); the error names the setting.
pub fn normalize_for(cfg: &TrainConfig, train: &Dataset) -> Result<Normalize, SessionError> {
    cfg.normalize.resolve(train).map_err(|e| {
        let why = match e {
            crossbow_data::DataError::InvalidConfig(why) => why,
            e => e.to_string(),
        };
        SessionError::usage(format!("{} {}: {why}", cfg.name_of("normalize"), cfg.normalize))
    })
}
