//! Numerical test helpers and the per-backend test generator (feature `testing`).
//!
//! * [`Tolerance`] and [`assert_close`]: the comparison rule every kernel test states
//!   explicitly — `|actual - expected| <= rel * max(|actual|, |expected|) + abs`;
//!   [`Tolerance::for_backend`] widens a CPU bound by [`GPU_TOLERANCE`] off the CPU.
//! * [`random_vec`] and friends: deterministic inputs from a seed.
//! * [`finite_difference`]: central differences in `f64` for checking backward passes.
//! * [`upload`], [`download`], [`nan_buffer`]: buffers of any backend in one call.
//! * [`test_backends!`](crate::test_backends): turns a test function generic over the
//!   backend into one named `#[test]` per backend — the CPU, the GPU backend on the kernel
//!   emulator ([`emu_backend_or_skip`]) and on a real GPU ([`cuda_backend_or_skip`], which
//!   prints `skipped: no CUDA driver` and passes where there is none). Every op folder's
//!   `tests.rs` is written this way, and other crates use it for their engine and
//!   synchroniser tests.
//! * [`selftest`]: every op against the CPU, one pass/fail row per op (`crossbow doctor`).

use std::any::TypeId;
use std::sync::OnceLock;

use crossbow_tensor::Rng;

use crate::cuda::emu::{EmuBackend, emu_backend};
use crate::cuda::{CudaBackend, CudaDevice, CudaOptions, DriverStatus, driver_status, env};
use crate::{Backend, CpuBackend, View, ViewMut};

/// The bound between a GPU backend and the CPU: 1e-4 relative, 1e-4 absolute (reductions of
/// up to a few thousand f32 terms run in a different order on a GPU).
pub const GPU_TOLERANCE: Tolerance = Tolerance::new(1e-4, 1e-4);

/// An explicit error bound: `|actual - expected| <= rel * max(|actual|, |expected|) + abs`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative part.
    pub rel: f64,
    /// Absolute part (for values near zero).
    pub abs: f64,
}

impl Tolerance {
    /// A tolerance from its relative and absolute parts.
    pub const fn new(rel: f64, abs: f64) -> Self {
        Tolerance { rel, abs }
    }

    /// Bit-for-bit equality.
    pub const EXACT: Tolerance = Tolerance::new(0.0, 0.0);

    /// f32 kernels against an f64 reference, short reductions.
    pub const F32: Tolerance = Tolerance::new(1e-5, 1e-6);

    /// Analytic f32 gradients against f64 central finite differences.
    pub const GRAD: Tolerance = Tolerance::new(2e-3, 2e-4);

    /// The bound for backend `B`: this one on the CPU (the reference), this one plus
    /// [`GPU_TOLERANCE`] elsewhere (reductions in another order, cuBLAS, cuDNN).
    pub fn for_backend<B: 'static>(self) -> Tolerance {
        if is_cpu::<B>() { self } else { Tolerance::new(self.rel + GPU_TOLERANCE.rel, self.abs + GPU_TOLERANCE.abs) }
    }

    /// True when `actual` is within the bound of `expected`.
    pub fn accepts(&self, actual: f64, expected: f64) -> bool {
        if actual.is_nan() || expected.is_nan() {
            return actual.is_nan() && expected.is_nan();
        }
        if actual == expected {
            return true;
        }
        (actual - expected).abs() <= self.rel * actual.abs().max(expected.abs()) + self.abs
    }
}

/// Panics with the first few offending elements unless every element of `actual` is within
/// `tol` of `expected`. `what` names the comparison in the message.
#[track_caller]
pub fn assert_close(actual: &[f32], expected: &[f64], tol: Tolerance, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths differ");
    let bad: Vec<String> = actual
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(_, (a, e))| !tol.accepts(**a as f64, **e))
        .take(5)
        .map(|(i, (a, e))| format!("[{i}] got {a} want {e} (diff {:.3e})", (*a as f64 - e).abs()))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} elements outside {tol:?}: {}",
        count_bad(actual, expected, tol),
        actual.len(),
        bad.join("; ")
    );
}

