//! Checks made before a training run allocates anything: the CPU devices and threads asked
//! for exist, the batch fits the training set, and the memory the run will need (from the
//! memory plan: learners × bytes per learner, the central model and synchroniser buffers of
//! each device, evaluation, and the data pipeline's batches) fits each device's memory
//! budget and the memory this machine has available. A run that cannot fit is refused with
//! the numbers, naming the setting that asks for the memory, instead of growing until an
//! allocation fails.
//!
//! Every size is computed with checked arithmetic: a batch of `usize::MAX` is an error here
//! (or in [`crossbow_replica::program::lower`]), not an overflow.

use crossbow_kernels::Backend;
use crossbow_replica::engine::devices::available_memory;
use crossbow_replica::engine::{DeviceFactory, TrainPlan};
use crossbow_replica::exec::workspace_len;
use crossbow_replica::plan::plan;
use crossbow_replica::program::{Mode, Program, lower};
use crossbow_replica::{Graph, Replica, ReplicaError, Synchroniser};
use crossbow_tensor::Device;

use crate::config::{BnEval, LearnersPerDevice, TrainConfig};
use crate::error::SessionError;
use crate::train::Data;

/// Most threads a CPU device may be given (`--threads`): past this, starting the threads is
/// itself the problem.
pub const MAX_THREADS: usize = 1024;

/// How the settings checked by [`check_cpu_devices`] are named in its errors: the flags, or
/// the config file and its keys.
pub struct DeviceNames<'a> {
    /// `--devices`.
    pub devices: &'a str,
    /// `--threads`.
    pub threads: &'a str,
}

impl DeviceNames<'static> {
    /// The flags.
    pub const FLAGS: DeviceNames<'static> = DeviceNames { devices: "--devices", threads: "--threads" };
}

/// Checks `--devices cpu:N` and `--threads` against this machine (`cores` cores): at most one
/// CPU device per core, at most [`MAX_THREADS`] threads per device.
pub fn check_cpu_devices(
    devices: usize,
    threads: Option<usize>,
    cores: usize,
    names: &DeviceNames<'_>,
) -> Result<(), String> {
    let s = if cores == 1 { "" } else { "s" };
    if devices > cores {
        return Err(format!(
            "{} cpu:{devices}: this machine has {cores} core{s}, so at most cpu:{cores} (each CPU device needs a core; --threads sets the threads of each)",
            names.devices
        ));
    }
    if let Some(t) = threads
        && t > MAX_THREADS
    {
        return Err(format!(
            "{} {t}: at most {MAX_THREADS} threads per device (this machine has {cores} core{s})",
            names.threads
        ));
    }
    Ok(())
}

/// Bytes as `15.2 GB`, `3.4 MB`, `12.0 kB` or `512 bytes` (decimal units).
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        n if n >= 1_000_000_000 => format!("{:.1} GB", b / 1e9),
        n if n >= 1_000_000 => format!("{:.1} MB", b / 1e6),
        n if n >= 1_000 => format!("{:.1} kB", b / 1e3),
        n => format!("{n} bytes"),
    }
}

/// What a run will allocate, in bytes, before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNeeds {
    /// One learner: replica, synchroniser buffers, planned activations, workspace, labels.
    pub per_learner: u64,
    /// Each device besides its learners: the central model, the all-reduce buffer and the
    /// synchroniser's device buffers.
    pub fixed_per_device: u64,
    /// Device 0's evaluation: the evaluation program at the evaluation batch size (and the
    /// short last batch), batch-norm recalibration, statistics.
    pub evaluation: u64,
    /// Host memory of the data pipeline: prefetched training batches (and recalibration
    /// batches) and one evaluation batch.
    pub pipeline: u64,
}

fn too_big(what: &str) -> String {
    format!("{what} would not fit in 64 bits of bytes")
}

/// [`lower`], with its error as a plain message (the batch size and what is wrong with it).
pub fn lower_checked(graph: &Graph, batch: usize, mode: Mode) -> Result<Program, String> {
    lower(graph, batch, mode).map_err(|e| match e {
        ReplicaError::Config(m) => m,
        e => e.to_string(),
    })
}

