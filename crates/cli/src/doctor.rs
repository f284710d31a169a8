//! `crossbow doctor`: what CUDA this machine offers and whether every op works on every GPU.
//!
//! Prints the driver and its CUDA version, the NVRTC version, each GPU (name, memory,
//! compute capability, free memory), whether cuDNN is used and why not, the CUDA library
//! files this process actually loaded (from `/proc/self/maps`), then runs the op self-test
//! (`crossbow_kernels::testing::selftest`: every op against the CPU on small shapes) on every
//! GPU — with cuDNN as configured, and convolution and batch norm once more on the fallback
//! kernels when cuDNN is used — and prints a pass/fail table. Exit 0 when everything passed
//! or there is no GPU (it says so), 1 naming the failing ops otherwise. With `--require-gpu`
//! (`scripts/gpu-check.sh` on a GPU machine) having no usable GPU is an error too: no driver,
//! a driver without devices, or no GPU that can run the self-test exits 1 with the reason.
//!
//! Hidden flags for testing the doctor itself: `--emulator` runs the self-test on the host
//! emulator of the GPU backend instead of GPUs, `--inject-failure OP` replaces that op's case
//! with one that fails.

use clap::Args;

use crossbow_kernels::cuda::libs::{self, CudaLib};
use crossbow_kernels::cuda::{self, CudaOptions, DriverStatus};
use crossbow_kernels::testing::selftest::{self, Case, CaseResult};
use crossbow_kernels::{Backend, KernelError};

use crate::error::SessionError;

/// Flags of `crossbow doctor`.
#[derive(Args, Debug, Default)]
pub struct DoctorArgs {
    /// Only report the driver, libraries and GPUs; skip the op self-test.
    #[arg(long)]
    pub no_self_test: bool,
    /// Fail (exit 1, saying why) unless a GPU is usable: a CUDA driver, at least one device,
    /// and every device opened (and, unless --no-self-test, the self-test run on it).
    #[arg(long, conflicts_with = "emulator")]
    pub require_gpu: bool,
    /// Run the self-test on the host emulator of the GPU backend (needs a C++ compiler).
    #[arg(long, hide = true)]
    pub emulator: bool,
    /// Make this op's self-test case fail (to test the doctor's failure path).
    #[arg(long, hide = true, value_name = "OP")]
    pub inject_failure: Option<String>,
}

fn injected<B: Backend>(_: &B) {
    panic!("failure injected by --inject-failure");
}

/// The self-test cases, with `inject` (an op name) replaced by a failing case.
fn cases_with<B: Backend>(inject: Option<&str>) -> Vec<Case<B>> {
    selftest::cases::<B>()
        .into_iter()
        .map(|(op, f)| if Some(op) == inject { (op, injected::<B> as fn(&B)) } else { (op, f) })
        .collect()
}

fn check_inject(inject: Option<&str>) -> Result<(), SessionError> {
    match inject {
        Some(op) if !selftest::cases::<crossbow_kernels::CpuBackend>().iter().any(|(o, _)| *o == op) => {
            let names: Vec<&str> = selftest::cases::<crossbow_kernels::CpuBackend>().iter().map(|(o, _)| *o).collect();
            Err(SessionError::usage(format!("--inject-failure: no op '{op}' (ops: {})", names.join(", "))))
        }
        _ => Ok(()),
    }
}