/// [`assert_close`] for two `f32` slices.
#[track_caller]
pub fn assert_close_f32(actual: &[f32], expected: &[f32], tol: Tolerance, what: &str) {
    let e: Vec<f64> = expected.iter().map(|&x| x as f64).collect();
    assert_close(actual, &e, tol, what);
}

fn count_bad(actual: &[f32], expected: &[f64], tol: Tolerance) -> usize {
    actual.iter().zip(expected).filter(|(a, e)| !tol.accepts(**a as f64, **e)).count()
}

/// `len` values uniform in `[-scale, scale)`, from `seed`.
pub fn random_vec(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut r = Rng::derive(seed, 0xC0FFEE);
    (0..len).map(|_| r.uniform_range(-scale, scale)).collect()
}

/// `len` values whose magnitudes are at least `gap` (for kinks at zero, as in ReLU).
pub fn random_vec_away_from_zero(seed: u64, len: usize, scale: f32, gap: f32) -> Vec<f32> {
    let mut r = Rng::derive(seed, 0xBEEF);
    (0..len)
        .map(|_| {
            let m = r.uniform_range(gap, scale.max(gap * 2.0));
            if r.bernoulli(0.5) { m } else { -m }
        })
        .collect()
}

/// `len` distinct values at least `gap` apart, in random order (for max-pool ties).
pub fn random_distinct_vec(seed: u64, len: usize, gap: f32) -> Vec<f32> {
    let mut r = Rng::derive(seed, 0xD15C);
    let mut v: Vec<f32> = (0..len).map(|i| (i as f32 - len as f32 / 2.0) * gap).collect();
    r.shuffle(&mut v);
    v
}

/// Random class labels in `0..classes`, as `f32`.
pub fn random_labels(seed: u64, len: usize, classes: usize) -> Vec<f32> {
    let mut r = Rng::derive(seed, 0x1AB);
    (0..len).map(|_| r.below(classes) as f32).collect()
}

/// Central finite differences `(f(x + h e_i) - f(x - h e_i)) / 2h` of a scalar function, in f64.
pub fn finite_difference(x: &[f64], h: f64, mut f: impl FnMut(&[f64]) -> f64) -> Vec<f64> {
    let mut xs = x.to_vec();
    (0..x.len())
        .map(|i| {
            let orig = xs[i];
            xs[i] = orig + h;
            let fp = f(&xs);
            xs[i] = orig - h;
            let fm = f(&xs);
            xs[i] = orig;
            (fp - fm) / (2.0 * h)
        })
        .collect()
}

/// `sum_i w_i y_i` — the scalar whose gradient with respect to `y` is `w` (used to turn a
/// vector-valued op into a scalar for finite differences).
pub fn dot(w: &[f64], y: &[f64]) -> f64 {
    w.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// Widens to f64.
pub fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Proptest settings for a test of backend `B` that runs `cases` random cases: all of them on
/// the CPU and a GPU; an eighth of them (at least 8) on the kernel emulator, which runs a
/// kernel with barriers on one host thread per GPU thread and is slow at it. (Tests that
/// compare a backend with the CPU set their case counts directly: the emulator runs those in
/// full.) `PROPTEST_CASES` overrides either.
pub fn proptest_config<B: 'static>(cases: u32) -> proptest::test_runner::Config {
    let cases = if TypeId::of::<B>() == TypeId::of::<EmuBackend>() { (cases / 8).max(8) } else { cases };
    proptest::test_runner::Config::with_cases(cases)
}

/// True when `B` is the CPU backend (the reference).
pub fn is_cpu<B: 'static>() -> bool {
    TypeId::of::<B>() == TypeId::of::<CpuBackend>()
}

/// A new buffer holding `data` (panics on a backend error: for tests).
#[track_caller]
pub fn upload<B: Backend>(be: &B, data: &[f32]) -> B::Buffer {
    let mut buf = be.alloc(data.len()).unwrap_or_else(|e| panic!("alloc: {e}"));
    be.upload(data, ViewMut::whole(&mut buf)).unwrap_or_else(|e| panic!("upload: {e}"));
    buf
}

/// A buffer's contents (panics on a backend error: for tests).
#[track_caller]
pub fn download<B: Backend>(be: &B, buf: &B::Buffer) -> Vec<f32> {
    let mut v = vec![0.0; B::buffer_len(buf)];
    be.download(View::whole(buf), &mut v).unwrap_or_else(|e| panic!("download: {e}"));
    v
}

