//! GPU tests beyond the ops: ResNet-sized convolutions on both paths, streams, copies, the
//! module cache and memory queries. Every op's own tests run on the GPU as the `cuda` (and
//! `cuda_no_cudnn`) variants of the library's tests (`crossbow_kernels::test_backends!`):
//! run them with the filter `::cuda` (scripts/gpu-check.sh does).
//!
//! One integration-test binary, so the GPU bundle stays small. Every test starts with
//! `testing::cuda_device_or_skip`: without a driver — and without the `cuda` feature, where
//! `CudaBackend` is the same backend over an uninhabited executor — it prints `skipped: no
//! CUDA driver` and passes; with `CROSSBOW_REQUIRE_GPU=1` (scripts/gpu-check.sh) a skip
//! fails instead.

use std::sync::Arc;

use crossbow_kernels::batch_norm::BatchNormGeom;
use crossbow_kernels::conv2d::Conv2dGeom;
use crossbow_kernels::cuda::{self, CudaBackend, CudaDevice, CudaOptions};
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::prelude::*;
use crossbow_kernels::testing::{
    GPU_TOLERANCE, Tolerance, assert_close_f32, cuda_device_or_skip, cuda_test_options, random_vec,
};

/// Options of the tests: cuDNN as the environment says, and a synchronisation after every
/// launch so an asynchronous fault names its kernel.
fn options(cudnn: bool) -> CudaOptions {
    cuda_test_options(cudnn)
}

fn backend(test: &str, cudnn: bool) -> Option<CudaBackend> {
    let dev = cuda_device_or_skip(test, &options(cudnn))?;
    println!("{test}: {}", dev.describe());
    Some(dev.new_backend().unwrap_or_else(|e| panic!("{test}: {e}")))
}

/// CIFAR ResNet shapes at batch 32 and 128 (beyond the op tests' small random shapes), both
/// paths, forward and backward, against the CPU.
#[test]
fn conv2d_resnet_shapes_both_paths() {
    let shapes = [
        Conv2dGeom::square(32, 3, (32, 32), 16, 3, 1, 1, false),
        Conv2dGeom::square(128, 16, (32, 32), 16, 3, 1, 1, false),
        Conv2dGeom::square(128, 16, (32, 32), 32, 3, 2, 1, false),
        Conv2dGeom::square(128, 32, (16, 16), 64, 1, 2, 0, true),
        Conv2dGeom::square(32, 64, (8, 8), 64, 3, 1, 1, true),
    ];
    let cpu = CpuBackend::with_threads(0, 2).unwrap_or_else(|_| CpuBackend::new(0));
    for cudnn in [true, false] {
        let test = format!("conv2d_resnet_shapes (cudnn {cudnn})");
        let Some(be) = backend(&test, cudnn) else { return };
        for g in shapes {
            let x = random_vec(1, g.input_len(), 1.0);
            let p = random_vec(2, g.params_len(), 0.1);
            let dy = random_vec(3, g.output_len(), 1.0);
            let gpu = conv_passes(&be, &g, &x, &p, &dy);
            let reference = conv_passes(&cpu, &g, &x, &p, &dy);
            let tol = GPU_TOLERANCE;
            assert_close_f32(&gpu.0, &reference.0, tol, &format!("{test} forward {g:?}"));
            assert_close_f32(&gpu.1, &reference.1, tol, &format!("{test} backward data {g:?}"));
            // Weight gradients sum up to 131k products: a larger absolute part for the
            // different summation order.
            assert_close_f32(
                &gpu.2,
                &reference.2,
                Tolerance::new(1e-4, 2e-3),
                &format!("{test} backward params {g:?}"),
            );
        }
    }
}

type Passes = (Vec<f32>, Vec<f32>, Vec<f32>);

