//! Each synchroniser's work per iteration, driven through its `Synchroniser` calls exactly as
//! the engine makes them on one device: `learner_step` for each of the k learners,
//! `reduce_device`, `apply_device`, and `after_apply` for each learner when
//! `after_apply_needed` (one device, so no all-reduce).
//!
//! * Synchronisers: `sma` (paper form, α = 1/k, central momentum 0.9), `sma-local-momentum`,
//!   `sma-local-momentum-unfused` (the same with the vector ops the fused `sma_step` kernels
//!   replace: what the fusion saves), `ssgd`, `easgd` (α = 0.9/k) and `independent`; local SGD with momentum 0.9, weight decay
//!   1e-4.
//! * Buffers: flat, of ResNet-32's size (CIFAR, 466,906 parameters) for k = 1, 2, 4, 8, and of
//!   ResNet-50's (ImageNet 3x224x224, about 25.6 M) for k = 1 and 8. They are allocated and
//!   filled once, outside the timing; every synchroniser starts from `reset`.
//! * CPU: one single-threaded CPU backend per learner and one for the device, run one after
//!   the other on this thread, so a figure is the total synchronisation work of k learners on
//!   one core (the engine spreads the learner calls over its threads).
//! * GPU, when a CUDA driver and a device are found at run time (and the crate is built with
//!   its default `cuda` feature): the same cases on GPU 0, one stream per learner and one for
//!   the device, ordered with events as the engine orders them; each iteration ends with a
//!   synchronisation. Otherwise the bench prints `sync_step: skipped GPU: ...` and runs on the
//!   CPU only.
//!
//! Throughput is in bytes of the k learners' parameters (4 · k · len per iteration).
//!
//! `cargo bench -p crossbow-benches --bench sync_step` (filter with e.g. `-- cpu/resnet32/sma/`;
//! `SYNC_STEP_QUICK=1`: ResNet-32's size and k = 1, 8 only)

// Benchmarks: a failing setup or kernel call should abort the run.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use crossbow_kernels::cuda::{self, CudaDevice, DriverStatus};
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::{Backend, CpuBackend, View, ViewMut};
use crossbow_replica::ModelKind;
use crossbow_replica::sync::{Central, Independent, LearnerBuffers, LearnerRef, StepInfo, Synchroniser};
use crossbow_sma::{EaSgd, SSgd, Sma, SmaForm};
use crossbow_tensor::Shape;

/// The synchronisers, by name.
fn synchronisers<B: Backend>() -> Vec<(&'static str, Box<dyn Synchroniser<B>>)> {
    vec![
        ("sma", Box::new(Sma::new(None, 0.9))),
        ("sma-local-momentum", Box::new(Sma::new(None, 0.9).with_form(SmaForm::LocalMomentum))),
        ("sma-local-momentum-unfused", Box::new(Unfused(Sma::new(None, 0.9).with_form(SmaForm::LocalMomentum)))),
        ("ssgd", Box::new(SSgd::default())),
        ("easgd", Box::new(EaSgd::new(None))),
        ("independent", Box::new(Independent::default())),
    ]
}

/// SMA (local-momentum form) with its two element-wise updates as the separate vector ops
/// the fused `sma_step` kernels replace (the same bits; `crossbow-kernels`' sma_step tests):
/// what the fusion saves, measured (on a GPU: 4 launches per learner and 4 on the device
/// instead of 1 each). Everything else is SMA's own.
struct Unfused(Sma);

