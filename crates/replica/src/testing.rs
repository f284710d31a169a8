//! Test support (feature `testing`): engines on any backend of
//! [`crossbow_kernels::testing::TestBackend`], so that one engine or synchroniser test body
//! runs on the CPU, the GPU kernel emulator and a real GPU through
//! [`crossbow_kernels::test_backends!`].

use crossbow_kernels::testing::TestBackend;
use crossbow_tensor::Device;

use crate::engine::DeviceFactory;
use crate::error::Result;

/// `count` engine devices that all live on `base`'s device: every learner and every device's
/// own work gets a sibling backend (on a GPU its own stream), as the real device factories do.
pub struct TestDevices<B: TestBackend> {
    base: B,
    count: usize,
}

impl<B: TestBackend> TestDevices<B> {
    /// `count` devices on `base`'s device.
    pub fn new(base: &B, count: usize) -> Result<Self> {
        Ok(TestDevices { base: base.sibling()?, count })
    }
}

impl<B: TestBackend> DeviceFactory<B> for TestDevices<B> {
    fn devices(&self) -> Vec<Device> {
        vec![self.base.device(); self.count]
    }

    fn learner_backend(&self, _d: usize, _learners: usize) -> Result<B> {
        Ok(self.base.sibling()?)
    }

    fn device_backend(&self, _d: usize) -> Result<B> {
        Ok(self.base.sibling()?)
    }

    fn host_threads(&self, _d: usize) -> usize {
        1
    }
}

/// Ranks of one process group as threads of one process: a [`crate::ProcessGroup`] for tests
/// of what several ranks agree on, without MPI. Every collective is an all-gather of bytes
/// (two barriers); the sums add in rank order, as `MpiGroup` does, so every rank gets the
/// same bits.
pub struct ThreadGroup {
    rank: usize,
    size: usize,
    shared: std::sync::Arc<(std::sync::Barrier, std::sync::Mutex<Vec<Vec<u8>>>)>,
}

impl ThreadGroup {
    /// The `size` ranks of a new group, rank `r` at index `r` (hand each to its own thread).
    pub fn group(size: usize) -> Vec<ThreadGroup> {
        let shared = std::sync::Arc::new((std::sync::Barrier::new(size), std::sync::Mutex::new(vec![vec![]; size])));
        (0..size).map(|rank| ThreadGroup { rank, size, shared: std::sync::Arc::clone(&shared) }).collect()
    }

    /// Every rank's `mine`, by rank.
    fn exchange(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        let (barrier, slots) = &*self.shared;
        slots.lock().unwrap_or_else(|e| e.into_inner())[self.rank] = mine;
        barrier.wait();
        let all = slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        barrier.wait();
        all
    }
}

impl crate::ProcessGroup for ThreadGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        let all = self.exchange(buf.iter().flat_map(|v| v.to_le_bytes()).collect());
        buf.fill(0.0);
        for part in &all {
            for (b, c) in buf.iter_mut().zip(part.chunks_exact(4)) {
                *b += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Ok(())
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        let all = self.exchange(buf.iter().flat_map(|v| v.to_le_bytes()).collect());
        buf.fill(0.0);
        for part in &all {
            for (b, c) in buf.iter_mut().zip(part.chunks_exact(8)) {
                *b += f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            }
        }
        Ok(())
    }

    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        let all = self.exchange(value.to_le_bytes().to_vec());
        Ok(all.iter().map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect())
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let all = self.exchange(buf.clone());
        *buf = all.get(root).cloned().unwrap_or_default();
        Ok(())
    }

    fn gather_bytes(&self, root: usize, part: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.exchange(part.to_vec());
        Ok(if self.rank == root { all } else { vec![] })
    }
}

/// The engine test harness every crate's tests share (replica, sma, ako and their
/// integration tests): deterministic batches, CPU engines, bit-for-bit comparison.
pub mod harness {
    // Test support: a failure to build an engine or run a step should fail the calling test.
    #![allow(clippy::unwrap_used)]

    use crossbow_kernels::optim::SgdConfig;
    use crossbow_kernels::testing::random_vec;
    use crossbow_kernels::{Backend, CpuBackend, View, ViewMut};
    use crossbow_tensor::{Rng, Shape};

    use crate::engine::{CpuDevices, Engine, EngineConfig, TrainBatch};
    use crate::sync::{Central, HostAllReduce, LearnerBuffers, LearnerRef, StepInfo};
    use crate::{Graph, ModelKind, Schedule, Synchroniser};

    /// Samples per epoch the harness's steps count with (large: no schedule step unless a
    /// test asks for one).
    pub const EPOCH: usize = 10_000;

    /// A batch of images and labels (class indices as `f32`).
    #[derive(Clone, Debug)]
    pub struct Batch {
        /// Images, `[b, c, h, w]` flattened.
        pub x: Vec<f32>,
        /// Labels.
        pub y: Vec<f32>,
    }

