//! GPU wiring for the CLI: which GPUs exist, and training / benchmarking on them through the
//! same engine as the CPU. Without the `cuda` feature the kernels crate's stub answers
//! "built without CUDA support" and every function here returns that as an error.

use crossbow_kernels::cuda::{self, CudaBackend};
use crossbow_replica::engine::CudaDevices;
use crossbow_replica::{Graph, ModelKind, Synchroniser};

use crate::bench::{BenchRow, TunerRow, measure_in, tune};
use crate::config::TrainConfig;
use crate::error::CliError;
use crate::report::{Reporter, Summary};
use crate::train::{Data, RunOptions, train_with_options};

/// GPUs usable on this machine (ordinals), or why none can be used. Never panics, also
/// without a driver.
pub fn available_gpus() -> Result<Vec<usize>, CliError> {
    let n = cuda::device_count()?;
    Ok((0..n).collect())
}

/// The line `--devices auto` prints when it trains on the CPU: one short line, in plain
/// words. The driver's own error is shown only when a driver is there and failed (no driver,
/// or a build without CUDA, is the ordinary case of a machine without a GPU).
pub fn cpu_fallback_note(threads: usize) -> String {
    let why = match cuda::device_count() {
        Ok(_) => "no GPU found".to_string(),
        Err(crossbow_kernels::KernelError::NoCudaDriver(_) | crossbow_kernels::KernelError::NotCompiledWithCuda) => {
            "no GPU (no CUDA driver)".to_string()
        }
        Err(e) => format!("the GPUs cannot be used ({e})"),
    };
    format!("--devices auto: {why}, using the CPU (cpu:1, {threads} thread{})", if threads == 1 { "" } else { "s" })
}

/// A description of the GPUs (names and memory).
pub fn describe(ordinals: &[usize]) -> String {
    ordinals
        .iter()
        .map(|&o| match cuda::device_info(o) {
            Ok(i) => format!("cuda:{o} {} ({:.0} GiB)", i.name, i.total_memory as f64 / (1u64 << 30) as f64),
            Err(_) => format!("cuda:{o}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Trains on GPUs with `sync` (and the checkpoint, resume and signal options).
pub fn train_cuda(
    cfg: &TrainConfig,
    data: &Data,
    graph: Graph,
    ordinals: &[usize],
    sync: Box<dyn Synchroniser<CudaBackend>>,
    r: &mut Reporter,
    opts: RunOptions,
) -> Result<Summary, CliError> {
    let devs = CudaDevices::open(ordinals)?.with_all_reduce(cfg.all_reduce);
    for line in devs.describe() {
        r.say(&line);
    }
    train_with_options(cfg, data, graph, Box::new(devs), sync, r, opts)
}

/// Measures throughput on GPUs with `sync`, as one rank of `world` (see
/// [`crate::bench::measure_in`]).
#[allow(clippy::too_many_arguments)]
pub fn measure_cuda(
    m: ModelKind,
    g: &Graph,
    b: usize,
    l: usize,
    o: &[usize],
    sync: Box<dyn Synchroniser<CudaBackend>>,
    warmup: usize,
    iters: usize,
    world: std::sync::Arc<dyn crossbow_replica::ProcessGroup>,
) -> Result<BenchRow, CliError> {
    measure_in(m, g, b, l, Box::new(CudaDevices::open(o)?), sync, warmup, iters, world)
}

/// Runs the tuner on GPUs with `sync` (memory budget: 90% of the free device memory).
pub fn tune_cuda(
    m: ModelKind,
    g: &Graph,
    b: usize,
    o: &[usize],
    sync: Box<dyn Synchroniser<CudaBackend>>,
    max: usize,
) -> Result<TunerRow, CliError> {
    tune(m, g, b, Box::new(CudaDevices::open(o)?), sync, max, 400)
}