/// Bytes of `n` `f32`s.
fn f32s(n: usize) -> Option<u64> {
    (n as u64).checked_mul(4)
}

/// The training program of `graph` at `batch` and its memory plan (the engine's own, see
/// [`TrainPlan`]), with a lowering error as a plain message.
pub fn train_plan(graph: &Graph, batch: usize) -> Result<TrainPlan, String> {
    let program = lower_checked(graph, batch, Mode::Train)?;
    let plan = plan(&program);
    Ok(TrainPlan { program: std::sync::Arc::new(program), plan: std::sync::Arc::new(plan) })
}

/// Executor bytes of `graph` lowered at `batch` in `mode` on `be`: planned slots, workspace,
/// labels, loss statistics and saved batch-norm statistics.
fn executor_bytes<B: Backend>(be: &B, graph: &Graph, batch: usize, mode: Mode) -> Result<u64, String> {
    let program = lower_checked(graph, batch, mode)?;
    let p = plan(&program);
    let ws = workspace_len(be, &program);
    [p.planned_len(), ws.max(1), batch, 2, graph.stats_len.max(1)]
        .into_iter()
        .try_fold(0u64, |acc, n| acc.checked_add(f32s(n)?))
        .ok_or_else(|| too_big("the executor"))
}

/// What sizes a run's memory besides its graph and training plan (the inputs of
/// [`memory_needs`]).
#[derive(Clone, Copy, Debug)]
pub struct MemoryAsk {
    /// Training batch per learner.
    pub batch: usize,
    /// Evaluation batch, at most `test_len`.
    pub eval_batch: usize,
    /// Test images.
    pub test_len: usize,
    /// Batch-norm recalibration batches, if any.
    pub recalibrate: Option<usize>,
    /// The synchroniser's buffers (model-sized) per learner and per device.
    pub learner_buffers: usize,
    /// See `learner_buffers`.
    pub device_buffers: usize,
    /// Floats per input image.
    pub image_len: usize,
    /// The most learners all devices together may run (it sizes the pipeline's prefetch).
    pub max_learners: usize,
    /// Data-pipeline worker threads.
    pub workers: usize,
}

/// The memory a run needs, computed from the memory plan (as the engine's
/// [`crossbow_replica::engine::Footprint`] is) without allocating. `be` is a learner's
/// backend (its thread count sizes the convolution workspace).
pub fn memory_needs<B: Backend>(
    be: &B,
    graph: &Graph,
    train: &TrainPlan,
    ask: &MemoryAsk,
) -> Result<MemoryNeeds, String> {
    let MemoryAsk {
        batch,
        eval_batch,
        test_len,
        recalibrate,
        learner_buffers,
        device_buffers,
        image_len,
        max_learners,
        workers,
    } = *ask;
    let (program, p) = (&*train.program, &*train.plan);
    let ws = workspace_len(be, program).max(1);
    let len = graph.param_len;
    // As `Engine::footprint`: replica, synchroniser buffers, activations, workspace, labels
    // and statistics.
    let per_learner = (|| {
        let replica = Replica::<B>::bytes(graph) as u64;
        let sync = (learner_buffers as u64).checked_mul(f32s(len)?)?;
        let small = f32s(batch.checked_add(2)?.checked_add(graph.stats_len)?)?;
        replica.checked_add(sync)?.checked_add(f32s(p.planned_len())?)?.checked_add(f32s(ws)?)?.checked_add(small)
    })()
    .ok_or_else(|| too_big("one learner"))?;
    let fixed_per_device =
        f32s(len).and_then(|l| (2 + device_buffers as u64).checked_mul(l)).ok_or_else(|| too_big("a device"))?;
    // The evaluator: an executor per evaluation batch size (the full one and the short last
    // batch), the recalibration executor at the training batch size, and the statistics.
    let calibrating = matches!(recalibrate, Some(n) if n > 0) && graph.stats_len > 0;
    let short = test_len % eval_batch;
    let evaluation = [
        Some(executor_bytes(be, graph, eval_batch, Mode::Eval)?),
        if short > 0 { Some(executor_bytes(be, graph, short, Mode::Eval)?) } else { Some(0) },
        if calibrating { Some(executor_bytes(be, graph, batch, Mode::Calibrate)?) } else { Some(0) },
        f32s(graph.stats_len.max(1)),
    ]
    .into_iter()
    .try_fold(0u64, |acc, b| acc.checked_add(b?))
    .ok_or_else(|| too_big("evaluation"))?;
    // Pipeline batches (images, labels and sample indices): up to `prefetch` waiting and one
    // in each worker's hands; the same for recalibration; one evaluation batch.
    let batch_bytes = |b: usize| -> Option<u64> { (b as u64).checked_mul(image_len as u64 + 2)?.checked_mul(4) };
    let prefetch = max_learners.saturating_mul(2).max(4).saturating_add(workers) as u64;
    let calibration_batches = match recalibrate {
        Some(n) if calibrating => n.clamp(4, 8).saturating_add(workers) as u64,
        _ => 0,
    };
    let pipeline = (|| {
        prefetch
            .checked_add(calibration_batches)?
            .checked_mul(batch_bytes(batch)?)?
            .checked_add(batch_bytes(eval_batch)?)
    })()
    .ok_or_else(|| too_big("the data pipeline"))?;
    Ok(MemoryNeeds { per_learner, fixed_per_device, evaluation, pipeline })
}

