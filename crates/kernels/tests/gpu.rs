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
/// at the same time, each matching the CPU; then cross-stream ordering with events.
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

    // Ordering across streams: A fills a buffer 20 times; B waits for A's event, then
    // copies it.
    let a = dev.new_backend().expect("backend");
    let b = dev.new_backend().expect("backend");
    let n = 1 << 22;
    let mut src = a.alloc(n).expect("alloc");
    let mut dst = b.alloc(n).expect("alloc");
    b.synchronize().expect("sync");
    for i in 0..20 {
        a.fill(ViewMut::whole(&mut src), i as f32).expect("fill");
    }
    let done = a.record_event().expect("event");
    b.wait_event(&done).expect("wait");
    b.copy(View::whole(&src), ViewMut::whole(&mut dst)).expect("copy");
    let mut host = vec![0.0f32; n];
    b.download(View::whole(&dst), &mut host).expect("download");
    assert!(host.iter().all(|&v| v == 19.0), "B read A's buffer before A's event");
    a.synchronize().expect("sync");
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

/// A second open of the device reuses the loaded modules (no compile), and they work.
#[test]
fn module_cache_reuses_loaded_kernels() {
    let Some(first) = cuda_device_or_skip("module_cache_reuses_loaded_kernels", &options(true)) else { return };
    let before = cuda::kernel_cache_stats();
    let second = CudaDevice::open_with(0, &options(false)).expect("second open");
    let after = cuda::kernel_cache_stats();
    println!("kernel cache: {before:?} -> {after:?}; target {}", first.kernel_target());
    assert_eq!(after.compiled, before.compiled, "reopening compiled again");
    assert!(after.memory_hits > before.memory_hits);
    assert_eq!(first.kernel_target(), second.kernel_target());
    crossbow_kernels::activation::tests::relu_length_mismatch_is_an_error(&second.new_backend().expect("backend"));
    crossbow_kernels::activation::tests::relu_matches_cpu(&second.new_backend().expect("backend"));
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