impl<B: Backend> Synchroniser<B> for Unfused {
    fn name(&self) -> &str {
        "sma-unfused"
    }
    fn settings(&self) -> crossbow_replica::Settings {
        Synchroniser::<B>::settings(&self.0)
    }
    fn learner_buffers(&self) -> usize {
        Synchroniser::<B>::learner_buffers(&self.0)
    }
    fn device_buffers(&self) -> usize {
        Synchroniser::<B>::device_buffers(&self.0)
    }
    fn set_learners(&mut self, k: usize) {
        Synchroniser::<B>::set_learners(&mut self.0, k)
    }
    fn reset(&self, be: &B, central: &mut Central<B>, learners: &mut [LearnerBuffers<'_, B>], len: usize) -> R<()> {
        self.0.reset(be, central, learners, len)
    }
    fn learner_step(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> R<()> {
        if info.learners == 1 {
            // One learner: momentum SGD, no correction (as SMA itself).
            return self.0.learner_step(be, info, l, z, len);
        }
        let alpha = 1.0 / info.learners as f32;
        let c = &mut l.sync_state[0];
        be.sub(View::new(l.params, 0..len)?, View::new(z, 0..len)?, ViewMut::new(c, 0..len)?)?;
        be.scale(alpha, ViewMut::new(c, 0..len)?)?;
        be.sgd_step(
            &info.sgd,
            ViewMut::new(l.params, 0..len)?,
            View::new(l.grads, 0..len)?,
            ViewMut::new(l.velocity, 0..len)?,
        )?;
        be.axpy(-1.0, View::new(c, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
        Ok(())
    }
    fn reduce_device(
        &self,
        be: &B,
        info: &StepInfo,
        learners: &[LearnerRef<'_, B>],
        central: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> R<()> {
        self.0.reduce_device(be, info, learners, central, out, len)
    }
    fn apply_device(
        &self,
        be: &B,
        info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> R<()> {
        if info.learners == 1 {
            return self.0.apply_device(be, info, total, central, len);
        }
        let mu = 0.9;
        let zprev = &mut central.sync_state[0];
        be.axpy(mu, View::new(&central.z, 0..len)?, ViewMut::new(total, 0..len)?)?;
        be.axpy(-mu, View::new(zprev, 0..len)?, ViewMut::new(total, 0..len)?)?;
        be.copy(View::new(&central.z, 0..len)?, ViewMut::new(zprev, 0..len)?)?;
        be.axpy(1.0, View::new(total, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
        Ok(())
    }
    fn after_apply_needed(&self, info: &StepInfo) -> bool {
        Synchroniser::<B>::after_apply_needed(&self.0, info)
    }
    fn after_apply(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> R<()> {
        self.0.after_apply(be, info, l, z, len)
    }
}

type R<T> = crossbow_replica::Result<T>;

/// Parameter count of a model from the zoo.
fn param_len(kind: ModelKind, input: &[usize], classes: usize) -> usize {
    kind.build(&Shape::new(input.to_vec()), classes).unwrap_or_else(|e| panic!("{kind}: {e}")).param_len
}

/// A deterministic host vector of `len` values in [-scale, scale).
fn pattern(len: usize, scale: f32, seed: usize) -> Vec<f32> {
    (0..len).map(|i| (((i + seed) * 7919 % 2000) as f32 / 1000.0 - 1.0) * scale).collect()
}

struct Learner<B: Backend> {
    backend: B,
    params: B::Buffer,
    grads: B::Buffer,
    velocity: B::Buffer,
    sync_state: Vec<B::Buffer>,
}

/// One device with k learners: every buffer a synchroniser here may ask for.
struct Rig<B: Backend> {
    device: B,
    learners: Vec<Learner<B>>,
    central: Central<B>,
    contribution: B::Buffer,
    len: usize,
}

fn upload<B: Backend>(be: &B, host: &[f32]) -> B::Buffer {
    let mut buf = be.alloc(host.len()).unwrap_or_else(|e| panic!("alloc: {e}"));
    be.upload(host, ViewMut::whole(&mut buf)).unwrap_or_else(|e| panic!("upload: {e}"));
    buf
}

impl<B: Backend> Rig<B> {
    fn new(make: &dyn Fn() -> B, k: usize, len: usize, params: &[f32], grads: &[f32]) -> Self {
        let device = make();
        let zeros = |be: &B| be.alloc(len).unwrap_or_else(|e| panic!("alloc: {e}"));
        let learners = (0..k)
            .map(|_| {
                let backend = make();
                Learner {
                    params: upload(&backend, params),
                    grads: upload(&backend, grads),
                    velocity: zeros(&backend),
                    sync_state: vec![zeros(&backend)],
                    backend,
                }
            })
            .collect();
        let central = Central { z: upload(&device, params), sync_state: vec![zeros(&device)] };
        let contribution = zeros(&device);
        let rig = Rig { learners, central, contribution, len, device };
        rig.synchronize();
        rig
    }

    fn synchronize(&self) {
        for l in &self.learners {
            l.backend.synchronize().unwrap();
        }
        self.device.synchronize().unwrap();
    }

    /// Tells `sync` the learner count and starts its history (as the engine does at start).
    fn start(&mut self, sync: &mut dyn Synchroniser<B>) {
        let k = self.learners.len();
        let n_state = sync.learner_buffers();
        assert!(
            n_state <= 1 && sync.device_buffers() <= 1,
            "the rig holds one state buffer per learner and per device"
        );
        sync.set_learners(k);
        let mut lbs: Vec<LearnerBuffers<'_, B>> = self
            .learners
            .iter_mut()
            .enumerate()
            .map(|(index, l)| LearnerBuffers {
                index,
                params: &mut l.params,
                grads: &l.grads,
                velocity: &mut l.velocity,
                sync_state: &mut l.sync_state[..n_state],
            })
            .collect();
        sync.reset(&self.device, &mut self.central, &mut lbs, self.len).unwrap();
        drop(lbs);
        self.synchronize();
    }

    /// One iteration's synchronisation, in the engine's order.
    fn iteration(&mut self, sync: &dyn Synchroniser<B>, info: &StepInfo) {
        let Rig { device, learners, central, contribution, len } = self;
        let len = *len;
        let n_state = sync.learner_buffers();
        let z_ready = device.record().unwrap();
        let mut done = Vec::with_capacity(learners.len());
        for (index, l) in learners.iter_mut().enumerate() {
            l.backend.wait(&z_ready).unwrap();
            let lb = LearnerBuffers {
                index,
                params: &mut l.params,
                grads: &l.grads,
                velocity: &mut l.velocity,
                sync_state: &mut l.sync_state[..n_state],
            };
            sync.learner_step(&l.backend, info, lb, &central.z, len).unwrap();
            done.push(l.backend.record().unwrap());
        }
        for e in &done {
            device.wait(e).unwrap();
        }
        let refs: Vec<LearnerRef<'_, B>> = learners
            .iter()
            .enumerate()
            .map(|(index, l)| LearnerRef {
                index,
                params: &l.params,
                grads: &l.grads,
                sync_state: &l.sync_state[..n_state],
            })
            .collect();
        sync.reduce_device(device, info, &refs, central, contribution, len).unwrap();
        drop(refs);
        sync.apply_device(device, info, contribution, central, len).unwrap();
        if sync.after_apply_needed(info) {
            let z_new = device.record().unwrap();
            for (index, l) in learners.iter_mut().enumerate() {
                l.backend.wait(&z_new).unwrap();
                let lb = LearnerBuffers {
                    index,
                    params: &mut l.params,
                    grads: &l.grads,
                    velocity: &mut l.velocity,
                    sync_state: &mut l.sync_state[..n_state],
                };
                sync.after_apply(&l.backend, info, lb, &central.z, len).unwrap();
            }
        }
        self.synchronize();
    }
}

/// Every synchroniser at every k over buffers of `len` floats, in group `name`.
fn bench_size<B: Backend>(c: &mut Criterion, name: &str, make: &dyn Fn() -> B, len: usize, ks: &[usize], big: bool) {
    let params = pattern(len, 0.1, 0);
    let grads = pattern(len, 0.01, 13);
    let sgd = SgdConfig { lr: 0.01, momentum: 0.9, weight_decay: 1e-4, nesterov: false };
    let mut g = c.benchmark_group(name);
    if big {
        g.sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
    } else {
        g.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_millis(1500));
    }
    for &k in ks {
        let mut rig = Rig::new(make, k, len, &params, &grads);
        let info = StepInfo { iteration: 0, epoch: 0.0, sgd, base_lr: sgd.lr, learners: k, lr_dropped: false };
        g.throughput(Throughput::Bytes(4 * (k * len) as u64));
        for (sync_name, mut sync) in synchronisers::<B>() {
            rig.start(&mut *sync);
            g.bench_function(BenchmarkId::new(sync_name, format!("k{k}")), |b| b.iter(|| rig.iteration(&*sync, &info)));
        }
    }
    g.finish();
}

fn bench_backend<B: Backend>(c: &mut Criterion, prefix: &str, make: &dyn Fn() -> B) {
    let r32 = param_len(ModelKind::ResNetCifar(32), &[3, 32, 32], 10);
    if quick() {
        bench_size(c, &format!("sync_step/{prefix}/resnet32"), make, r32, &[1, 8], false);
        return;
    }
    let r50 = param_len(ModelKind::ResNet50, &[3, 224, 224], 1000);
    bench_size(c, &format!("sync_step/{prefix}/resnet32"), make, r32, &[1, 2, 4, 8], false);
    bench_size(c, &format!("sync_step/{prefix}/resnet50"), make, r50, &[1, 8], true);
}

/// `SYNC_STEP_QUICK=1` (gpu-check's short call): ResNet-32's size only, k = 1 and 8.
fn quick() -> bool {
    std::env::var("SYNC_STEP_QUICK").is_ok_and(|v| v == "1")
}

/// GPU 0 when a CUDA driver and a device are found, else why not.
fn gpu() -> Result<CudaDevice, String> {
    match cuda::driver_status() {
        DriverStatus::NoDriver { .. } => Err("no CUDA driver".into()),
        DriverStatus::NotCompiled => Err("no CUDA driver (built without the `cuda` feature)".into()),
        DriverStatus::Ready { devices: 0, .. } => Err("the CUDA driver reports no device".into()),
        s @ DriverStatus::Failed { .. } => Err(s.describe()),
        DriverStatus::Ready { .. } => CudaDevice::open(0).map_err(|e| format!("cannot open GPU 0: {e}")),
    }
}

fn sync_step(c: &mut Criterion) {
    let gpu = gpu();
    match &gpu {
        Ok(dev) => println!("sync_step: GPU: {}", dev.describe()),
        Err(why) => println!("sync_step: skipped GPU: {why}"),
    }
    bench_backend(c, "cpu", &|| CpuBackend::new(0));
    if let Ok(dev) = gpu {
        bench_backend(c, "gpu", &|| dev.new_backend().unwrap_or_else(|e| panic!("GPU backend: {e}")));
    }
}

criterion_group!(benches, sync_step);
criterion_main!(benches);