/// Forward, backward-data and backward-params of `g` on `be`: `(y, dx, dparams)`.
// A test helper (not `#[test]`, so clippy does not see it as one): a failed call panics the test.
#[allow(clippy::expect_used)]
fn conv_passes<B: Backend>(be: &B, g: &Conv2dGeom, x: &[f32], p: &[f32], dy: &[f32]) -> Passes {
    let up = |d: &[f32]| {
        let mut b = be.alloc(d.len()).expect("alloc");
        be.upload(d, ViewMut::whole(&mut b)).expect("upload");
        b
    };
    let down = |b: &B::Buffer| {
        let mut v = vec![0.0; B::buffer_len(b)];
        be.download(View::whole(b), &mut v).expect("download");
        v
    };
    let (xb, pb, dyb) = (up(x), up(p), up(dy));
    let mut ws = be.alloc(be.conv2d_workspace_len(g).max(1)).expect("workspace");
    let mut y = be.alloc(g.output_len()).expect("alloc");
    let mut dx = be.alloc(g.input_len()).expect("alloc");
    let mut dp = be.alloc(g.params_len()).expect("alloc");
    be.conv2d_forward(g, View::whole(&xb), View::whole(&pb), ViewMut::whole(&mut y), ViewMut::whole(&mut ws))
        .expect("forward");
    be.conv2d_backward_data(g, View::whole(&dyb), View::whole(&pb), ViewMut::whole(&mut dx), ViewMut::whole(&mut ws))
        .expect("backward data");
    be.conv2d_backward_params(g, View::whole(&xb), View::whole(&dyb), ViewMut::whole(&mut dp), ViewMut::whole(&mut ws))
        .expect("backward params");
    (down(&y), down(&dx), down(&dp))
}

/// Ten dependent steps (conv forward, a gradient from its output, SGD) on one backend.
// A test helper (not `#[test]`, so clippy does not see it as one): a failed call panics the test.
#[allow(clippy::expect_used)]
fn steps<B: Backend>(be: &B, g: &Conv2dGeom, sgd: &SgdConfig, x: &[f32], p: &mut [f32]) {
    let up = |d: &[f32]| {
        let mut b = be.alloc(d.len()).expect("alloc");
        be.upload(d, ViewMut::whole(&mut b)).expect("upload");
        b
    };
    let xb = up(x);
    let mut pb = up(p);
    let mut v = be.alloc(p.len()).expect("alloc");
    let mut grad = be.alloc(p.len()).expect("alloc");
    let mut y = be.alloc(g.output_len()).expect("alloc");
    let mut ws = be.alloc(be.conv2d_workspace_len(g).max(1)).expect("alloc");
    let k = p.len().min(g.output_len());
    for _ in 0..10 {
        be.conv2d_forward(g, View::whole(&xb), View::whole(&pb), ViewMut::whole(&mut y), ViewMut::whole(&mut ws))
            .expect("forward");
        be.fill(ViewMut::whole(&mut grad), 0.0).expect("fill");
        be.axpy(1e-3, View::new(&y, 0..k).expect("view"), ViewMut::new(&mut grad, 0..k).expect("view")).expect("axpy");
        be.sgd_step(sgd, ViewMut::whole(&mut pb), View::whole(&grad), ViewMut::whole(&mut v)).expect("sgd");
    }
    be.download(View::whole(&pb), p).expect("download");
}

/// Several learners' backends (streams) on one device, each driven by its own host thread
/// at the same time, each matching the CPU.
#[test]
fn many_backends_run_concurrently() {
    let Some(dev) = cuda_device_or_skip("many_backends_run_concurrently", &options(true)) else { return };
    let dev = Arc::new(dev);
    let g = Conv2dGeom::square(16, 16, (16, 16), 16, 3, 1, 1, true);
    let sgd = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov: false };
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let be = dev.new_backend().map_err(|e| e.to_string())?;
                let x = random_vec(10 + t, g.input_len(), 1.0);
                let p0 = random_vec(20 + t, g.params_len(), 0.1);
                let mut gpu = p0.clone();
                steps(&be, &g, &sgd, &x, &mut gpu);
                let mut reference = p0;
                steps(&CpuBackend::new(0), &g, &sgd, &x, &mut reference);
                let tol = GPU_TOLERANCE;
                let bad = gpu.iter().zip(&reference).filter(|(a, b)| !tol.accepts(**a as f64, **b as f64)).count();
                if bad == 0 { Ok(()) } else { Err(format!("learner {t}: {bad} parameters differ from the CPU")) }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("learner thread panicked").unwrap_or_else(|e| panic!("{e}"));
    }
}

