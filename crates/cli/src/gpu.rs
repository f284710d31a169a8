//! GPU wiring for the CLI: which GPUs exist, and training / benchmarking on them.

use crossbow_replica::{Graph, ModelKind};

use crate::bench::{BenchRow, TunerRow};
use crate::config::TrainConfig;
use crate::error::CliError;
use crate::report::{Reporter, Summary};
use crate::train::Data;

/// GPUs usable on this machine (ordinals), or why none can be used.
pub fn available_gpus() -> Result<Vec<usize>, CliError> {
    Err(CliError::usage("crossbow was built without CUDA support (build crossbow-cli with the 'cuda' feature)"))
}

/// A description of the GPUs.
pub fn describe(ordinals: &[usize]) -> String {
    ordinals.iter().map(|o| format!("cuda:{o}")).collect::<Vec<_>>().join(", ")
}

/// Trains on GPUs.
pub fn train_cuda(
    _cfg: &TrainConfig,
    _data: &Data,
    _graph: Graph,
    _ordinals: &[usize],
    _r: &mut Reporter,
) -> Result<Summary, CliError> {
    Err(CliError::usage("crossbow was built without CUDA support"))
}

/// Measures throughput on GPUs.
pub fn measure_cuda(
    _m: ModelKind,
    _g: &Graph,
    _b: usize,
    _l: usize,
    _o: &[usize],
    _w: usize,
    _i: usize,
) -> Result<BenchRow, CliError> {
    Err(CliError::usage("crossbow was built without CUDA support"))
}

/// Runs the tuner on GPUs.
pub fn tune_cuda(_m: ModelKind, _g: &Graph, _b: usize, _o: &[usize], _max: usize) -> Result<TunerRow, CliError> {
    Err(CliError::usage("crossbow was built without CUDA support"))
}
