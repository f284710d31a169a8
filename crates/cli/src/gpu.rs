//! GPU wiring for the CLI: which GPUs exist, and training / benchmarking on them through the
//! same engine as the CPU. Without the `cuda` feature the kernels crate's stub answers
//! "built without CUDA support" and every function here returns that as an error.

use crossbow_kernels::cuda::{self, CudaBackend, CudaDevice};
use crossbow_replica::engine::DeviceFactory;
use crossbow_replica::{Graph, ModelKind, ReplicaError, Synchroniser};
use crossbow_tensor::Device;

use crate::bench::{BenchRow, TunerRow, measure, tune};
use crate::config::TrainConfig;
use crate::error::CliError;
use crate::report::{Reporter, Summary};
use crate::train::{Data, train_with};

/// GPUs usable on this machine (ordinals), or why none can be used. Never panics, also
/// without a driver.
pub fn available_gpus() -> Result<Vec<usize>, CliError> {
    let n = cuda::device_count()?;
    Ok((0..n).collect())
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

/// GPUs as engine devices: every learner gets its own stream (a [`CudaBackend`]), the device
/// its own stream for synchronisation and evaluation; one host thread enqueues a device's
/// learners (they run concurrently on their streams).
pub struct CudaDevices {
    devices: Vec<CudaDevice>,
}

impl CudaDevices {
    /// Opens the GPUs (compiles or loads the kernels, probes cuDNN).
    pub fn open(ordinals: &[usize]) -> Result<Self, CliError> {
        let devices = ordinals.iter().map(|&o| CudaDevice::open(o)).collect::<Result<Vec<_>, _>>()?;
        Ok(CudaDevices { devices })
    }

    /// One line per device.
    pub fn describe(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.describe()).collect()
    }
}

impl DeviceFactory<CudaBackend> for CudaDevices {
    fn devices(&self) -> Vec<Device> {
        self.devices.iter().map(|d| Device::Cuda(d.ordinal())).collect()
    }

    fn learner_backend(&self, d: usize, _learners: usize) -> Result<CudaBackend, ReplicaError> {
        Ok(self.devices[d].new_backend()?)
    }

    fn device_backend(&self, d: usize) -> Result<CudaBackend, ReplicaError> {
        Ok(self.devices[d].new_backend()?)
    }

    fn host_threads(&self, _d: usize) -> usize {
        1
    }

    /// 90% of the free device memory when asked (the rest for cuBLAS/cuDNN workspaces).
    fn memory_budget(&self, d: usize) -> Option<u64> {
        self.devices[d].mem_info().ok().map(|m| m.free as u64 / 10 * 9)
    }
}

/// Trains on GPUs with `sync`.
pub fn train_cuda(
    cfg: &TrainConfig,
    data: &Data,
    graph: Graph,
    ordinals: &[usize],
    sync: Box<dyn Synchroniser<CudaBackend>>,
    r: &mut Reporter,
) -> Result<Summary, CliError> {
    let devs = CudaDevices::open(ordinals)?;
    for line in devs.describe() {
        r.say(&line);
    }
    train_with(cfg, data, graph, Box::new(devs), sync, r)
}

/// Measures throughput on GPUs with `sync`.
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
) -> Result<BenchRow, CliError> {
    measure(m, g, b, l, Box::new(CudaDevices::open(o)?), sync, warmup, iters)
}

/// Runs the tuner on GPUs with `sync` (memory budget: free device memory).
pub fn tune_cuda(
    m: ModelKind,
    g: &Graph,
    b: usize,
    o: &[usize],
    sync: Box<dyn Synchroniser<CudaBackend>>,
    max: usize,
) -> Result<TunerRow, CliError> {
    let devs = CudaDevices::open(o)?;
    let budget = devs.memory_budget(0).unwrap_or(u64::MAX);
    tune(m, g, b, Box::new(devs), sync, max, budget, 400)
}
