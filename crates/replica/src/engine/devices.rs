//! What a device is to the engine: a [`DeviceFactory`] makes the backends of a device's
//! learners and of its device-level work, and says how much memory its learners may use.
//! [`CpuDevices`] are groups of CPU threads; [`CudaDevices`] are GPUs (one stream per
//! learner).

use crossbow_kernels::Backend;
use crossbow_kernels::CpuBackend;
use crossbow_kernels::cuda::{CudaBackend, CudaDevice};
use crossbow_tensor::Device;

use super::nccl::{AllReduceChoice, NcclAllReduce, NcclOffer};
use crate::error::{ReplicaError, Result};
use crate::sync::AllReduce;

/// Makes backends for the engine's devices.
pub trait DeviceFactory<B: Backend>: Send + Sync {
    /// The devices, in order.
    fn devices(&self) -> Vec<Device>;
    /// A backend for one learner of device `d` when `learners` learners share the device.
    fn learner_backend(&self, d: usize, learners: usize) -> Result<B>;
    /// The backend for device-level work (synchronisation, evaluation) on device `d`.
    fn device_backend(&self, d: usize) -> Result<B>;
    /// How many of device `d`'s learners may run at once on host threads (the CPU cores of a
    /// CPU device; 1 for a GPU, whose learners run concurrently on streams).
    fn host_threads(&self, d: usize) -> usize;
    /// Device memory available to learners, in bytes, if known (the tuner's budget).
    fn memory_budget(&self, _d: usize) -> Option<u64> {
        None
    }
    /// Whether a learner's backend depends on how many learners share the device (a CPU
    /// device splits its threads among them), so learners get new backends when the count
    /// changes.
    fn rebind_on_change(&self) -> bool {
        false
    }
    /// Whether a device's work has finished when its host thread returns from it (CPU), so
    /// that the host time of a device's part of an iteration is its compute time. A GPU's
    /// launches are asynchronous: its learners' compute time is then taken as the
    /// iteration's.
    fn synchronous(&self) -> bool {
        true
    }
    /// What these devices offer for an NCCL all-reduce (see [`super::nccl`]): by default
    /// devices that are not GPUs.
    fn nccl_offer(&self, _world_size: usize) -> NcclOffer {
        NcclOffer::not_cuda(self.devices().len())
    }
    /// An NCCL all-reduce over `backends` (the device backends, in device order) as ranks
    /// `first_rank ..` of a communicator of `ranks` GPUs identified by `id` (a collective).
    /// Only called when every rank's [`DeviceFactory::nccl_offer`] allowed it.
    fn nccl_all_reduce(
        &self,
        _backends: &[&B],
        _id: &crossbow_kernels::cuda::nccl::UniqueId,
        _first_rank: usize,
        _ranks: usize,
    ) -> Result<Box<dyn AllReduce<B>>> {
        Err(ReplicaError::Config("NCCL sums GPU buffers only; these devices are not GPUs".into()))
    }
}

/// CPU devices: `count` devices of `threads` threads each. A device's learners share its
/// threads; a device with fewer learners than threads gives each learner several threads for
/// its ops.
#[derive(Clone, Debug)]
pub struct CpuDevices {
    /// Number of CPU devices, each with its own learners and copy of the central model.
    pub count: usize,
    /// Threads per device, shared among its learners (each gets at least one).
    pub threads: usize,
}

impl DeviceFactory<CpuBackend> for CpuDevices {
    fn devices(&self) -> Vec<Device> {
        (0..self.count).map(Device::Cpu).collect()
    }

    fn learner_backend(&self, d: usize, learners: usize) -> Result<CpuBackend> {
        Ok(CpuBackend::with_threads(d, (self.threads / learners.max(1)).max(1))?)
    }

    fn device_backend(&self, d: usize) -> Result<CpuBackend> {
        Ok(CpuBackend::with_threads(d, self.threads.max(1))?)
    }

    fn host_threads(&self, _d: usize) -> usize {
        self.threads.max(1)
    }

