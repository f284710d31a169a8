//! Engine tests, one body per backend (CPU, the GPU kernel emulator, a real GPU): learners
//! added and removed directly, layouts of devices x learners, and the errors a caller can
//! cause.

use crossbow_kernels::CpuBackend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::testing::{TestBackend, random_vec};
use crossbow_tensor::{Rng, Shape};

use super::*;
use crate::sync::{HostAllReduce, Independent};
use crate::testing::TestDevices;

crossbow_kernels::test_backends! {
    layouts_of_devices_and_learners,
    learners_added_and_removed_directly,
    learners_are_evaluated_on_their_own,
    a_global_batch_is_split_whatever_the_count,
}

/// Test batches held in memory.
struct Held(Vec<Batch>);

impl EvalSource for Held {
    fn samples(&self) -> usize {
        self.0.iter().map(|b| b.y.len()).sum()
    }
    fn for_each_batch(&mut self, _batch: usize, f: &mut EvalVisitor<'_>) -> Result<()> {
        for b in &self.0 {
            f(&b.x, &b.y)?;
        }
        Ok(())
    }
}

/// A learner's own evaluation: with one learner (independent learners: `z` is the learner)
/// it is the central model's, bit for bit; learners that trained apart score apart, on any
/// device, and asking twice gives the same answer.
fn learners_are_evaluated_on_their_own<B: TestBackend>(be: &B) {
    let g = graph();
    let mut test = Held(batches(&g, 5, 3, 99));
    let mut one = engine(be, &g, &[1]);
    for t in 0..3 {
        one.step(batches(&g, 3, 1, t), 1000).unwrap();
    }
    let (z, w) = (one.evaluate(&mut test).unwrap(), one.evaluate_learner(0, 0, &mut test).unwrap());
    assert_eq!((z.loss.to_bits(), z.accuracy, z.samples), (w.loss.to_bits(), w.accuracy, w.samples));
    let mut e = engine(be, &g, &[1, 2]);
    for t in 0..3 {
        e.step(batches(&g, 3, 3, t), 1000).unwrap();
    }
    let a = e.evaluate_learner(0, 0, &mut test).unwrap();
    let b = e.evaluate_learner(1, 1, &mut test).unwrap();
    assert_ne!(a.loss, b.loss);
    assert_eq!(e.evaluate_learner(1, 1, &mut test).unwrap().loss.to_bits(), b.loss.to_bits());
    assert!(e.evaluate_learner(1, 2, &mut test).is_err());
}

use crate::testing::harness::Batch;

/// A small convolutional net (conv, ReLU, pooling, linear): the GPU kernel emulator runs
/// full-size models too slowly for these tests (batch norm and the models' gradients are
/// covered on every backend by the checks in `exec.rs`).
fn graph() -> Graph {
    let mut b = crate::graph::GraphBuilder::new("tiny", Shape::new(vec![1, 6, 6])).unwrap();
    let x = b.input();
    let c = b.conv2d("c", x, 3, 3, 1, 1, true).unwrap();
    let r = b.relu("r", c).unwrap();
    let p = b.max_pool("p", r, 2, 2, 0, false).unwrap();
    let out = b.linear("fc", p, 4, true).unwrap();
    b.finish(out).unwrap()
}

fn batches(g: &Graph, b: usize, k: usize, t: u64) -> Vec<Batch> {
    let per: usize = g.input_shape().dims().iter().product();
    (0..k)
        .map(|j| {
            let s = 17 ^ (t << 20) ^ (j as u64 * 7919);
            let mut r = Rng::new(s);
            Batch { x: random_vec(s, b * per, 1.0), y: (0..b).map(|_| r.below(g.classes) as f32).collect() }
        })
        .collect()
}

fn engine<B: TestBackend>(be: &B, g: &Graph, layout: &[usize]) -> Engine<B> {
    let cfg = EngineConfig {
        batch_size: 3,
        sgd: SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-4, nesterov: false },
        schedule: Schedule::Constant,
        seed: 3,
        eval_batch_size: 4,
    };
    Engine::new(
        g.clone(),
        cfg,
        Box::new(TestDevices::new(be, layout.len()).unwrap()),
        Box::new(Independent::default()),
        Box::new(HostAllReduce),
        layout,
    )
    .unwrap()
}