/// One round of the cross-stream check: A fills a buffer `fills` times (value i in round i);
/// B copies it, after waiting for A's event when `wait`, and downloads the copy. Returns how
/// many elements B saw with a value other than A's last.
// A test helper (not `#[test]`, so clippy does not see it as one): a failed call panics the test.
#[allow(clippy::expect_used)]
fn cross_stream_round(dev: &CudaDevice, n: usize, fills: usize, wait: bool) -> usize {
    let a = dev.new_backend().expect("backend");
    let b = dev.new_backend().expect("backend");
    let mut src = a.alloc(n).expect("alloc");
    let mut dst = b.alloc(n).expect("alloc");
    a.synchronize().expect("sync");
    b.synchronize().expect("sync");
    for i in 0..fills {
        a.fill(ViewMut::whole(&mut src), i as f32).expect("fill");
    }
    if wait {
        let done = a.record_event().expect("event");
        b.wait_event(&done).expect("wait");
    }
    b.copy(View::whole(&src), ViewMut::whole(&mut dst)).expect("copy");
    let mut host = vec![0.0f32; n];
    b.download(View::whole(&dst), &mut host).expect("download");
    a.synchronize().expect("sync");
    let last = (fills - 1) as f32;
    host.iter().filter(|&&v| v != last).count()
}

/// Cross-stream ordering with asynchronous launches (the device is opened without
/// `sync_launches`, so the host runs ahead of the GPU): B waits for A's event and sees only
/// A's last fill of a 256 MiB buffer. The negative control removes the wait: B's copy then
/// overlaps A's 64 fills (tens of milliseconds of GPU work enqueued in well under one) and
/// must see older values — which shows the check can fail. The control retries a few times
/// with more work before it fails: overlap is what a GPU does, not a guarantee.
#[test]
fn cross_stream_ordering_with_asynchronous_launches() {
    let mut o = options(true);
    o.sync_launches = false;
    let Some(dev) = cuda_device_or_skip("cross_stream_ordering_with_asynchronous_launches", &o) else { return };
    let n = 1 << 26;
    for round in 0..3 {
        assert_eq!(cross_stream_round(&dev, n, 64, true), 0, "round {round}: B read A's buffer before A's event");
    }
    let mut detected = 0;
    for fills in [64, 256, 1024] {
        detected = cross_stream_round(&dev, n, fills, false);
        println!("negative control, {fills} fills, no wait: {detected} of {n} elements stale");
        if detected > 0 {
            break;
        }
    }
    assert!(detected > 0, "without the wait B never saw a stale value: this check could not detect a missing wait");
    dev.synchronize().expect("sync");
}

/// Uploads and downloads through the pinned staging buffers: larger than one chunk, at
/// offsets, empty, and many in a row.
#[test]
fn copies_through_staging_buffers() {
    let Some(be) = backend("copies_through_staging_buffers", true) else { return };
    let n = 3 * (1 << 20) + 12345;
    let data = random_vec(7, n, 100.0);
    let mut buf = be.alloc(n + 10).expect("alloc");
    be.upload(&data, ViewMut::new(&mut buf, 5..n + 5).expect("view")).expect("upload");
    let mut back = vec![0.0f32; n];
    be.download(View::new(&buf, 5..n + 5).expect("view"), &mut back).expect("download");
    assert_eq!(back, data);
    let mut head = [1.0f32; 5];
    be.download(View::new(&buf, 0..5).expect("view"), &mut head).expect("download");
    assert_eq!(head, [0.0; 5], "alloc zero-fills");
    let mut empty = be.alloc(0).expect("alloc 0");
    assert_eq!(CudaBackend::buffer_len(&empty), 0);
    be.download(View::whole(&empty), &mut []).expect("empty download");
    be.upload(&[], ViewMut::whole(&mut empty)).expect("empty upload");
    let mut small = be.alloc(1000).expect("alloc");
    for i in 0..200 {
        be.upload(&vec![i as f32; 1000], ViewMut::whole(&mut small)).expect("upload");
    }
    let mut out = vec![0.0f32; 1000];
    be.download(View::whole(&small), &mut out).expect("download");
    assert!(out.iter().all(|&v| v == 199.0));
}