    impl TrainBatch for Batch {
        fn images(&self) -> &[f32] {
            &self.x
        }
        fn labels(&self) -> &[f32] {
            &self.y
        }
    }

    impl Batch {
        /// The batches joined into one (their images and labels in order).
        pub fn join(parts: &[Batch]) -> Batch {
            Batch {
                x: parts.iter().flat_map(|p| p.x.clone()).collect(),
                y: parts.iter().flat_map(|p| p.y.clone()).collect(),
            }
        }
    }

    /// LeNet-5 on 1×12×12 images, 4 classes: every kind of layer the invariants need, small.
    pub fn small_lenet() -> Graph {
        ModelKind::LeNet5.build(&Shape::new(vec![1, 12, 12]), 4).unwrap()
    }

    /// ResNet-8 on 3×6×6 images, 4 classes: batch norm and residual additions, small.
    pub fn small_resnet() -> Graph {
        ModelKind::ResNetCifar(8).build(&Shape::new(vec![3, 6, 6]), 4).unwrap()
    }

    /// Batch `j` of iteration `t` for `g`: `b` deterministic random images and labels
    /// (independent of the layout, so that layouts can be compared).
    pub fn batch(g: &Graph, b: usize, seed: u64, t: u64, j: usize) -> Batch {
        let per: usize = g.input_shape().dims().iter().product();
        let s = seed ^ (t << 20) ^ (j as u64 * 7919);
        let mut r = Rng::new(s);
        Batch { x: random_vec(s, b * per, 1.0), y: (0..b).map(|_| r.below(g.classes) as f32).collect() }
    }