/// Every layout runs, reports its learners, images and one compute time per device.
fn layouts_of_devices_and_learners<B: TestBackend>(be: &B) {
    let g = graph();
    for layout in [vec![1], vec![3], vec![1, 1], vec![2, 3], vec![1, 1, 1]] {
        let mut e = engine(be, &g, &layout);
        let k: usize = layout.iter().sum();
        assert_eq!(e.learners(), k);
        for t in 0..2 {
            let rec = e.step(batches(&g, 3, k, t), 1000).unwrap();
            assert_eq!(rec.learners, layout);
            assert_eq!(rec.images, 3 * k);
            assert_eq!(rec.device_seconds.len(), layout.len());
            assert!(rec.device_seconds.iter().all(|s| *s > 0.0 && *s <= rec.seconds));
            assert!(rec.loss.is_finite());
        }
        assert_eq!(e.iteration(), 2);
        assert_eq!(e.samples(), 6 * k as u64);
        // Every device's copy of z is the same.
        let z0 = e.central_to_host(0).unwrap();
        for d in 1..layout.len() {
            assert_eq!(e.central_to_host(d).unwrap(), z0, "z on device {d}");
        }
    }
}

/// A learner added is a copy of its device's z with zero momentum; the newest learner is the
/// one removed; the last learner of a device cannot be removed; the iteration then needs one
/// batch per learner of the new layout.
fn learners_added_and_removed_directly<B: TestBackend>(be: &B) {
    let g = graph();
    let mut e = engine(be, &g, &[1, 2]);
    e.step(batches(&g, 3, 3, 0), 1000).unwrap();
    e.add_learner(0).unwrap();
    assert_eq!(e.layout(), vec![2, 2]);
    let z = e.central_to_host(0).unwrap();
    assert_eq!(e.learner_params(0, 1).unwrap(), z);
    let newest = e.learner(0, 1).unwrap();
    let mut v = vec![1.0f32; g.param_len];
    newest.backend().download(View::new(&newest.replica().velocity, 0..g.param_len).unwrap(), &mut v).unwrap();
    assert!(v.iter().all(|x| *x == 0.0), "a new learner's momentum is zero");
    let new_id = newest.id();
    assert!(e.step(batches(&g, 3, 3, 1), 1000).is_err(), "3 batches for 4 learners");
    e.step(batches(&g, 3, 4, 1), 1000).unwrap();
    e.remove_learner(0).unwrap();
    assert_eq!(e.layout(), vec![1, 2]);
    assert!(e.learner(0, 0).unwrap().id() != new_id, "the newest learner goes first");
    let err = e.remove_learner(0).unwrap_err().to_string();
    assert!(err.contains("one learner left"), "{err}");
    assert!(e.remove_learner(7).is_err());
    assert!(e.add_learner(7).is_err());
    e.step(batches(&g, 3, 3, 2), 1000).unwrap();
}

/// Bad engine settings are errors, not panics.
#[test]
fn bad_layouts_are_errors() {
    let g = graph();
    let cfg = EngineConfig {
        batch_size: 3,
        sgd: SgdConfig::plain(0.1),
        schedule: Schedule::Constant,
        seed: 1,
        eval_batch_size: 4,
    };
    let make = |layout: &[usize], count: usize| {
        Engine::<CpuBackend>::new(
            g.clone(),
            cfg.clone(),
            Box::new(CpuDevices { count, threads: 1 }),
            Box::new(Independent::default()),
            Box::new(HostAllReduce),
            layout,
        )
    };
    assert!(make(&[1, 0], 2).is_err());
    assert!(make(&[1], 2).is_err());
    assert!(make(&[1, 1], 0).is_err());
}

fn cfg3() -> EngineConfig {
    EngineConfig {
        batch_size: 3,
        sgd: SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 1e-4, nesterov: false },
        schedule: Schedule::Constant,
        seed: 3,
        eval_batch_size: 4,
    }
}

