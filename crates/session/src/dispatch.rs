//! Which hardware a run uses, and the one place where the CPU and CUDA paths part: a
//! backend-generic [`Job`] is run on CPU devices or GPUs by [`dispatch`]. Without the `cuda`
//! feature the kernels crate's stub answers "built without CUDA support", and asking for a
//! GPU is that error.

use crossbow_kernels::cuda::{self, CudaBackend};
use crossbow_kernels::{Backend, CpuBackend};
use crossbow_replica::Synchroniser;
use crossbow_replica::engine::{AllReduceChoice, CpuDevices, CudaDevices, DeviceFactory};
use crossbow_tensor::DeviceSpec;

use crate::error::SessionError;
use crate::registry::BuiltSynchroniser;

/// GPUs usable on this machine (ordinals), or why none can be used. Never panics, also
/// without a driver.
pub fn available_gpus() -> Result<Vec<usize>, SessionError> {
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

/// The hardware a device spec resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hardware {
    /// `count` CPU devices of `threads` threads each.
    Cpu {
        /// Number of CPU devices.
        count: usize,
        /// Threads per device, shared by its learners.
        threads: usize,
    },
    /// CUDA GPUs by ordinal.
    Cuda {
        /// CUDA device ordinals, as the driver numbers them.
        ordinals: Vec<usize>,
    },
}

impl std::fmt::Display for Hardware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hardware::Cpu { count, threads } => write!(f, "cpu:{count} ({threads} threads each)"),
            Hardware::Cuda { ordinals } => write!(f, "{}", describe(ordinals)),
        }
    }
}

/// Cores of this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Resolves `--devices`; `note` receives a line saying what `auto` chose.
pub fn resolve_hardware(
    spec: &DeviceSpec,
    threads: Option<usize>,
    note: &mut dyn FnMut(String),
) -> Result<Hardware, SessionError> {
    let cpu = |count: usize| Hardware::Cpu { count, threads: threads.unwrap_or_else(|| (cores() / count).max(1)) };
    match spec {
        DeviceSpec::Cpu(n) => {
            crate::preflight::check_cpu_devices(*n, threads, cores(), &crate::preflight::DeviceNames::FLAGS)
                .map_err(SessionError::usage)?;
            Ok(cpu(*n))
        }
        DeviceSpec::Auto => match available_gpus() {
            Ok(gpus) if !gpus.is_empty() => {
                note(format!("--devices auto: using {} CUDA GPU(s): {}", gpus.len(), describe(&gpus)));
                Ok(Hardware::Cuda { ordinals: gpus })
            }
            Ok(_) | Err(_) => {
                let hw = cpu(1);
                if let Hardware::Cpu { threads, .. } = &hw {
                    note(cpu_fallback_note(*threads));
                }
                Ok(hw)
            }
        },
        DeviceSpec::CudaAll => {
            let gpus = available_gpus().map_err(|e| SessionError::usage(format!("--devices cuda: {e}")))?;
            if gpus.is_empty() {
                return Err(SessionError::usage("--devices cuda: no CUDA GPU found"));
            }
            Ok(Hardware::Cuda { ordinals: gpus })
        }
        DeviceSpec::Cuda(list) => {
            let gpus = available_gpus().map_err(|e| SessionError::usage(format!("--devices {spec}: {e}")))?;
            for o in list {
                if !gpus.contains(o) {
                    return Err(SessionError::usage(format!(
                        "--devices {spec}: there is no cuda:{o} (this machine has {} GPU(s))",
                        gpus.len()
                    )));
                }
            }
            Ok(Hardware::Cuda { ordinals: list.clone() })
        }
    }
}

/// A piece of work generic over the backend: what [`dispatch`] runs on the hardware chosen
/// (a training run, a throughput measurement, a tuner search, ...).
pub trait Job {
    /// What the job gives back.
    type Output;

    /// Runs on devices of `factory` with `sync`; `about` describes the devices opened (one
    /// line each, for the job to print; none for CPU devices).
    fn run<B: Backend>(
        self,
        factory: Box<dyn DeviceFactory<B>>,
        sync: Box<dyn Synchroniser<B>>,
        about: Vec<String>,
    ) -> Result<Self::Output, SessionError>;
}

/// Runs `job` on `hw`: the CPU devices, or the GPUs (opened, with the all-reduce `all_reduce`
/// asks for), with the synchroniser `sync` built for that backend. The one place where the
/// CPU and CUDA paths part.
pub fn dispatch<J: Job>(
    hw: &Hardware,
    sync: BuiltSynchroniser,
    all_reduce: AllReduceChoice,
    job: J,
) -> Result<J::Output, SessionError> {
    match hw {
        Hardware::Cpu { .. } if all_reduce == AllReduceChoice::Nccl => Err(SessionError::usage(
            "--all-reduce nccl sums GPU buffers, but no GPU was found; use --all-reduce host or auto",
        )),
        Hardware::Cpu { count, threads } => {
            job.run::<CpuBackend>(Box::new(CpuDevices { count: *count, threads: *threads }), sync.cpu(), vec![])
        }
        Hardware::Cuda { ordinals } => {
            let devs = CudaDevices::open(ordinals)?.with_all_reduce(all_reduce);
            let about = devs.describe();
            job.run::<CudaBackend>(Box::new(devs), sync.gpu(), about)
        }
    }
}