/// What the run asks of one device, for the verdict.
#[derive(Clone, Debug)]
pub struct DeviceAsk {
    /// The device (`cpu:0`, `cuda:1`).
    pub device: Device,
    /// Learners it starts with.
    pub learners: usize,
    /// Its memory budget, if known.
    pub budget: Option<u64>,
}

/// How the settings that size memory are named in messages, with their values.
#[derive(Clone, Debug)]
pub struct Names {
    /// `--learners-per-device 10000` (or the file and key), when the count is fixed.
    pub learners: Option<String>,
    /// `--batch-size 64` (or the file and key).
    pub batch: String,
    /// `--eval-batch-size 500` (or the file and key).
    pub eval_batch: String,
    /// The batch size per learner (advice depends on whether there is anything to lower).
    pub batch_size: usize,
    /// Folder data: images of `--image-size` can be made smaller.
    pub folder: bool,
}

impl Names {
    /// What to lower when `subject` asks for too much with `learners` learners.
    fn advice(&self, subject: &str, learners: usize) -> String {
        let images = if self.folder { " or smaller images (--image-size)" } else { "" };
        if *subject == self.eval_batch {
            format!("use a smaller {}", self.eval_batch.split(' ').next().unwrap_or("--eval-batch-size"))
        } else if learners > 1 {
            format!("use fewer learners, smaller batches{images}")
        } else if self.batch_size > 1 {
            format!("use a smaller batch{images}")
        } else if self.folder {
            "even one learner at batch 1 does not fit: use smaller images (--image-size) or a smaller model".into()
        } else {
            "even one learner at batch 1 does not fit: use a smaller model".into()
        }
    }
}