/// 2 ranks of 1 device x 2 learners train bit-identically to 1 process of 2 devices x 2
/// learners (the ranks' sum is the devices' sum, in the same order), the global count is the
/// synchroniser's k, and when rank 1 adds a learner between iterations both ranks agree on
/// the new layout before the next one (the single process adds it to device 1 at the same
/// point) and stay identical.
#[test]
fn ranks_train_as_devices_of_one_process_and_agree_on_learner_changes() {
    let g = graph();
    let iterations = 6u64;
    let add_after = 3u64;
    let be = CpuBackend::new(0);
    let mut single = Engine::new(
        g.clone(),
        cfg3(),
        Box::new(TestDevices::new(&be, 2).unwrap()),
        Box::new(Independent::default()),
        Box::new(HostAllReduce),
        &[2, 2],
    )
    .unwrap();
    for t in 0..iterations {
        if t == add_after {
            single.add_learner(1).unwrap();
        }
        let k = single.learners();
        let rec = single.step(batches(&g, 3, k, t), 1000).unwrap();
        assert_eq!(rec.images, 3 * k);
    }
    let want = single.central_to_host(0).unwrap();

    let results: Vec<(Vec<f32>, Vec<usize>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = crate::testing::ThreadGroup::group(2)
            .into_iter()
            .map(|w| {
                let g = g.clone();
                s.spawn(move || {
                    let be = CpuBackend::new(0);
                    let rank = crate::ProcessGroup::rank(&w);
                    let mut e = Engine::in_world(
                        g.clone(),
                        cfg3(),
                        Box::new(TestDevices::new(&be, 1).unwrap()),
                        Box::new(Independent::default()),
                        Box::new(HostAllReduce),
                        &[2],
                        std::sync::Arc::new(w),
                    )
                    .unwrap();
                    assert_eq!(e.world_learners(), 4);
                    assert_eq!(e.learner_offset(), 2 * rank);
                    let mut images = 0;
                    for t in 0..iterations {
                        if t == add_after && rank == 1 {
                            e.add_learner(0).unwrap();
                        }
                        e.sync_layout().unwrap();
                        let (off, mine, all) = (e.learner_offset(), e.learners(), e.world_learners());
                        let bs: Vec<Batch> = batches(&g, 3, all, t).into_iter().skip(off).take(mine).collect();
                        let rec = e.step(bs, 1000).unwrap();
                        images = rec.images;
                    }
                    (e.central_to_host(0).unwrap(), e.world_layout().to_vec(), images as u64)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, (z, layout, images)) in results.iter().enumerate() {
        assert_eq!(layout, &[2, 3], "rank {rank}");
        assert_eq!(*images, 15, "rank {rank}: the record counts every rank's images");
        assert!(z.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "rank {rank} differs from one process");
    }
}

crossbow_kernels::test_backends! {
    graphs_replay_the_plain_bits: [emu, cuda_async],
    graphs_turn_off_when_every_iteration_differs: [emu, cuda_async],
}

/// [`tiny`]'s net with batch norm (and optionally dropout) before the pooling.
fn graph_with(dropout: bool) -> Graph {
    let mut b = crate::graph::GraphBuilder::new("tiny-bn", Shape::new(vec![1, 6, 6])).unwrap();
    let x = b.input();
    let c = b.conv2d("c", x, 3, 3, 1, 1, false).unwrap();
    let n = b.batch_norm("bn", c).unwrap();
    let mut r = b.relu("r", n).unwrap();
    if dropout {
        r = b.dropout("d", r, 0.25).unwrap();
    }
    let p = b.max_pool("p", r, 2, 2, 0, false).unwrap();
    let out = b.linear("fc", p, 4, true).unwrap();
    b.finish(out).unwrap()
}

/// Trains `layout` for `iters` iterations with graphs on or off; the losses, every learner's
/// parameters and the central model, and what the learners' graphs did.
fn train_with_graphs<E: crossbow_kernels::cuda::launch::Launcher>(
    be: &crossbow_kernels::cuda::GpuBackend<E>,
    g: &Graph,
    on: bool,
    iters: u64,
) -> (Vec<u64>, Vec<Vec<u32>>, Vec<crossbow_kernels::cuda::replay::ReplayStats>)
where
    crossbow_kernels::cuda::GpuBackend<E>: TestBackend,
{
    let base = be.sibling().unwrap();
    base.set_graphs(on).unwrap();
    let mut e = engine(&base, g, &[2]);
    let mut losses = vec![];
    for t in 0..iters {
        losses.push(e.step(batches(g, 3, 2, t), 1000).unwrap().loss.to_bits());
    }
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let mut params = vec![bits(e.central_to_host(0).unwrap())];
    params.extend((0..2).map(|j| bits(e.learner_params(0, j).unwrap())));
    let stats = e.devices[0].learners.iter().map(|l| l.backend.graph_stats().unwrap()).collect();
    (losses, params, stats)
}

/// With CUDA graphs (recorded, compared, captured once, then replayed) the engine trains to
/// the bits of plain launches; and the graphs were really replayed, not silently skipped.
fn graphs_replay_the_plain_bits<E: crossbow_kernels::cuda::launch::Launcher>(be: &crossbow_kernels::cuda::GpuBackend<E>)
where
    crossbow_kernels::cuda::GpuBackend<E>: TestBackend,
{
    let g = graph_with(false);
    let (l_off, p_off, s_off) = train_with_graphs(be, &g, false, 5);
    let (l_on, p_on, s_on) = train_with_graphs(be, &g, true, 5);
    assert_eq!(l_on, l_off, "losses");
    assert_eq!(p_on, p_off, "central model and learners' parameters");
    for s in &s_off {
        assert_eq!((s.captures, s.replays, s.plain), (0, 0, 5), "graphs off: {s:?}");
    }
    for s in &s_on {
        assert_eq!((s.captures, s.replays, s.plain), (1, 4, 0), "one capture, then replays: {s:?}");
    }
}

/// Dropout draws new masks every iteration (its seed is a kernel argument): no recording
/// matches the graph, so after a few captures graphs turn themselves off, and the bits are
/// still those of plain launches.
fn graphs_turn_off_when_every_iteration_differs<E: crossbow_kernels::cuda::launch::Launcher>(
    be: &crossbow_kernels::cuda::GpuBackend<E>,
) where
    crossbow_kernels::cuda::GpuBackend<E>: TestBackend,
{
    let g = graph_with(true);
    let iters = crossbow_kernels::cuda::replay::MAX_MISSES as u64 + 4;
    let (l_off, p_off, _) = train_with_graphs(be, &g, false, iters);
    let (l_on, p_on, s_on) = train_with_graphs(be, &g, true, iters);
    assert_eq!(l_on, l_off, "losses");
    assert_eq!(p_on, p_off, "parameters");
    let misses = crossbow_kernels::cuda::replay::MAX_MISSES as u64;
    for s in &s_on {
        assert_eq!(s.replays, 0, "{s:?}");
        assert_eq!(s.captures, misses, "{s:?}");
        assert_eq!(s.plain, iters - misses, "{s:?}");
    }
}

crossbow_kernels::test_backends! {
    the_central_model_is_checked_on_the_device: [cpu, emu],
}

/// `central_is_finite` (the divergence watch's per-iteration check, one number to the host):
/// true for a trained model, false for a NaN, an infinity or a value whose square overflows.
fn the_central_model_is_checked_on_the_device<B: TestBackend>(be: &B) {
    let g = graph();
    let mut e = engine(be, &g, &[2]);
    e.step(batches(&g, 3, 2, 0), 1000).unwrap();
    assert!(e.central_is_finite().unwrap());
    let snap = e.snapshot().unwrap();
    for (bad, finite) in [(f32::NAN, false), (f32::INFINITY, false), (-1e20, false), (-1e3, true)] {
        let mut s = snap.clone();
        let last = s.devices[0].z.len() - 1;
        s.devices[0].z[last] = bad;
        e.restore(&s).unwrap();
        assert_eq!(e.central_is_finite().unwrap(), finite, "a central value of {bad}");
    }
}

crossbow_kernels::test_backends! {
    lagged_loss_reads_shift_the_losses_not_the_parameters: [cpu, emu, cuda_async],
    a_lagged_read_finds_a_diverged_central_model_one_iteration_late: [cpu, emu],
}

/// Bits of the central model and of every learner's parameters.
fn model_bits<B: TestBackend>(e: &Engine<B>) -> Vec<Vec<u32>> {
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let mut out = vec![bits(e.central_to_host(0).unwrap())];
    out.extend((0..e.learners()).map(|j| bits(e.learner_params(0, j).unwrap())));
    out
}

/// With `LossRead::Lagged` every record carries the loss of the iteration before (the
/// same bits as that iteration's record with `Now`), the parameters are the same bits, a
/// learner added between iterations hands the reads in flight to the next record, and
/// `flush_losses` returns the last iteration's.
fn lagged_loss_reads_shift_the_losses_not_the_parameters<B: TestBackend>(be: &B) {
    let g = graph();
    let run = |read: LossRead| {
        let mut e = engine(be, &g, &[2]);
        e.set_loss_read(read).unwrap();
        let (mut recs, mut models) = (vec![], vec![]);
        for t in 0..6u64 {
            if t == 3 {
                e.add_learner(0).unwrap();
            }
            recs.push(e.step(batches(&g, 3, e.learners(), t), 1000).unwrap());
            models.push(model_bits(&e));
        }
        let flushed = e.flush_losses().unwrap();
        (recs, models, flushed)
    };
    let (now, models_now, flushed_now) = run(LossRead::Now);
    let (lag, models_lag, flushed_lag) = run(LossRead::Lagged);
    assert_eq!(models_lag, models_now, "the parameters do not depend on when losses are read");
    assert_eq!(flushed_now, None, "nothing is in flight with LossRead::Now");
    for (i, r) in now.iter().enumerate() {
        assert_eq!((r.loss_iteration, r.loss_images), (r.iteration, r.images), "now, record {i}");
    }
    assert_eq!((lag[0].loss_iteration, lag[0].loss_images, lag[0].loss), (0, 0, 0.0), "no loss read yet");
    for i in 1..lag.len() {
        let (l, n) = (&lag[i], &now[i - 1]);
        assert_eq!(l.iteration, now[i].iteration);
        assert_eq!(l.images, now[i].images, "record {i}: images trained");
        assert_eq!((l.loss_iteration, l.loss_images), (n.iteration, n.images), "record {i}: the iteration before");
        assert_eq!((l.loss.to_bits(), l.accuracy.to_bits()), (n.loss.to_bits(), n.accuracy.to_bits()), "record {i}");
    }
    let last = now.last().unwrap();
    let f = flushed_lag.expect("the last iteration's losses were in flight");
    assert_eq!((f.iteration, f.images), (last.iteration, last.images));
    assert_eq!((f.loss.to_bits(), f.accuracy.to_bits()), (last.loss.to_bits(), last.accuracy.to_bits()));
    // A record and a flushed read combine into the mean over both.
    let mut r = lag[1].clone();
    r.add_losses(&LossRecord { iteration: 9, loss: 3.0, accuracy: 1.0, images: 3 * r.loss_images });
    assert_eq!(r.loss_iteration, 9);
    assert!((r.loss - (lag[1].loss + 9.0) / 4.0).abs() < 1e-12, "{}", r.loss);
    assert!((r.accuracy - (lag[1].accuracy + 3.0) / 4.0).abs() < 1e-12);
}

/// With `LossRead::Lagged` the engine checks the central model itself, on the device, one
/// iteration late: the iteration after a NaN appears fails (or the flush does), naming the
/// iteration; a restored snapshot drops the reads of the trajectory it replaces.
fn a_lagged_read_finds_a_diverged_central_model_one_iteration_late<B: TestBackend>(be: &B) {
    let g = graph();
    let mut e = engine(be, &g, &[2]);
    e.set_loss_read(LossRead::Lagged).unwrap();
    e.step(batches(&g, 3, 2, 0), 1000).unwrap();
    let mut bad = e.snapshot().unwrap();
    bad.devices[0].z[0] = f32::NAN;
    e.restore(&bad).unwrap();
    e.step(batches(&g, 3, 2, 1), 1000).expect("the NaN is not seen yet");
    match e.flush_losses() {
        Err(ReplicaError::Diverged(why)) => {
            assert!(why.contains("central model") && why.contains("after iteration 2"), "{why}")
        }
        other => panic!("a flush finds the NaN: {other:?}"),
    }
    e.restore(&bad).unwrap();
    e.step(batches(&g, 3, 2, 1), 1000).expect("the NaN is not seen yet");
    match e.step(batches(&g, 3, 2, 2), 1000) {
        Err(ReplicaError::Diverged(why)) => assert!(why.contains("central model"), "{why}"),
        other => panic!("the next iteration finds the NaN: {other:?}"),
    }
    // A restored good state starts clean.
    let good = e.snapshot().unwrap();
    let mut good = good;
    good.devices[0].z[0] = 0.5;
    e.restore(&good).unwrap();
    let _ = e.step(batches(&g, 3, 2, 3), 1000).unwrap();
}

/// With a global batch the learners' programs are lowered again for each count's share, on
/// any backend (on a GPU the replayed graph of a learner is captured again for its new
/// executor); the replicas are kept through it and every iteration takes the whole batch.
fn a_global_batch_is_split_whatever_the_count<B: TestBackend>(be: &B) {
    let g = graph();
    let mut e = engine(be, &g, &[1]);
    e.set_global_batch(Some(6)).unwrap();
    assert_eq!((e.batch_size(), e.images_per_iteration()), (6, 6));
    for (t, k) in [1usize, 2, 3, 3, 2, 6, 1].into_iter().enumerate() {
        while e.learners() < k {
            e.add_learner(0).unwrap();
        }
        while e.learners() > k {
            e.remove_learner(0).unwrap();
        }
        let before = e.learner_params(0, 0).unwrap();
        e.sync_layout().unwrap();
        assert_eq!(e.batch_size(), 6 / k);
        assert_eq!(e.learner_params(0, 0).unwrap(), before, "a new share keeps the replica");
        let rec = e.step(batches(&g, 6 / k, k, t as u64), 1000).unwrap();
        assert_eq!((rec.images, rec.learners.clone()), (6, vec![k]));
        assert!(rec.loss.is_finite());
    }
    e.add_learner(0).unwrap();
    e.add_learner(0).unwrap();
    e.add_learner(0).unwrap();
    assert!(e.sync_layout().unwrap_err().to_string().contains("does not divide into 4"));
}
