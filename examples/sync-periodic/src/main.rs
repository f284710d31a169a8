//! A custom synchroniser in a few dozen lines: local SGD with periodic model averaging
//! (Lin et al., "Don't use large mini-batches, use local SGD"). Every learner takes plain SGD
//! steps on its own batches; every `period` iterations all replicas are replaced by their
//! average, which is also the central model the engine evaluates.
//!
//! The binary is the whole `crossbow` command line (`train`, `bench`, `experiment tta`,
//! `models`) with one more synchroniser, `periodic`:
//!
//! ```text
//! cargo run --release -p crossbow-sync-periodic -- train --sync periodic --sync-opt period=16 --learners-per-device 4
//! cargo run --release -p crossbow-sync-periodic -- experiment tta --sync periodic,sma --learners 4
//! ```
//!
//! The only things to write are `impl Synchroniser<B>` (generic over the backend, so it runs on
//! CPUs and GPUs alike) and a factory that reads its options; the engine does the rest
//! (batches, forward/backward on every learner, the cross-device all-reduce, evaluation).

use std::process::ExitCode;

use crossbow_cli::{SyncOptions, SyncRegistry};
use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::sync::{Central, LearnerBuffers, LearnerRef, Settings, StepInfo, Synchroniser, sgd, sum_into};

/// Periodic model averaging every `period` iterations.
struct PeriodicAveraging {
    period: u64,
}

impl PeriodicAveraging {
    /// The factory: `--sync-opt period=N` (default 8), at least 1.
    fn from_options(opts: &SyncOptions) -> std::result::Result<Self, String> {
        let period: u64 = opts.parse_or("period", 8)?;
        if period == 0 {
            return Err("option period must be at least 1, got 0".into());
        }
        Ok(PeriodicAveraging { period })
    }

    fn averaging_now(&self, info: &StepInfo) -> bool {
        (info.iteration + 1).is_multiple_of(self.period)
    }
}

impl<B: Backend> Synchroniser<B> for PeriodicAveraging {
    fn name(&self) -> &str {
        "periodic"
    }

    fn settings(&self) -> Settings {
        Settings::new().int("period", self.period as i64)
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
            let k = info.learners.max(1) as f32;
            be.axpby(1.0 / k, View::new(&*total, 0..len)?, 0.0, ViewMut::new(&mut c.z, 0..len)?)?;
        }
        Ok(())
    }

    /// Between averagings the learners need not wait for the central model.
    fn after_apply_needed(&self, info: &StepInfo) -> bool {
        self.averaging_now(info)
    }

    /// After averaging, every replica restarts from the average.
    fn after_apply(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        if self.averaging_now(info) {
            be.copy(View::new(z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let mut registry = SyncRegistry::builtin();
    registry.register(
        "periodic",
        "local SGD, replicas averaged every `period` iterations; options: period=N [8]",
        PeriodicAveraging::from_options,
    );
    crossbow_cli::main_with(registry)
}