/// Refuses a run whose memory does not fit: each device's learners, fixed buffers and (on
/// device 0) evaluation against its budget; and the host memory (the pipeline, plus the
/// devices' memory when they are CPU devices) against what this machine has available.
pub fn memory_verdict(
    needs: &MemoryNeeds,
    asks: &[DeviceAsk],
    available: Option<u64>,
    names: &Names,
) -> Result<(), String> {
    let mut host = needs.pipeline;
    for (d, ask) in asks.iter().enumerate() {
        let learners = (ask.learners as u64).saturating_mul(needs.per_learner);
        let evaluation = if d == 0 { needs.evaluation } else { 0 };
        let need = learners.saturating_add(needs.fixed_per_device).saturating_add(evaluation);
        if matches!(ask.device, Device::Cpu(_)) {
            host = host.saturating_add(need);
        }
        let Some(budget) = ask.budget else { continue };
        if need <= budget {
            continue;
        }
        let subject = match &names.learners {
            Some(l) if ask.learners > 1 && learners >= evaluation => l.clone(),
            _ if evaluation > learners => names.eval_batch.clone(),
            _ => names.batch.clone(),
        };
        let cpus = asks.iter().filter(|a| matches!(a.device, Device::Cpu(_))).count();
        let whose = match (ask.device, available) {
            (Device::Cpu(_), Some(avail)) => format!(
                " (half of the {} this machine has available{})",
                human_bytes(avail),
                if cpus > 1 { format!(", shared by {cpus} CPU devices") } else { String::new() }
            ),
            (Device::Cuda(_), _) => " (90% of its free memory)".into(),
            _ => String::new(),
        };
        return Err(format!(
            "{subject} needs {} on {} ({} learner{} x {}, {} for the central model and synchroniser, {} for evaluation), more than its memory budget of {}{whose}; {}",
            human_bytes(need),
            ask.device,
            ask.learners,
            if ask.learners == 1 { "" } else { "s" },
            human_bytes(needs.per_learner),
            human_bytes(needs.fixed_per_device),
            human_bytes(evaluation),
            human_bytes(budget),
            names.advice(&subject, ask.learners),
        ));
    }
    match available {
        Some(avail) if host > avail => {
            let subject = match &names.learners {
                Some(l) if needs.pipeline < host / 2 => l.clone(),
                _ => names.batch.clone(),
            };
            Err(format!(
                "{subject} needs {} of this machine's memory ({} of it for prefetched batches), more than the {} it has available; {}",
                human_bytes(host),
                human_bytes(needs.pipeline),
                human_bytes(avail),
                names.advice(&subject, asks.iter().map(|a| a.learners).max().unwrap_or(1))
            ))
        }
        _ => Ok(()),
    }
}

