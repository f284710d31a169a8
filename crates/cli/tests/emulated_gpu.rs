//! The engine on the GPU backend, end to end, without a GPU: the kernels crate's host
//! emulator compiles the real `.cu` sources with the C++ compiler and runs every line of the
//! GPU backend's op code (cuBLAS replaced by a reference GEMM). Two learners with SMA train
//! LeNet-5 through exactly the code path `crossbow train --devices cuda:0` takes, and must
//! match the CPU run closely. Skips (saying so) when there is no C++ compiler.
#![cfg(feature = "cuda")]

use crossbow_cli::SyncOptions;
use crossbow_cli::config::{TrainConfig, TrainFile};
use crossbow_cli::report::Reporter;
use crossbow_cli::train::{build_graph, load_data, train_with};
use crossbow_kernels::cuda::emu::{EmuBackend, emu_backend};
use crossbow_replica::ReplicaError;
use crossbow_replica::engine::{CpuDevices, DeviceFactory};
use crossbow_tensor::Device;

struct EmuDevices(EmuBackend);

impl DeviceFactory<EmuBackend> for EmuDevices {
    fn devices(&self) -> Vec<Device> {
        vec![Device::Cuda(0)]
    }
    fn learner_backend(&self, _d: usize, _n: usize) -> Result<EmuBackend, ReplicaError> {
        Ok(self.0.clone())
    }
    fn device_backend(&self, _d: usize) -> Result<EmuBackend, ReplicaError> {
        Ok(self.0.clone())
    }
    fn host_threads(&self, _d: usize) -> usize {
        1
    }
}

#[test]
fn sma_training_on_the_emulated_gpu_matches_the_cpu() {
    let Some(emu) = emu_backend().expect("emulator") else {
        eprintln!("skipped: no C++ compiler for the CUDA emulator");
        return;
    };
    let cfg = TrainConfig::from_file(TrainFile {
        learners_per_device: Some("2".into()),
        train_size: Some(640),
        test_size: Some(200),
        batch_size: Some(16),
        epochs: Some(1.0),
        eval_every: Some(0.5),
        devices: Some("cpu".into()),
        workers: Some(1),
        ..TrainFile::default()
    })
    .unwrap();
    let data = load_data(&cfg).unwrap();
    let gpu = train_with(
        &cfg,
        &data,
        build_graph(&cfg, &data).unwrap(),
        Box::new(EmuDevices(emu)),
        Box::new(crossbow_sma::catalog::sma_from(&SyncOptions::from_map(cfg.sync_options.clone())).unwrap()),
        &mut Reporter::silent(),
    )
    .expect("training on the emulated GPU backend");
    let cpu = train_with(
        &cfg,
        &data,
        build_graph(&cfg, &data).unwrap(),
        Box::new(CpuDevices { count: 1, threads: 1 }),
        Box::new(crossbow_sma::catalog::sma_from(&SyncOptions::from_map(cfg.sync_options.clone())).unwrap()),
        &mut Reporter::silent(),
    )
    .unwrap();
    assert_eq!(gpu.evaluations.len(), cpu.evaluations.len());
    for (g, c) in gpu.evaluations.iter().zip(&cpu.evaluations) {
        eprintln!(
            "emulated GPU: loss {:.5} acc {:.3}; CPU: loss {:.5} acc {:.3}",
            g.train_loss, g.test_accuracy, c.train_loss, c.test_accuracy
        );
    }
    // Same data, same initialisation, same dropout masks: the runs differ only by rounding
    // (GEMM summation order), so the losses stay close for an epoch.
    for (g, c) in gpu.evaluations.iter().zip(&cpu.evaluations) {
        assert!(
            (g.train_loss - c.train_loss).abs() < 1e-2 * c.train_loss.max(0.1),
            "train loss {} vs {}",
            g.train_loss,
            c.train_loss
        );
        assert!(
            (g.test_accuracy - c.test_accuracy).abs() < 0.03,
            "test accuracy {} vs {}",
            g.test_accuracy,
            c.test_accuracy
        );
    }
    assert_eq!(gpu.devices, vec!["cuda:0".to_string()]);
}