    /// Momentum SGD at rate 0.05 with weight decay 1e-3.
    pub fn sgd() -> SgdConfig {
        SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-3, nesterov: false }
    }

    /// An engine of `g` at batch `b` on `layout.len()` CPU devices of one thread, `layout[d]`
    /// learners on device `d`, seed 5.
    pub fn engine(
        g: &Graph,
        b: usize,
        layout: &[usize],
        sync: Box<dyn Synchroniser<CpuBackend>>,
        sgd: SgdConfig,
        schedule: Schedule,
    ) -> Engine<CpuBackend> {
        let cfg = EngineConfig { batch_size: b, sgd, schedule, seed: 5, eval_batch_size: 8 };
        Engine::new(
            g.clone(),
            cfg,
            Box::new(CpuDevices { count: layout.len(), threads: 1 }),
            sync,
            Box::new(HostAllReduce),
            layout,
        )
        .unwrap()
    }

    /// Iteration `t`: batch `j` of `t` for every learner `j`, an epoch of [`EPOCH`].
    pub fn step(e: &mut Engine<CpuBackend>, g: &Graph, b: usize, seed: u64, t: u64) {
        let bs = (0..e.learners()).map(|j| batch(g, b, seed, t, j)).collect();
        e.step(bs, EPOCH).unwrap();
    }

    /// Iterations `0..iters` ([`step`]).
    pub fn run(e: &mut Engine<CpuBackend>, g: &Graph, b: usize, seed: u64, iters: u64) {
        for t in 0..iters {
            step(e, g, b, seed, t);
        }
    }

    /// Bit-for-bit equality, reporting the first difference (not the whole vector).
    #[track_caller]
    pub fn assert_same(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
            panic!("{what}: first difference at [{i}]: {} vs {}", a[i], b[i]);
        }
    }

    /// Every learner's parameters, device by device.
    pub fn all_params(e: &Engine<CpuBackend>) -> Vec<Vec<f32>> {
        let mut out = vec![];
        for (d, &m) in e.layout().iter().enumerate() {
            for j in 0..m {
                out.push(e.learner_params(d, j).unwrap());
            }
        }
        out
    }

    /// The engine's call sequence for one CPU device, driven directly with gradients the test
    /// chooses (for properties that need exact gradients: Ako's exchange, SMA's stability on
    /// quadratics). Buffers as the engine allocates them: the synchroniser's own per learner
    /// and per device, zero at the start.
    pub struct SyncDriver {
        /// The device's backend.
        pub be: CpuBackend,
        /// The synchroniser driven.
        pub sync: Box<dyn Synchroniser<CpuBackend>>,
        len: usize,
        central: Central<CpuBackend>,
        learners: Vec<DriverLearner>,
        iteration: u64,
    }

    type Buf = <CpuBackend as crossbow_kernels::Storage>::Buffer;

    struct DriverLearner {
        params: Buf,
        grads: Buf,
        velocity: Buf,
        sync: Vec<Buf>,
    }

    impl DriverLearner {
        fn view(&mut self, index: usize) -> LearnerBuffers<'_, CpuBackend> {
            LearnerBuffers {
                index,
                params: &mut self.params,
                grads: &self.grads,
                velocity: &mut self.velocity,
                sync_state: &mut self.sync,
            }
        }
    }

    impl SyncDriver {
        /// `k` learners starting at `starts[j]` (one vector for all, or one per learner), `z`
        /// at their mean, then the synchroniser told the count and reset, as the engine does.
        pub fn new(mut sync: Box<dyn Synchroniser<CpuBackend>>, k: usize, starts: &[Vec<f32>]) -> Self {
            let be = CpuBackend::new(0);
            let len = starts[0].len();
            let up = |v: &[f32]| {
                let mut b = be.alloc(len).unwrap();
                be.upload(v, ViewMut::new(&mut b, 0..len).unwrap()).unwrap();
                b
            };
            let start = |j: usize| &starts[if starts.len() == 1 { 0 } else { j }];
            let z0: Vec<f32> =
                (0..len).map(|i| ((0..k).map(|j| start(j)[i] as f64).sum::<f64>() / k as f64) as f32).collect();
            let mut central = Central {
                z: up(&z0),
                sync_state: (0..sync.device_buffers()).map(|_| be.alloc(len).unwrap()).collect(),
            };
            let mut learners: Vec<DriverLearner> = (0..k)
                .map(|j| DriverLearner {
                    params: up(start(j)),
                    grads: be.alloc(len).unwrap(),
                    velocity: be.alloc(len).unwrap(),
                    sync: (0..sync.learner_buffers()).map(|_| be.alloc(len).unwrap()).collect(),
                })
                .collect();
            sync.set_learners(k);
            let mut views: Vec<_> = learners.iter_mut().enumerate().map(|(j, l)| l.view(j)).collect();
            sync.reset(&be, &mut central, &mut views, len).unwrap();
            drop(views);
            SyncDriver { be, sync, len, central, learners, iteration: 0 }
        }

        fn host(&self, b: &Buf) -> Vec<f32> {
            let mut v = vec![0.0; self.len];
            self.be.download(View::new(b, 0..self.len).unwrap(), &mut v).unwrap();
            v
        }

        /// The central model.
        pub fn z(&self) -> Vec<f32> {
            self.host(&self.central.z)
        }

        /// Learner `j`'s parameters.
        pub fn params(&self, j: usize) -> Vec<f32> {
            self.host(&self.learners[j].params)
        }

        /// Learner `j`'s momentum.
        pub fn velocity(&self, j: usize) -> Vec<f32> {
            self.host(&self.learners[j].velocity)
        }

        /// Iterations so far.
        pub fn iteration(&self) -> u64 {
            self.iteration
        }

        /// One iteration at `epoch` with learner j's gradient `grads[j]`, in the engine's
        /// order (learner steps, device reduction, central update, after-apply).
        pub fn step_at(&mut self, cfg: SgdConfig, epoch: f64, lr_dropped: bool, grads: &[Vec<f32>]) {
            let (be, len) = (&self.be, self.len);
            let info = StepInfo {
                iteration: self.iteration,
                epoch,
                sgd: cfg,
                base_lr: cfg.lr,
                learners: self.learners.len(),
                lr_dropped,
            };
            for (j, (l, g)) in self.learners.iter_mut().zip(grads).enumerate() {
                be.upload(g, ViewMut::new(&mut l.grads, 0..len).unwrap()).unwrap();
                self.sync.learner_step(be, &info, l.view(j), &self.central.z, len).unwrap();
            }
            let refs: Vec<LearnerRef<'_, CpuBackend>> = self
                .learners
                .iter()
                .enumerate()
                .map(|(index, l)| LearnerRef { index, params: &l.params, grads: &l.grads, sync_state: &l.sync })
                .collect();
            let mut total = be.alloc(len).unwrap();
            self.sync.reduce_device(be, &info, &refs, &self.central, &mut total, len).unwrap();
            drop(refs);
            self.sync.apply_device(be, &info, &mut total, &mut self.central, len).unwrap();
            if self.sync.after_apply_needed(&info) {
                for (j, l) in self.learners.iter_mut().enumerate() {
                    self.sync.after_apply(be, &info, l.view(j), &self.central.z, len).unwrap();
                }
            }
            self.iteration += 1;
        }

        /// [`SyncDriver::step_at`] at epoch 0, no rate drop.
        pub fn step(&mut self, cfg: SgdConfig, grads: &[Vec<f32>]) {
            self.step_at(cfg, 0.0, false, grads);
        }

        /// One iteration on the quadratic `f(w) = Σ_i h[i]/2 · w[i]²` (every learner's
        /// gradient `h ⊙ w_j`, computed from its current parameters).
        pub fn step_quadratic(&mut self, cfg: SgdConfig, h: &[f32]) {
            let grads: Vec<Vec<f32>> =
                (0..self.learners.len()).map(|j| self.params(j).iter().zip(h).map(|(w, h)| w * h).collect()).collect();
            self.step(cfg, &grads);
        }
    }
}
