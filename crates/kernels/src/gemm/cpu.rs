//! CPU GEMM on raw slices with explicit strides.

use super::{CpuGemm, Gemm, GemmConfig};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;

impl Gemm for CpuBackend {
    unsafe fn gemm_unchecked(
        &self,
        cfg: &GemmConfig,
        a: View<'_, Self>,
        b: View<'_, Self>,
        c: ViewMut<'_, Self>,
    ) -> Result<()> {
        gemm_config(self.gemm_kind(), cfg, host_slice(a), host_slice(b), host_slice_mut(c));
        Ok(())
    }
}

/// A matrix operand: pointer data plus row and column strides, in elements.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: isize,
    pub cs: isize,
}

/// `C[m,n] = alpha * A[m,k] B[k,n] + beta * C` with arbitrary strides (all operands in bounds;
/// callers check lengths). Single threaded.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_strided(
    which: CpuGemm,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    c: &mut [f32],
    rsc: isize,
    csc: isize,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // The product is empty: C = beta * C.
        for i in 0..m {
            for j in 0..n {
                let idx = (i as isize * rsc + j as isize * csc) as usize;
                c[idx] = if beta == 0.0 { 0.0 } else { beta * c[idx] };
            }
        }
        return;
    }
    debug_assert!(extent(m, k, a.rs, a.cs) <= a.data.len());
    debug_assert!(extent(k, n, b.rs, b.cs) <= b.data.len());
    debug_assert!(extent(m, n, rsc, csc) <= c.len());
    // SAFETY: the callers check (and the debug asserts re-check) that every operand's extent
    // lies within its slice; the strides are non-negative; C does not alias A or B (it is a
    // distinct &mut borrow).
    unsafe {
        match which {
            CpuGemm::MatrixMultiply => matrixmultiply::sgemm(
                m,
                k,
                n,
                alpha,
                a.data.as_ptr(),
                a.rs,
                a.cs,
                b.data.as_ptr(),
                b.rs,
                b.cs,
                beta,
                c.as_mut_ptr(),
                rsc,
                csc,
            ),
            CpuGemm::Gemm => {
                // gemm computes dst = alpha_g * dst + beta_g * lhs * rhs (note the order).
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    csc,
                    rsc,
                    beta != 0.0,
                    a.data.as_ptr(),
                    a.cs,
                    a.rs,
                    b.data.as_ptr(),
                    b.cs,
                    b.rs,
                    beta,
                    alpha,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        }
    }
}

fn extent(r: usize, c: usize, rs: isize, cs: isize) -> usize {
    if r == 0 || c == 0 { 0 } else { ((r - 1) as isize * rs + (c - 1) as isize * cs) as usize + 1 }
}

/// Row-major contiguous `C = alpha op(A) op(B) + beta C` as described by [`GemmConfig`].
pub(crate) fn gemm_config(which: CpuGemm, cfg: &GemmConfig, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n, k) = (cfg.m, cfg.n, cfg.k);
    let am = if cfg.trans_a { Mat { data: a, rs: 1, cs: m as isize } } else { Mat { data: a, rs: k as isize, cs: 1 } };
    let bm = if cfg.trans_b { Mat { data: b, rs: 1, cs: k as isize } } else { Mat { data: b, rs: n as isize, cs: 1 } };
    gemm_strided(which, m, n, k, cfg.alpha, am, bm, cfg.beta, c, n as isize, 1);
}
