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
use crossbow_replica::catalog::{OptionSpec, SyncEntry};
use crossbow_replica::sync::{Central, LearnerBuffers, LearnerRef, Settings, StepInfo, Synchroniser, momentum_step};

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
        // A momentum-SGD step that drops its momentum when the rate drops, as the built-in
        // synchronisers do.
        momentum_step(be, info, l.params, l.grads, l.velocity, len)
    }

    /// Each device contributes the sum of its learners' differences from `z` (only when
    /// averaging): differences, so that replicas equal to `z` leave it exactly where it is
    /// (a sum of k copies divided by k need not round back to the copy).
    fn reduce_device(
        &self,
        be: &B,
        info: &StepInfo,
        ls: &[LearnerRef<'_, B>],
        c: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()> {
        if !self.averaging_now(info) {
            return Ok(());
        }
        be.fill(ViewMut::new(out, 0..len)?, 0.0)?;
        for l in ls {
            be.axpy(1.0, View::new(l.params, 0..len)?, ViewMut::new(out, 0..len)?)?;
            be.axpy(-1.0, View::new(&c.z, 0..len)?, ViewMut::new(out, 0..len)?)?;
        }
        Ok(())
    }

    /// The all-reduced total is the sum over every learner: z += total / k, the average.
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
            be.axpy(1.0 / k, View::new(&*total, 0..len)?, ViewMut::new(&mut c.z, 0..len)?)?;
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
    // The synchroniser declares its option: `--period N` (or `--sync-opt period=N`).
    let period = OptionSpec::new("period", "8", "iterations between averages, >= 1").with_flag_named("period");
    let entry =
        SyncEntry::new("periodic", "local SGD, replicas averaged every `period` iterations", |o: &SyncOptions| {
            PeriodicAveraging::from_options(o)
        });
    registry.add(entry.option(period));
    crossbow_cli::main_with(registry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbow_kernels::CpuBackend;
    use crossbow_kernels::optim::SgdConfig;
    use crossbow_replica::engine::{CpuDevices, Engine, EngineConfig, TrainBatch};
    use crossbow_replica::sync::HostAllReduce;
    use crossbow_replica::{ModelKind, Schedule};
    use crossbow_tensor::Shape;

    struct Batch(Vec<f32>, Vec<f32>);

    impl TrainBatch for Batch {
        fn images(&self) -> &[f32] {
            &self.0
        }
        fn labels(&self) -> &[f32] {
            &self.1
        }
    }

    /// The invariant every synchroniser must keep: at learning rate 0 (and no weight decay)
    /// nothing moves, bit for bit, through averagings, on one and on two devices.
    #[test]
    fn nothing_moves_at_learning_rate_zero() {
        let g = ModelKind::LeNet5.build(&Shape::new(vec![1, 12, 12]), 3).unwrap();
        for layout in [vec![1], vec![3], vec![2, 3]] {
            let cfg = EngineConfig {
                batch_size: 2,
                sgd: SgdConfig { lr: 0.0, momentum: 0.9, weight_decay: 0.0, nesterov: false },
                schedule: Schedule::Constant,
                seed: 9,
                eval_batch_size: 2,
            };
            let mut e: Engine<CpuBackend> = Engine::new(
                g.clone(),
                cfg,
                Box::new(CpuDevices { count: layout.len(), threads: 1 }),
                Box::new(PeriodicAveraging { period: 2 }),
                Box::new(HostAllReduce),
                &layout,
            )
            .unwrap();
            let z0 = e.central_to_host(0).unwrap();
            for t in 0..7u64 {
                let batches = (0..e.learners())
                    .map(|j| {
                        let x = (0..2 * 144).map(|i| ((i as u64 * 31 + t * 7 + j as u64) % 17) as f32 / 17.0).collect();
                        Batch(x, vec![(t % 3) as f32, (j % 3) as f32])
                    })
                    .collect();
                e.step(batches, 1000).unwrap();
            }
            for d in 0..layout.len() {
                assert!(
                    e.central_to_host(d).unwrap().iter().zip(&z0).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{layout:?}"
                );
                for j in 0..layout[d] {
                    let w = e.learner_params(d, j).unwrap();
                    assert!(w.iter().zip(&z0).all(|(a, b)| a.to_bits() == b.to_bits()), "{layout:?} learner {j}");
                }
            }
        }
    }
}