/// A buffer of `len` NaNs, for outputs: every op must overwrite what it writes.
#[track_caller]
pub fn nan_buffer<B: Backend>(be: &B, len: usize) -> B::Buffer {
    upload(be, &vec![f32::NAN; len])
}

/// A CPU backend whose ops split the batch over a private pool of 3 threads (uneven splits
/// of small batches included).
pub fn threaded_cpu() -> CpuBackend {
    CpuBackend::with_threads(0, 3).unwrap_or_else(|e| panic!("threaded CPU backend: {e}"))
}

/// The GPU backend on the kernel emulator, or `None` after printing `<test>: skipped: no
/// C++ compiler ...` (the emulator compiles the `.cu` sources with the host C++ compiler).
pub fn emu_backend_or_skip(test: &str) -> Option<EmuBackend> {
    match emu_backend() {
        Ok(Some(be)) => Some(be),
        Ok(None) => {
            println!("{test}: skipped: no C++ compiler for the CUDA kernel emulator");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Prints `<test>: skipped: <why>` and returns `None`; with `CROSSBOW_REQUIRE_GPU=1`
/// (`scripts/gpu-check.sh`) a skip is a failure instead.
fn skip<T>(test: &str, why: &str) -> Option<T> {
    assert!(!env::flag(env::REQUIRE_GPU), "{test}: {why}, but {} is set", env::REQUIRE_GPU);
    println!("{test}: skipped: {why}");
    None
}

/// Device 0 opened with `options`, or why not (`no CUDA driver` where there is none, and
/// without the `cuda` feature). Never panics: the driver is looked for before any driver
/// call.
fn open_device(options: &CudaOptions) -> Result<CudaDevice, String> {
    match driver_status() {
        DriverStatus::Ready { devices, .. } if devices > 0 => {}
        DriverStatus::Ready { .. } => return Err("no CUDA device".into()),
        DriverStatus::NoDriver { .. } | DriverStatus::NotCompiled => return Err("no CUDA driver".into()),
        other => return Err(other.describe()),
    }
    CudaDevice::open_with(0, options).map_err(|e| format!("cuda:0 is not usable: {e}"))
}

/// A gate that opens nothing: `Some(())` when the driver reports a CUDA device, or `None`
/// after printing `<test>: skipped: <why>` (a failure with `CROSSBOW_REQUIRE_GPU=1`). For
/// tests that must see the process's first device open themselves (no module loaded yet).
pub fn cuda_driver_or_skip(test: &str) -> Option<()> {
    let why = match driver_status() {
        DriverStatus::Ready { devices, .. } if devices > 0 => return Some(()),
        DriverStatus::Ready { .. } => "no CUDA device".to_string(),
        DriverStatus::NoDriver { .. } | DriverStatus::NotCompiled => "no CUDA driver".to_string(),
        other => other.describe(),
    };
    skip(test, &why)
}

/// The gate every GPU test starts with: device 0 opened with `options`, or `None` after
/// printing `<test>: skipped: <why>` (`skipped: no CUDA driver` where there is none). With
/// `CROSSBOW_REQUIRE_GPU=1` a skip is a failure instead.
pub fn cuda_device_or_skip(test: &str, options: &CudaOptions) -> Option<CudaDevice> {
    open_device(options).map_or_else(|why| skip(test, &why), Some)
}

/// The options of the real-GPU test variants: cuDNN as the environment says (and not at all
/// when `cudnn` is false), and a synchronisation after every launch so an asynchronous
/// fault names its kernel.
pub fn cuda_test_options(cudnn: bool) -> CudaOptions {
    let mut o = CudaOptions::from_env();
    o.cudnn &= cudnn;
    // CROSSBOW_REQUIRE_CUDNN applies to the variants that ask for cuDNN.
    o.require_cudnn &= cudnn;
    o.sync_launches = true;
    o
}

/// A new learner backend on GPU 0 (opened once per process with [`cuda_test_options`]),
/// or `None` after printing `<test>: skipped: <why>` — `skipped: no CUDA driver` without a
/// driver, or without the `cuda` feature. With `cudnn` false convolution and batch norm run
/// on the fallback kernels; the backend is checked to use cuDNN exactly when asked for and
/// available.
pub fn cuda_backend_or_skip(test: &str, cudnn: bool) -> Option<CudaBackend> {
    cuda_backend_with(test, cudnn, true)
}

/// As [`cuda_backend_or_skip`] with cuDNN as the environment says, but launches left
/// asynchronous (no synchronisation after each launch, the way training runs): the
/// `cuda_async` variant of [`test_backends!`](crate::test_backends), for tests that check
/// ordering across streams.
pub fn cuda_async_backend_or_skip(test: &str) -> Option<CudaBackend> {
    cuda_backend_with(test, true, false)
}

fn cuda_backend_with(test: &str, cudnn: bool, sync: bool) -> Option<CudaBackend> {
    static DEVICES: [OnceLock<Result<CudaDevice, String>>; 4] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let options = || {
        let mut o = cuda_test_options(cudnn);
        o.sync_launches = sync;
        o
    };
    let dev = match DEVICES[cudnn as usize + 2 * sync as usize].get_or_init(|| open_device(&options())) {
        Ok(d) => d,
        Err(why) => return skip(test, why),
    };
    let be = dev.new_backend().unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(be.uses_cudnn(), cudnn && dev.cudnn_status().is_enabled(), "{test}: cuDNN use");
    Some(be)
}

/// What the engine and synchroniser tests need beyond [`Backend`]: more backends of the same
/// device (one per learner).
pub trait TestBackend: Backend + Sized {
    /// Another backend of the same device whose buffers this one may use (on a GPU a new
    /// stream; ordering across them is the caller's, with events).
    fn sibling(&self) -> crate::Result<Self>;

    /// A backend of the same device that synchronises after every launch, when this one
    /// does not (a GPU backend opened without `sync_launches`); `None` when this backend
    /// already runs every call to completion (the CPU, the emulator). Tests compare a run on
    /// it with the asynchronous run, bit for bit.
    fn synchronous_twin(&self) -> crate::Result<Option<Self>> {
        Ok(None)
    }
}

impl TestBackend for CpuBackend {
    fn sibling(&self) -> crate::Result<Self> {
        Ok(self.clone())
    }
}

impl TestBackend for EmuBackend {
    fn sibling(&self) -> crate::Result<Self> {
        Ok(self.clone())
    }
}

impl TestBackend for CudaBackend {
    /// A new stream, with this backend's graph setting.
    fn sibling(&self) -> crate::Result<Self> {
        let b = self.cuda_device().new_backend()?;
        b.set_graphs(self.graphs()?.0)?;
        Ok(b)
    }

    fn synchronous_twin(&self) -> crate::Result<Option<Self>> {
        let dev = self.cuda_device();
        if dev.options().sync_launches {
            return Ok(None);
        }
        let mut o = dev.options().clone();
        o.sync_launches = true;
        CudaDevice::open_with(dev.ordinal(), &o)?.new_backend().map(Some)
    }
}

/// Turns test functions generic over the backend into one named `#[test]` per backend.
///
/// Each `name` is a function `fn name<B: ...>(be: &B)` in scope (bound by [`Backend`] or
/// [`TestBackend`]); the macro makes a module `name` with one `#[test]` per backend:
///
/// | variant | backend |
/// |---|---|
/// | `cpu` | [`CpuBackend::new(0)`](CpuBackend::new) (single-threaded, the reference) |
/// | `cpu_threads` | [`threaded_cpu`] (batch split over 3 threads) |
/// | `emu` | the GPU backend on the kernel emulator ([`emu_backend_or_skip`]) |
/// | `cuda` | the GPU backend on GPU 0 ([`cuda_backend_or_skip`]: prints `skipped: no CUDA driver` and passes without one) |
/// | `cuda_no_cudnn` | the same with cuDNN off (convolution and batch norm on the fallback kernels) |
/// | `cuda_async` | GPU 0 with asynchronous launches ([`cuda_async_backend_or_skip`]), as training runs |
///
/// The default is `[cpu, emu, cuda]`; a list after the name chooses others. Attributes
/// before a name (`#[ignore]`, ...) apply to every variant.
///
/// ```
/// use crossbow_kernels::Backend;
/// use crossbow_kernels::testing::TestBackend;
///
/// fn describes_itself<B: Backend>(be: &B) {
///     assert!(!be.describe().is_empty());
/// }
///
/// fn two_learners<B: TestBackend>(be: &B) {
///     let other = be.sibling().unwrap();
///     assert_eq!(other.device(), be.device());
/// }
///
/// crossbow_kernels::test_backends! {
///     describes_itself,                           // describes_itself::{cpu, emu, cuda}
///     two_learners: [cpu, cpu_threads, emu, cuda],
/// }
/// # fn main() {}
/// ```
///
/// Run one backend's variants with a filter: `cargo test ::emu`, `cargo test ::cuda`.
#[macro_export]
macro_rules! test_backends {
    ($($(#[$meta:meta])* $test:ident $(: [$($backend:ident),+ $(,)?])?),+ $(,)?) => {
        $($crate::test_backends!(@test [$(#[$meta])*] $test [$($($backend),+)?]);)+
    };
    (@test $attrs:tt $test:ident []) => {
        $crate::test_backends!(@test $attrs $test [cpu, emu, cuda]);
    };
    (@test $attrs:tt $test:ident [$($backend:ident),+]) => {
        mod $test {
            $($crate::test_backends!(@variant $attrs $test $backend);)+
        }
    };
    (@variant [$(#[$meta:meta])*] $test:ident cpu) => {
        #[test]
        $(#[$meta])*
        fn cpu() {
            super::$test(&$crate::CpuBackend::new(0));
        }
    };
    (@variant [$(#[$meta:meta])*] $test:ident cpu_threads) => {
        #[test]
        $(#[$meta])*
        fn cpu_threads() {
            super::$test(&$crate::testing::threaded_cpu());
        }
    };
    (@variant [$(#[$meta:meta])*] $test:ident emu) => {
        #[test]
        $(#[$meta])*
        fn emu() {
            if let Some(be) = $crate::testing::emu_backend_or_skip(::core::concat!(::core::module_path!(), "::emu")) {
                super::$test(&be);
            }
        }
    };
    (@variant [$(#[$meta:meta])*] $test:ident cuda) => {
        #[test]
        $(#[$meta])*
        fn cuda() {
            if let Some(be) = $crate::testing::cuda_backend_or_skip(::core::concat!(::core::module_path!(), "::cuda"), true) {
                super::$test(&be);
            }
        }
    };
    (@variant [$(#[$meta:meta])*] $test:ident cuda_async) => {
        #[test]
        $(#[$meta])*
        fn cuda_async() {
            if let Some(be) = $crate::testing::cuda_async_backend_or_skip(::core::concat!(::core::module_path!(), "::cuda_async")) {
                super::$test(&be);
            }
        }
    };
    (@variant [$(#[$meta:meta])*] $test:ident cuda_no_cudnn) => {
        #[test]
        $(#[$meta])*
        fn cuda_no_cudnn() {
            if let Some(be) =
                $crate::testing::cuda_backend_or_skip(::core::concat!(::core::module_path!(), "::cuda_no_cudnn"), false)
            {
                super::$test(&be);
            }
        }
    };
}

pub use crate::test_backends;

pub mod selftest;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_rule() {
        let t = Tolerance::new(1e-3, 1e-6);
        assert!(t.accepts(1.0005, 1.0));
        assert!(!t.accepts(1.002, 1.0));
        assert!(t.accepts(0.0, 5e-7));
        assert!(!t.accepts(0.0, 5e-6));
        assert!(t.accepts(f64::NAN, f64::NAN));
        assert!(!t.accepts(f64::NAN, 1.0));
        assert!(!Tolerance::EXACT.accepts(1.0, 1.0 + 1e-12));
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn assert_close_fails_on_a_difference() {
        assert_close(&[1.0, 2.0], &[1.0, 2.1], Tolerance::F32, "demo");
    }

    #[test]
    fn finite_difference_of_a_cubic() {
        let g = finite_difference(&[2.0, -1.0], 1e-4, |x| x[0].powi(3) + 3.0 * x[1]);
        assert!((g[0] - 12.0).abs() < 1e-6 && (g[1] - 3.0).abs() < 1e-6, "{g:?}");
    }
}
