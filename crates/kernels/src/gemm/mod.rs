//! General matrix multiply, row-major.
//!
//! On the CPU two well-kept crates are available behind [`CpuGemm`]: `matrixmultiply` (the
//! default) and `gemm`. Measured on this project's 2-core machine (AVX2 + AVX-512), single
//! threaded, at the im2col shapes of LeNet-5 and the CIFAR ResNets (`cargo bench -p
//! crossbow-benches --bench gemm_conv -- gemm`), `matrixmultiply` 0.3 was faster than `gemm`
//! 0.19 on 5 of 7 shapes, by up to 2× (e.g. 106 vs 74 GFLOP/s at 32×288·288×256, 131 vs 66 at
//! 256³) and lost only on products with a tiny M (LeNet's 6×25·25×576), which the conv code
//! avoids by computing few-output-channel products transposed. So it is the default;
//! BENCHMARKS.md has the table. Both run single threaded: parallelism comes from splitting the
//! batch (one learner) or from running several learners at once.

pub(crate) mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};

/// GEMM. The provided method checks the arguments, then runs the backend's
/// [`Gemm::gemm_unchecked`] (what a backend implements).
pub trait Gemm: Storage {
    checked_op! {
        /// Row-major `C = alpha * op(A) * op(B) + beta * C` (see [`GemmConfig`]).
        fn gemm(&self, cfg: &GemmConfig, a: View<'_, Self>, b: View<'_, Self>, c: ViewMut<'_, Self>) {
            cfg.check(a.len(), b.len(), c.len())?;
        }

        /// The kernel of [`Gemm::gemm`].
        ///
        /// # Safety
        /// `a`, `b` and `c` have the lengths [`GemmConfig::lens`] gives.
        unsafe fn gemm_unchecked;
    }
}

/// Row-major `C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C`.
///
/// `A` is stored `[m, k]` (or `[k, m]` when `trans_a`), `B` is stored `[k, n]` (or `[n, k]`
/// when `trans_b`), `C` is `[m, n]`. With `beta == 0` the old `C` is not read.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmConfig {
    /// `A` is stored transposed, as `[k, m]`.
    pub trans_a: bool,
    /// `B` is stored transposed, as `[n, k]`.
    pub trans_b: bool,
    /// Rows of `op(A)` and of `C`.
    pub m: usize,
    /// Columns of `op(B)` and of `C`.
    pub n: usize,
    /// The shared (contracted) dimension: columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product `op(A) * op(B)`.
    pub alpha: f32,
    /// Scale of the old `C` (0: `C` is overwritten without being read).
    pub beta: f32,
}

impl GemmConfig {
    /// `C = A * B` with no transposes.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        GemmConfig { trans_a: false, trans_b: false, m, n, k, alpha: 1.0, beta: 0.0 }
    }

    /// Element counts of A, B and C, checked for overflow.
    pub fn lens(&self) -> Result<(usize, usize, usize)> {
        let mul = |a: usize, b: usize| {
            a.checked_mul(b).ok_or_else(|| KernelError::invalid("gemm", format!("{a} x {b} overflows")))
        };
        Ok((mul(self.m, self.k)?, mul(self.k, self.n)?, mul(self.m, self.n)?))
    }

    /// Checks the lengths of `A`, `B` and `C`.
    pub(crate) fn check(&self, a: usize, b: usize, c: usize) -> Result<()> {
        let (la, lb, lc) = self.lens()?;
        check_len("gemm", "a", la, a)?;
        check_len("gemm", "b", lb, b)?;
        check_len("gemm", "c", lc, c)
    }

    /// The FLOP count `2 m n k` (for benchmarks).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// Which CPU GEMM crate the CPU backend calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuGemm {
    /// `matrixmultiply` (BLAS-like, small, fastest on our shapes).
    #[default]
    MatrixMultiply,
    /// `gemm` (the candle / burn default).
    Gemm,
}
