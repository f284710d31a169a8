//! A custom synchroniser in a few dozen lines: local SGD with periodic model averaging
//! (Lin et al., "Don't use large mini-batches, use local SGD"). Every learner takes plain SGD
//! steps on its own batches; every `period` iterations all replicas are replaced by their
//! average, which is also the central model the engine evaluates.
//!
//! Run it (LeNet-5 on the built-in synthetic digits, 4 learners on the CPU):
//!
//! ```text
//! cargo run --release -p crossbow-cli --example custom_synchroniser -- 8
//! ```
//!
//! The only thing to write is `impl Synchroniser<B>`; the engine does the rest (batches,
//! forward/backward on every learner, the cross-device all-reduce, evaluation).

use crossbow_cli::config::{TrainConfig, TrainFile};
use crossbow_cli::report::Reporter;
use crossbow_cli::train::{build_graph, cores, load_data, train_with};
use crossbow_kernels::{Backend, CpuBackend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::engine::CpuDevices;
use crossbow_replica::sync::{Central, LearnerBuffers, LearnerRef, StepInfo, Synchroniser, sgd, sum_into};

/// Periodic model averaging every `period` iterations.
struct PeriodicAveraging {
    period: u64,
}

impl PeriodicAveraging {
    fn averaging_now(&self, info: &StepInfo) -> bool {
        (info.iteration + 1).is_multiple_of(self.period)
    }
}

impl<B: Backend> Synchroniser<B> for PeriodicAveraging {
    fn name(&self) -> &str {
        "periodic-averaging"
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "period": self.period })
    }

    /// Each learner: one plain SGD step (momentum, weight decay, learning-rate schedule).
    fn learner_step(
        &self,
        be: &B,
        info: &StepInfo,
        l: LearnerBuffers<'_, B>,
        _z: &B::Buffer,
        len: usize,
    ) -> Result<()> {
        sgd(be, &info.sgd, l.params, l.grads, l.velocity, len)
    }

    /// Each device contributes the sum of its learners' weights (only when averaging).
    fn reduce_device(
        &self,
        be: &B,
        info: &StepInfo,
        ls: &[LearnerRef<'_, B>],
        _c: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()> {
        if self.averaging_now(info) { sum_into(be, ls.iter().map(|l| l.params), out, len) } else { Ok(()) }
    }

    /// The all-reduced total is the sum over every learner: z = total / k.
    fn apply_device(
        &self,
        be: &B,
        info: &StepInfo,
        total: &mut B::Buffer,
        c: &mut Central<B>,
        len: usize,
    ) -> Result<()> {
        if self.averaging_now(info) {
            let k = info.learners as f32;
            be.axpby(1.0 / k, View::new(&*total, 0..len)?, 0.0, ViewMut::new(&mut c.z, 0..len)?)?;
        }
        Ok(())
    }

    /// After averaging, every replica restarts from the average.
    fn after_apply(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        if self.averaging_now(info) {
            be.copy(View::new(z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
        }
        Ok(())
    }
}

fn main() {
    let period: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(8).max(1);
    let file = TrainFile {
        learners_per_device: Some("4".into()),
        devices: Some("cpu".into()),
        epochs: Some(2.0),
        eval_every: Some(0.5),
        ..TrainFile::default()
    };
    let run = || -> std::result::Result<(), crossbow_cli::CliError> {
        let cfg = TrainConfig::from_file(file)?;
        let data = load_data(&cfg)?;
        let graph = build_graph(&cfg, &data)?;
        let mut reporter = Reporter::new(None, false, cfg.epochs)?;
        let devices = Box::new(CpuDevices { count: 1, threads: cores() });
        let sync: Box<dyn Synchroniser<CpuBackend>> = Box::new(PeriodicAveraging { period });
        train_with(&cfg, &data, graph, devices, sync, &mut reporter)?;
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("custom_synchroniser: error: {e}");
        std::process::exit(e.exit_code());
    }
}