    /// [`cpu_memory_budget`] for this many CPU devices.
    fn memory_budget(&self, _d: usize) -> Option<u64> {
        Some(cpu_memory_budget(self.count))
    }

    fn rebind_on_change(&self) -> bool {
        true
    }
}

/// Memory a CPU device may give its learners: half of the available memory, shared among
/// `devices` CPU devices (read from /proc/meminfo; 4 GiB per device when unknown).
pub fn cpu_memory_budget(devices: usize) -> u64 {
    match available_memory() {
        Some(bytes) => bytes / 2 / devices.max(1) as u64,
        None => 4 << 30,
    }
}

/// The memory this machine has available for new allocations, in bytes (`MemAvailable` of
/// /proc/meminfo), when known.
pub fn available_memory() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().as_deref().and_then(mem_available)
}

/// `MemAvailable` of a /proc/meminfo text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .and_then(|kb| kb.checked_mul(1024))
}

/// GPUs as engine devices: every learner gets its own stream (a [`CudaBackend`]), the device
/// its own stream for synchronisation and evaluation; one host thread enqueues a device's
/// learners (they run concurrently on their streams). Without the kernels crate's `cuda`
/// feature, opening a GPU fails with "built without CUDA support".
pub struct CudaDevices {
    devices: Vec<CudaDevice>,
    all_reduce: AllReduceChoice,
}

impl CudaDevices {
    /// Opens the GPUs `ordinals` (compiles or loads the kernels, probes cuDNN).
    pub fn open(ordinals: &[usize]) -> Result<Self> {
        let devices = ordinals.iter().map(|&o| CudaDevice::open(o)).collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(CudaDevices { devices, all_reduce: AllReduceChoice::default() })
    }

    /// How the GPUs' contributions are summed (`--all-reduce`; default `auto`).
    pub fn with_all_reduce(mut self, choice: AllReduceChoice) -> Self {
        self.all_reduce = choice;
        self
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

    fn learner_backend(&self, d: usize, _learners: usize) -> Result<CudaBackend> {
        Ok(self.devices[d].new_backend()?)
    }

    fn device_backend(&self, d: usize) -> Result<CudaBackend> {
        Ok(self.devices[d].new_backend()?)
    }

    fn host_threads(&self, _d: usize) -> usize {
        1
    }

    fn synchronous(&self) -> bool {
        false
    }

    /// 90% of the free device memory when asked (the rest for cuBLAS/cuDNN workspaces).
    fn memory_budget(&self, d: usize) -> Option<u64> {
        self.devices[d].mem_info().ok().map(|m| m.free as u64 / 10 * 9)
    }

    /// NCCL is loaded here only when it may be used: not for `host`, nor for `auto` with a
    /// single GPU in a single process (nothing to sum).
    fn nccl_offer(&self, world_size: usize) -> NcclOffer {
        let needed = match self.all_reduce {
            AllReduceChoice::Host => false,
            AllReduceChoice::Auto => self.devices.len() > 1 || world_size > 1,
            AllReduceChoice::Nccl => true,
        };
        let ready = if needed {
            crossbow_kernels::cuda::nccl::status().map(|_| ()).map_err(|e| e.to_string())
        } else {
            Err("NCCL not needed, not loaded".into())
        };
        NcclOffer { choice: self.all_reduce, devices: self.devices.len(), all_cuda: true, ready }
    }

    fn nccl_all_reduce(
        &self,
        backends: &[&CudaBackend],
        id: &crossbow_kernels::cuda::nccl::UniqueId,
        first_rank: usize,
        ranks: usize,
    ) -> Result<Box<dyn AllReduce<CudaBackend>>> {
        Ok(Box::new(NcclAllReduce::new(id, first_rank, ranks, backends)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   21000000 kB\n";
        assert_eq!(mem_available(text), Some(21_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
        assert_eq!(mem_available(&format!("MemAvailable: {} kB\n", u64::MAX)), None);
    }
}
