//! Row-major GEMM on a column-major BLAS (cuBLAS).
//!
//! A row-major `r × c` matrix read as column-major is its `c × r` transpose, so the
//! row-major `C = op(A) op(B)` is the column-major `Cᵀ = op(B)ᵀ op(A)ᵀ`: one column-major
//! GEMM with the operands swapped, `m` and `n` swapped, the transpose flags swapped, and
//! each leading dimension the stored row length of its matrix (candle's `gemm_config`).

use super::{Gemm, GemmConfig};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{ColGemm, DeviceRegion, Launcher, KernelSource};
use crate::error::Result;

/// No kernels of its own: cuBLAS (and `vector.cu`'s `cb_axpby` for `k == 0`).
pub(crate) const SOURCES: &[KernelSource] = &[];

impl<E: Launcher> Gemm for GpuBackend<E> {
    unsafe fn gemm_unchecked(
        &self,
        cfg: &GemmConfig,
        a: View<'_, Self>,
        b: View<'_, Self>,
        c: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (a, b, c) = (self.region(a)?, self.region(b)?, self.region_mut(c)?);
        row_gemm(
            &self.launcher,
            &RowGemm {
                trans_a: cfg.trans_a,
                trans_b: cfg.trans_b,
                alpha: cfg.alpha,
                beta: cfg.beta,
                ..RowGemm::single(cfg.m, cfg.n, cfg.k, a.addr, b.addr, c.addr)
            },
        )
    }
}

/// A batch of row-major GEMMs `C_i[m, n] = alpha * op(A_i) * op(B_i) + beta * C_i`, the
/// matrices stored densely (`A` as `[m, k]`, or `[k, m]` when `trans_a`; `B` as `[k, n]`,
/// or `[n, k]` when `trans_b`), `X_i` at `X + i * stride_x` elements (stride 0 = shared).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowGemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub a: u64,
    pub b: u64,
    pub beta: f32,
    pub c: u64,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

impl RowGemm {
    /// A single plain product `C = A * B` (`alpha = 1`, `beta = 0`).
    pub fn single(m: usize, n: usize, k: usize, a: u64, b: u64, c: u64) -> Self {
        RowGemm {
            trans_a: false,
            trans_b: false,
            m,
            n,
            k,
            alpha: 1.0,
            a,
            b,
            beta: 0.0,
            c,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        }
    }

    /// The column-major call computing it.
    pub fn col_major(&self) -> ColGemm {
        let lda = if self.trans_a { self.m } else { self.k };
        let ldb = if self.trans_b { self.k } else { self.n };
        ColGemm {
            trans_a: self.trans_b,
            trans_b: self.trans_a,
            m: self.n,
            n: self.m,
            k: self.k,
            alpha: self.alpha,
            a: self.b,
            lda: ldb,
            b: self.a,
            ldb: lda,
            beta: self.beta,
            c: self.c,
            ldc: self.n,
            batch: self.batch,
            stride_a: self.stride_b,
            stride_b: self.stride_a,
            stride_c: self.stride_c,
        }
    }
}

/// Runs a [`RowGemm`]. Empty products do nothing, except `k == 0`, which scales `C` by
/// `beta` (BLAS semantics; `beta == 0` writes zeros).
pub(crate) fn row_gemm<E: Launcher>(e: &E, r: &RowGemm) -> Result<()> {
    if r.m == 0 || r.n == 0 || r.batch == 0 {
        return Ok(());
    }
    if r.k == 0 {
        for i in 0..r.batch {
            let c = DeviceRegion { addr: r.c + 4 * (i * r.stride_c) as u64, len: r.m * r.n };
            crate::vector::cuda::axpby(e, 0.0, c, r.beta, c)?;
        }
        return Ok(());
    }
    e.gemm(&r.col_major())
}
