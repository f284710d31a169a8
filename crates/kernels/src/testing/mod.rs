//! Numerical test helpers and the backend conformance suite (feature `testing`).
//!
//! * [`Tolerance`] and [`assert_close`]: the comparison rule every kernel test states
//!   explicitly — `|actual - expected| <= rel * max(|actual|, |expected|) + abs`.
//! * [`random_vec`] and friends: deterministic inputs from a seed.
//! * [`finite_difference`]: central differences in `f64` for checking backward passes.
//! * [`suite`]: one test body per op, generic over [`crate::Backend`], comparing any backend
//!   with the CPU reference on random shapes and values. The CPU tests run it against itself
//!   (which checks the suite), the CUDA tests against the GPU.

pub mod suite;

use crossbow_tensor::Rng;

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

/// The gate every GPU test starts with: device 0 opened with `options`, or `None` after
/// printing `<test>: skipped: <why>` (`skipped: no CUDA driver` where there is none). With
/// `CROSSBOW_REQUIRE_GPU=1` a skip is a failure instead (`scripts/gpu-check.sh` sets it).
/// Never panics otherwise: the driver is looked for before any driver call.
#[cfg(feature = "cuda")]
pub fn cuda_device_or_skip(test: &str, options: &crate::cuda::CudaOptions) -> Option<crate::cuda::CudaDevice> {
    use crate::cuda::{CudaDevice, DriverStatus, driver_status, env};
    let skip = |why: String| -> Option<CudaDevice> {
        assert!(!env::flag(env::REQUIRE_GPU), "{test}: {why}, but {} is set", env::REQUIRE_GPU);
        println!("{test}: skipped: {why}");
        None
    };
    match driver_status() {
        DriverStatus::Ready { devices, .. } if devices > 0 => {}
        DriverStatus::Ready { .. } => return skip("no CUDA device".into()),
        DriverStatus::NoDriver { .. } | DriverStatus::NotCompiled => return skip("no CUDA driver".into()),
        other => return skip(other.describe()),
    }
    match CudaDevice::open_with(0, options) {
        Ok(d) => Some(d),
        Err(e) => skip(format!("cuda:0 is not usable: {e}")),
    }
}

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