/// Everything checked before [`crate::train::train_with`] starts its engine: the batch fits
/// the training set, and the memory the run needs fits (see [`memory_verdict`]). With
/// `--learners-per-device auto` the check is for one learner per device (the tuner's start;
/// it adds learners only while they fit the budget). Returns the training program and its
/// memory plan the check measured, for the engine to run (the graph is lowered once).
pub fn check_run<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    graph: &Graph,
    factory: &dyn DeviceFactory<B>,
    sync: &dyn Synchroniser<B>,
) -> Result<TrainPlan, SessionError> {
    let train_len = data.train.len();
    if cfg.batch_size > train_len {
        return Err(SessionError::usage(format!(
            "{} {} is larger than the {} train set ({train_len} images)",
            cfg.name_of("batch-size"),
            cfg.batch_size,
            cfg.dataset
        )));
    }
    let devices = factory.devices();
    let k = match cfg.learners_per_device {
        LearnersPerDevice::Auto => 1,
        LearnersPerDevice::Fixed(m) => m,
    };
    let most = match cfg.learners_per_device {
        LearnersPerDevice::Auto => cfg.max_learners,
        LearnersPerDevice::Fixed(m) => m,
    }
    .saturating_mul(devices.len());
    let be = factory.learner_backend(0, k)?;
    let eval_batch = cfg.eval_batch_size.min(data.test.len().max(1));
    let recalibrate = match cfg.bn_eval {
        BnEval::Recalibrate(n) => Some(n),
        BnEval::LearnerMean | BnEval::FirstLearner => None,
    };
    let image_len = data.train.image_shape().iter().product();
    let bad_batch = |e: String| SessionError::usage(format!("{} {}: {e}", cfg.name_of("batch-size"), cfg.batch_size));
    let train = train_plan(graph, cfg.batch_size).map_err(bad_batch)?;
    let ask = MemoryAsk {
        batch: cfg.batch_size,
        eval_batch,
        test_len: data.test.len(),
        recalibrate,
        learner_buffers: sync.learner_buffers(),
        device_buffers: sync.device_buffers(),
        image_len,
        max_learners: most,
        workers: cfg.workers,
    };
    let needs = memory_needs(&be, graph, &train, &ask)
        .map_err(|e| SessionError::usage(format!("{} {}: {e}", cfg.name_of("batch-size"), cfg.batch_size)))?;
    let asks: Vec<DeviceAsk> = devices
        .iter()
        .enumerate()
        .map(|(d, &device)| DeviceAsk { device, learners: k, budget: factory.memory_budget(d) })
        .collect();
    let eval_note = if cfg.eval_batch_size > eval_batch {
        format!(" (the whole test set, {eval_batch} images, in one batch)")
    } else {
        String::new()
    };
    let names = Names {
        learners: matches!(cfg.learners_per_device, LearnersPerDevice::Fixed(_))
            .then(|| format!("{} {k}", cfg.name_of("learners-per-device"))),
        batch: format!("{} {}", cfg.name_of("batch-size"), cfg.batch_size),
        eval_batch: format!("{} {}{eval_note}", cfg.name_of("eval-batch-size"), cfg.eval_batch_size),
        batch_size: cfg.batch_size,
        folder: cfg.dataset == crossbow_data::DatasetKind::Folder,
    };
    memory_verdict(&needs, &asks, available_memory(), &names).map_err(SessionError::usage)?;
    // One iteration (a batch per learner) must not be more than an epoch.
    if let LearnersPerDevice::Fixed(m) = cfg.learners_per_device {
        let per_iteration = m.saturating_mul(devices.len()).saturating_mul(cfg.batch_size);
        if per_iteration > train_len {
            return Err(SessionError::usage(format!(
                "{} {m} x {} {} = {per_iteration} images per iteration (on {} device{}) is more than the {} train set ({train_len} images): an iteration would be more than an epoch; use fewer learners or a smaller batch",
                cfg.name_of("learners-per-device"),
                cfg.name_of("batch-size"),
                cfg.batch_size,
                devices.len(),
                if devices.len() == 1 { "" } else { "s" },
                cfg.dataset
            )));
        }
    }
    Ok(train)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(learners: Option<&str>) -> Names {
        Names {
            learners: learners.map(String::from),
            batch: "--batch-size 32".into(),
            eval_batch: "--eval-batch-size 500".into(),
            batch_size: 32,
            folder: false,
        }
    }

    const NEEDS: MemoryNeeds =
        MemoryNeeds { per_learner: 1_520_000, fixed_per_device: 500_000, evaluation: 9_000_000, pipeline: 2_000_000 };

    /// Issue 50, item 22: the advice names only what can still be lowered.
    #[test]
    fn the_advice_names_what_can_be_lowered() {
        let asks = [DeviceAsk { device: Device::Cpu(0), learners: 1, budget: Some(1_000_000) }];
        let big = MemoryNeeds { per_learner: 8_000_000, evaluation: 1_000, ..NEEDS };
        let one = Names { batch_size: 1, folder: true, batch: "--batch-size 1".into(), ..names(None) };
        let e = memory_verdict(&big, &asks, None, &one).unwrap_err();
        assert!(
            e.ends_with(
                "even one learner at batch 1 does not fit: use smaller images (--image-size) or a smaller model"
            ),
            "{e}"
        );
        assert!(!e.contains("fewer learners"), "{e}");
        let e = memory_verdict(&big, &asks, None, &Names { folder: true, ..names(None) }).unwrap_err();
        assert!(e.ends_with("use a smaller batch or smaller images (--image-size)"), "{e}");
        let many = [DeviceAsk { device: Device::Cpu(0), learners: 4, budget: Some(1_000_000) }];
        let e = memory_verdict(&big, &many, None, &names(Some("--learners-per-device 4"))).unwrap_err();
        assert!(e.ends_with("use fewer learners, smaller batches"), "{e}");
    }

    #[test]
    fn too_many_learners_are_refused_with_the_numbers() {
        let asks = [DeviceAsk { device: Device::Cpu(0), learners: 10_000, budget: Some(10_500_000_000) }];
        let e = memory_verdict(&NEEDS, &asks, Some(21_000_000_000), &names(Some("--learners-per-device 10000")))
            .unwrap_err();
        assert!(e.starts_with("--learners-per-device 10000 needs 15.2 GB on cpu:0 (10000 learners x 1.5 MB"), "{e}");
        assert!(e.contains("memory budget of 10.5 GB (half of the 21.0 GB this machine has available)"), "{e}");
        // 6000 learners fit the budget.
        let asks = [DeviceAsk { device: Device::Cpu(0), learners: 6000, budget: Some(10_500_000_000) }];
        assert!(memory_verdict(&NEEDS, &asks, Some(21_000_000_000), &names(Some("x"))).is_ok());
    }

    #[test]
    fn the_setting_that_asks_for_the_memory_is_named() {
        // One learner too big: the batch.
        let asks = [DeviceAsk { device: Device::Cuda(0), learners: 1, budget: Some(5_000_000) }];
        let big = MemoryNeeds { per_learner: 8_000_000, evaluation: 1_000, ..NEEDS };
        let e = memory_verdict(&big, &asks, None, &names(None)).unwrap_err();
        assert!(e.starts_with("--batch-size 32 needs 8.5 MB on cuda:0") && e.contains("90% of its free memory"), "{e}");
        // Evaluation too big.
        let e = memory_verdict(&NEEDS, &asks, None, &names(None)).unwrap_err();
        assert!(e.starts_with("--eval-batch-size 500 needs"), "{e}");
        // Only device 0 evaluates.
        let asks = [
            DeviceAsk { device: Device::Cuda(0), learners: 1, budget: None },
            DeviceAsk { device: Device::Cuda(1), learners: 2, budget: Some(4_000_000) },
        ];
        assert!(memory_verdict(&NEEDS, &asks, None, &names(None)).is_ok());
    }

    #[test]
    fn host_memory_counts_cpu_devices_and_the_pipeline() {
        let asks = [
            DeviceAsk { device: Device::Cpu(0), learners: 4, budget: None },
            DeviceAsk { device: Device::Cpu(1), learners: 4, budget: None },
        ];
        // 2 x (4 x 1.52 + 0.5) + 9 + 2 MB = 24.16 MB.
        let e = memory_verdict(&NEEDS, &asks, Some(24_000_000), &names(Some("--learners-per-device 4"))).unwrap_err();
        assert!(e.starts_with("--learners-per-device 4 needs 24.2 MB of this machine's memory (2.0 MB of it for prefetched batches), more than the 24.0 MB"), "{e}");
        assert!(memory_verdict(&NEEDS, &asks, Some(24_200_000), &names(None)).is_ok());
        assert!(memory_verdict(&NEEDS, &asks, None, &names(None)).is_ok(), "unknown: not refused");
        // GPU learners are not host memory.
        let gpus = [DeviceAsk { device: Device::Cuda(0), learners: 400, budget: None }];
        assert!(memory_verdict(&NEEDS, &gpus, Some(12_000_000), &names(None)).is_ok());
    }

    #[test]
    fn devices_and_threads_are_bounded_by_the_machine() {
        let flags = DeviceNames::FLAGS;
        assert!(check_cpu_devices(2, None, 2, &flags).is_ok());
        let e = check_cpu_devices(999, None, 2, &flags).unwrap_err();
        assert!(e.starts_with("--devices cpu:999: this machine has 2 cores, so at most cpu:2"), "{e}");
        let e = check_cpu_devices(1, Some(100_000), 2, &flags).unwrap_err();
        assert_eq!(e, "--threads 100000: at most 1024 threads per device (this machine has 2 cores)");
        assert!(check_cpu_devices(1, Some(MAX_THREADS), 1, &flags).is_ok());
        let file = DeviceNames { devices: "config file r.toml: devices", threads: "config file r.toml: threads" };
        let e = check_cpu_devices(3, None, 1, &file).unwrap_err();
        assert!(e.starts_with("config file r.toml: devices cpu:3: this machine has 1 core, so"), "{e}");
    }

    #[test]
    fn sizes_read_in_decimal_units() {
        assert_eq!(human_bytes(15_200_000_000), "15.2 GB");
        assert_eq!(human_bytes(1_520_000), "1.5 MB");
        assert_eq!(human_bytes(12_000), "12.0 kB");
        assert_eq!(human_bytes(512), "512 bytes");
    }
}