#[test]
fn mem_info_is_consistent() {
    let Some(dev) = cuda_device_or_skip("mem_info_is_consistent", &options(true)) else { return };
    let m = dev.mem_info().expect("mem_info");
    println!("mem_info: {} of {} MiB free", m.free >> 20, m.total >> 20);
    assert!(m.free > 0 && m.free <= m.total);
    let t = dev.info().total_memory as f64;
    assert!((m.total as f64 - t).abs() <= 0.02 * t, "{m:?} vs {}", dev.info().total_memory);
}

/// Four threads open the device at once with a fresh disk cache: every kernel module is
/// compiled at most once in the process (single-flight per cache key, counted per key, so
/// other tests compiling at the same time cannot make it fail), exactly once when this is
/// the process's first open (scripts/gpu-check.sh runs each test in its own process), and
/// the modules work on every device opened. The gate opens no device, and "first open"
/// means nothing was compiled or loaded from disk or memory yet, so a warm disk cache
/// (`CROSSBOW_KERNEL_CACHE`, which gpu-check fills) or the order tests run in cannot
/// change what is asserted.
#[test]
fn module_cache_compiles_each_key_once_across_threads() {
    let test = "module_cache_compiles_each_key_once_across_threads";
    if crossbow_kernels::testing::cuda_driver_or_skip(test).is_none() {
        return;
    }
    let first_open = cuda::kernel_cache_stats() == cuda::KernelCacheStats::default();
    let dir = std::env::temp_dir().join(format!("crossbow-gpu-kcache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let barrier = Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (barrier, dir) = (barrier.clone(), dir.clone());
            std::thread::spawn(move || {
                let mut o = options(false);
                o.kernel_cache = Some(dir);
                barrier.wait();
                CudaDevice::open_with(0, &o).map_err(|e| e.to_string())
            })
        })
        .collect();
    let devs: Vec<CudaDevice> =
        threads.into_iter().map(|t| t.join().expect("thread").unwrap_or_else(|e| panic!("{test}: {e}"))).collect();
    let counts = cuda::kernel_compile_counts();
    println!("{test}: compiles per key {counts:?}; first open in this process: {first_open}");
    for (k, n) in &counts {
        assert!(*n <= 1, "{k} compiled {n} times");
    }
    if first_open {
        let target = devs[0].kernel_target().to_string();
        let ours = counts.keys().filter(|k| k.contains(&format!("-{target}-"))).count();
        assert_eq!(ours, crossbow_kernels::cuda::launch::sources().count(), "{counts:?}");
    }
    for d in &devs {
        crossbow_kernels::activation::tests::relu_matches_cpu(&d.new_backend().expect("backend"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `CROSSBOW_REQUIRE_CUDNN=1` (`CudaOptions::require_cudnn`): opening a device fails when
/// cuDNN is not used, and succeeds only with backends that really use it.
#[test]
fn require_cudnn_fails_when_cudnn_is_not_used() {
    let test = "require_cudnn_fails_when_cudnn_is_not_used";
    let Some(dev) = cuda_device_or_skip(test, &options(true)) else { return };
    let mut o = options(false);
    o.require_cudnn = true;
    let e = CudaDevice::open_with(0, &o).expect_err("cuDNN disabled but required").to_string();
    assert!(e.contains("CROSSBOW_REQUIRE_CUDNN") && e.contains("not used"), "{e}");
    let mut o = options(true);
    o.require_cudnn = true;
    match CudaDevice::open_with(0, &o) {
        Ok(d) => {
            assert!(dev.cudnn_status().is_enabled());
            assert!(d.new_backend().expect("backend").uses_cudnn());
        }
        Err(e) => {
            assert!(!dev.cudnn_status().is_enabled(), "{e}");
            println!("{test}: cuDNN not available here ({e}); the required mode refused it, as it must");
        }
    }
}

/// Convolution and batch norm with every operand at an offset of 1-3 floats into a larger
/// buffer (views of one flat replica buffer are like this; cuDNN 9 rejects pointers it
/// finds misaligned), on the cuDNN and fallback paths, against the CPU at the same offsets.
#[test]
fn conv_and_batch_norm_at_unaligned_offsets() {
    let cpu = CpuBackend::new(0);
    let g = Conv2dGeom::square(4, 3, (8, 8), 5, 3, 1, 1, true);
    let bn = BatchNormGeom::new(4, 5, 64);
    for cudnn in [true, false] {
        let test = format!("conv_and_batch_norm_at_unaligned_offsets (cudnn {cudnn})");
        let Some(be) = backend(&test, cudnn) else { return };
        for off in 1..=3 {
            let gpu = offset_passes(&be, &g, &bn, off);
            let reference = offset_passes(&cpu, &g, &bn, off);
            for (i, (a, b)) in gpu.iter().zip(&reference).enumerate() {
                assert_close_f32(a, b, Tolerance::new(1e-4, 1e-3), &format!("{test} offset {off} output {i}"));
            }
        }
    }
}

/// The same offsets on the GPU backend's emulator (the fallback kernels' address
/// arithmetic), so the check itself runs without a GPU.
#[test]
fn conv_and_batch_norm_at_unaligned_offsets_on_the_emulator() {
    let Some(emu) =
        crossbow_kernels::testing::emu_backend_or_skip("conv_and_batch_norm_at_unaligned_offsets_on_the_emulator")
    else {
        return;
    };
    let cpu = CpuBackend::new(0);
    let g = Conv2dGeom::square(4, 3, (8, 8), 5, 3, 1, 1, true);
    let bn = BatchNormGeom::new(4, 5, 64);
    for off in 1..=3 {
        let (e, c) = (offset_passes(&emu, &g, &bn, off), offset_passes(&cpu, &g, &bn, off));
        for (i, (a, b)) in e.iter().zip(&c).enumerate() {
            assert_close_f32(a, b, Tolerance::new(1e-4, 1e-3), &format!("emulator offset {off} output {i}"));
        }
    }
}

/// Conv forward / backward data / backward params, then batch norm forward (train) and
/// backward on the conv output; every buffer holds its operand at `off`.
// A test helper (not `#[test]`, so clippy does not see it as one): a failed call panics the test.
#[allow(clippy::expect_used)]
fn offset_passes<B: Backend>(be: &B, g: &Conv2dGeom, bn: &BatchNormGeom, off: usize) -> Vec<Vec<f32>> {
    let up = |d: &[f32]| {
        let mut b = be.alloc(d.len() + off + 3).expect("alloc");
        be.upload(d, ViewMut::new(&mut b, off..off + d.len()).expect("view")).expect("upload");
        b
    };
    let out = |len: usize| be.alloc(len + off + 3).expect("alloc");
    let down = |b: &B::Buffer, len: usize| {
        let mut v = vec![0.0; len];
        be.download(View::new(b, off..off + len).expect("view"), &mut v).expect("download");
        v
    };
    let x = up(&random_vec(1, g.input_len(), 1.0));
    let p = up(&random_vec(2, g.params_len(), 0.3));
    let dy = up(&random_vec(3, g.output_len(), 1.0));
    let mut ws = be.alloc(be.conv2d_workspace_len(g).max(1) + off).expect("workspace");
    let wsl = be.conv2d_workspace_len(g).max(1);
    let (mut y, mut dx, mut dp) = (out(g.output_len()), out(g.input_len()), out(g.params_len()));
    be.conv2d_forward(
        g,
        vat::<B>(off, &x, g.input_len()),
        vat::<B>(off, &p, g.params_len()),
        vmut::<B>(off, &mut y, g.output_len()),
        vmut::<B>(off, &mut ws, wsl),
    )
    .expect("conv forward");
    be.conv2d_backward_data(
        g,
        vat::<B>(off, &dy, g.output_len()),
        vat::<B>(off, &p, g.params_len()),
        vmut::<B>(off, &mut dx, g.input_len()),
        vmut::<B>(off, &mut ws, wsl),
    )
    .expect("conv backward data");
    be.conv2d_backward_params(
        g,
        vat::<B>(off, &x, g.input_len()),
        vat::<B>(off, &dy, g.output_len()),
        vmut::<B>(off, &mut dp, g.params_len()),
        vmut::<B>(off, &mut ws, wsl),
    )
    .expect("conv backward params");
    let mut gb = vec![1.0f32; bn.channels];
    gb.extend(random_vec(4, bn.channels, 0.5));
    let bp = up(&gb);
    let (mut by, mut saved, mut dbx, mut dbp) =
        (out(bn.len()), out(bn.stats_len()), out(bn.len()), out(bn.stats_len()));
    let mut running = up(&[vec![0.0f32; bn.channels], vec![1.0f32; bn.channels]].concat());
    be.batch_norm_forward_train(
        bn,
        vat::<B>(off, &y, bn.len()),
        vat::<B>(off, &bp, bn.stats_len()),
        vmut::<B>(off, &mut by, bn.len()),
        vmut::<B>(off, &mut saved, bn.stats_len()),
        vmut::<B>(off, &mut running, bn.stats_len()),
    )
    .expect("bn forward");
    be.batch_norm_backward(
        bn,
        vat::<B>(off, &y, bn.len()),
        vat::<B>(off, &dy, bn.len()),
        vat::<B>(off, &bp, bn.stats_len()),
        vat::<B>(off, &saved, bn.stats_len()),
        vmut::<B>(off, &mut dbx, bn.len()),
        vmut::<B>(off, &mut dbp, bn.stats_len()),
    )
    .expect("bn backward");
    vec![
        down(&y, g.output_len()),
        down(&dx, g.input_len()),
        down(&dp, g.params_len()),
        down(&by, bn.len()),
        down(&dbx, bn.len()),
        down(&dbp, bn.stats_len()),
        down(&running, bn.stats_len()),
    ]
}

/// `len` elements of `b` from `off`.
#[allow(clippy::expect_used)]
fn vat<B: Backend>(off: usize, b: &B::Buffer, len: usize) -> View<'_, B> {
    View::new(b, off..off + len).expect("view")
}

/// `len` elements of `b` from `off`, to write.
#[allow(clippy::expect_used)]
fn vmut<B: Backend>(off: usize, b: &mut B::Buffer, len: usize) -> ViewMut<'_, B> {
    ViewMut::new(b, off..off + len).expect("view")
}

/// Backends and buffers (with cuDNN handles and plans, cuBLAS handles, pinned staging) used
/// on one thread and dropped on another that never bound the context: the context stays
/// clean (no error recorded by a drop, synchronize succeeds) and the device still works.
/// The cuDNN handle is destroyed before its stream (`CudaLauncher`'s Drop).
#[test]
fn drop_on_a_thread_that_never_bound_the_context() {
    let Some(dev) = cuda_device_or_skip("drop_on_a_thread_that_never_bound_the_context", &options(true)) else {
        return;
    };
    let cpu = CpuBackend::new(0);
    let g = Conv2dGeom::square(2, 3, (8, 8), 4, 3, 1, 1, true);
    let x = random_vec(5, g.input_len(), 1.0);
    let p = random_vec(6, g.params_len(), 0.3);
    let dy = random_vec(7, g.output_len(), 1.0);
    let mut held = Vec::new();
    for _ in 0..3 {
        let be = dev.new_backend().expect("backend");
        let r = conv_passes(&be, &g, &x, &p, &dy);
        assert_close_f32(&r.0, &conv_passes(&cpu, &g, &x, &p, &dy).0, GPU_TOLERANCE, "conv before the drop");
        let mut buf = be.alloc(1 << 20).expect("alloc");
        be.fill(ViewMut::whole(&mut buf), 1.0).expect("fill");
        held.push((be, buf));
    }
    std::thread::spawn(move || drop(held)).join().expect("dropping thread panicked");
    dev.check_clean().expect("the context after dropping on another thread");
    let be = dev.new_backend().expect("backend after the drop");
    crossbow_kernels::activation::tests::relu_matches_cpu(&be);
    let r = conv_passes(&be, &g, &x, &p, &dy);
    assert_close_f32(&r.0, &conv_passes(&cpu, &g, &x, &p, &dy).0, GPU_TOLERANCE, "conv after the drop");
    dev.check_clean().expect("the context after the drop");
}

#[test]
fn driver_reports_the_device() {
    let Some(dev) = cuda_device_or_skip("driver_reports_the_device", &options(true)) else { return };
    let n = cuda::device_count().expect("device_count");
    assert!(n >= 1);
    let all = cuda::devices().expect("devices");
    assert_eq!(all.len(), n);
    assert_eq!(&all[0], dev.info());
    println!("{} | {} | cuDNN: {:?}", cuda::driver_status().describe(), dev.describe(), dev.cudnn_status());
    // A device that does not exist is an error, not a panic.
    assert!(CudaDevice::open(n + 7).is_err());
}