/// Runs the cases on `be`, with the panic messages of failing cases kept out of the output
/// (they are in the table).
fn run_quietly<B: Backend>(device: &str, be: &B, cases: &[Case<B>]) -> Vec<CaseResult> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = selftest::run(device, be, cases);
    std::panic::set_hook(hook);
    out
}

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// `crossbow doctor`.
pub fn run(a: &DoctorArgs) -> Result<(), SessionError> {
    let inject = a.inject_failure.as_deref();
    check_inject(inject)?;
    println!("crossbow doctor ({} {})", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
    let isa = crossbow_kernels::cpu_isa().map_err(SessionError::usage)?;
    let capped =
        std::env::var(crossbow_kernels::CPU_ISA_ENV).map(|v| format!(" ({}={v})", crossbow_kernels::CPU_ISA_ENV));
    println!("CPU:     kernels use {}{}", isa.name(), capped.unwrap_or_default());
    if a.emulator {
        return emulator(inject);
    }
    let status = cuda::driver_status();
    println!("driver:  {}", status.describe());
    // NVRTC's install advice matters only where there is a driver to run its kernels.
    let no_driver = matches!(status, DriverStatus::NoDriver { .. } | DriverStatus::NotCompiled);
    match cuda::nvrtc_version() {
        Ok((ma, mi)) => println!("NVRTC:   {ma}.{mi}"),
        Err(_) if no_driver => println!("NVRTC:   not loaded (not needed without a GPU)"),
        Err(e) => println!("NVRTC:   not usable ({e})"),
    }
    let n = match &status {
        DriverStatus::Ready { devices, .. } => *devices,
        DriverStatus::Failed { reason } => {
            print_libraries();
            return Err(SessionError::run(format!("the CUDA driver is present but not usable: {reason}")));
        }
        _ => 0,
    };
    if n == 0 {
        print_libraries();
        if a.require_gpu {
            return Err(SessionError::run(format!("--require-gpu: no usable GPU: {}", no_gpu_reason(&status))));
        }
        println!("no GPU on this machine: nothing to test (exit 0)");
        return Ok(());
    }
    let mut results = Vec::new();
    let mut open_errors = Vec::new();
    // GPUs opened (and, unless --no-self-test, given a backend the self-test ran on).
    let mut usable = 0;
    for o in 0..n {
        match cuda::device_info(o) {
            Ok(i) => println!(
                "cuda:{o}:  {}, {:.1} GiB, compute capability {}.{}",
                i.name,
                gib(i.total_memory),
                i.compute_capability.0,
                i.compute_capability.1
            ),
            Err(e) => println!("cuda:{o}:  {e}"),
        }
        let mut options = CudaOptions::from_env();
        options.sync_launches = true;
        let dev = match cuda::CudaDevice::open_with(o, &options) {
            Ok(d) => d,
            Err(e) => {
                println!("         cannot be opened: {e}");
                open_errors.push(format!("cuda:{o}: {e}"));
                continue;
            }
        };
        if let Ok(m) = dev.mem_info() {
            println!("         {:.1} GiB free; kernels for {}", gib(m.free), dev.kernel_target());
        }
        match dev.cudnn_status() {
            cuda::CudnnStatus::Enabled { version } => {
                println!("         cuDNN {version}: used for convolution and batch norm")
            }
            cuda::CudnnStatus::Disabled { reason } => println!("         cuDNN not used: {reason}"),
        }
        if CudaOptions::from_env().graphs {
            println!(
                "         CUDA graphs: on (a learner's unchanged forward and backward is replayed; {}=0 turns them off)",
                cuda::env::GRAPHS
            );
        } else {
            println!("         CUDA graphs: off ({}=0)", cuda::env::GRAPHS);
        }
        println!(
            "         pinned upload buffers per learner: {} ({})",
            CudaOptions::from_env().staging_buffers,
            cuda::env::STAGING_BUFFERS
        );
        if a.no_self_test {
            usable += 1;
            continue;
        }
        let be = match dev.new_backend() {
            Ok(be) => be,
            Err(e) => {
                println!("         no backend: {e}");
                open_errors.push(format!("cuda:{o}: {e}"));
                continue;
            }
        };
        usable += 1;
        let label = if be.uses_cudnn() { format!("cuda:{o}") } else { format!("cuda:{o} no cuDNN") };
        results.extend(run_quietly(&label, &be, &cases_with(inject)));
        if be.uses_cudnn() {
            options.cudnn = false;
            options.require_cudnn = false;
            let fallback = cuda::CudaDevice::open_with(o, &options).and_then(|d| d.new_backend());
            match fallback {
                Ok(fb) => {
                    let only: Vec<Case<_>> = cases_with(inject)
                        .into_iter()
                        .filter(|(op, _)| op.starts_with("conv2d") || op.starts_with("batch_norm"))
                        .collect();
                    results.extend(run_quietly(&format!("cuda:{o} no cuDNN"), &fb, &only));
                }
                Err(e) => open_errors.push(format!("cuda:{o} without cuDNN: {e}")),
            }
        }
    }
    print_libraries();
    if a.require_gpu && usable == 0 {
        return Err(SessionError::run(format!("--require-gpu: no usable GPU: {}", open_errors.join("; "))));
    }
    finish(&results, open_errors)
}

/// Why there is no GPU to use, for `--require-gpu` (`status` reports no device).
fn no_gpu_reason(status: &DriverStatus) -> String {
    match status {
        DriverStatus::Ready { .. } => format!("{}, so no device to test", status.describe()),
        _ => status.describe(),
    }
}

fn print_libraries() {
    let loaded = libs::loaded_libraries();
    println!("libraries loaded by this process:");
    for lib in CudaLib::ALL {
        let paths: Vec<String> =
            loaded.iter().filter(|(l, _)| *l == lib).map(|(_, p)| p.display().to_string()).collect();
        let what = if paths.is_empty() { "not loaded".to_string() } else { paths.join(", ") };
        println!("  {:7} {what}", lib.stem());
    }
    for note in libs::notes() {
        println!("  note: {note}");
    }
    let algos = cuda::cudnn_conv_algorithms();
    if !algos.is_empty() {
        println!("cuDNN convolution algorithms chosen by the self-test:");
        for a in algos {
            println!("  {a}");
        }
    }
}

fn finish(results: &[CaseResult], open_errors: Vec<String>) -> Result<(), SessionError> {
    if !results.is_empty() {
        println!("\nself-test (every op against the CPU):\n{}", selftest::table(results));
    }
    let mut problems = open_errors;
    if let Err(e) = selftest::verdict(results) {
        problems.push(e);
    }
    if problems.is_empty() {
        println!("all passed");
        Ok(())
    } else {
        Err(SessionError::run(problems.join("; ")))
    }
}

fn emulator(inject: Option<&str>) -> Result<(), SessionError> {
    let be = cuda::emu::emu_backend()
        .map_err(|e: KernelError| SessionError::run(e))?
        .ok_or_else(|| SessionError::run("--emulator: no C++ compiler for the CUDA kernel emulator"))?;
    println!("device:  the host emulator of the GPU backend");
    let results = run_quietly("emulator", &be, &cases_with(inject));
    finish(&results, Vec::new())
}
