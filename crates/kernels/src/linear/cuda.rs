//! GPU fully connected layer: cuBLAS GEMMs plus the per-channel bias kernels of
//! `vector.cu` (with one "pixel" per channel).

use super::{Linear, LinearGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{Launcher, KernelSource};
use crate::error::Result;
use crate::gemm::cuda::{RowGemm, row_gemm};
use crate::vector::cuda::{channel_add, channel_sum};

/// No kernels of its own: cuBLAS and `vector.cu`'s bias kernels.
pub(crate) const SOURCES: &[KernelSource] = &[];

impl<E: Launcher> Linear for GpuBackend<E> {
    /// `y[n, out] = x[n, in] · Wᵀ + b`.
    unsafe fn linear_forward_unchecked(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (e, x, params, y) = (&self.launcher, self.region(x)?, self.region(params)?, self.region_mut(y)?);
        let (n, inf, outf) = (g.batch, g.in_features, g.out_features);
        row_gemm(e, &RowGemm { trans_b: true, ..RowGemm::single(n, outf, inf, x.addr, params.addr, y.addr) })?;
        if g.bias {
            channel_add(e, y, params.sub(g.weight_len(), outf), n, outf, 1)?;
        }
        Ok(())
    }

    /// `dx[n, in] = dy[n, out] · W[out, in]`.
    unsafe fn linear_backward_data_unchecked(
        &self,
        g: &LinearGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (dy, params, dx) = (self.region(dy)?, self.region(params)?, self.region_mut(dx)?);
        row_gemm(&self.launcher, &RowGemm::single(g.batch, g.in_features, g.out_features, dy.addr, params.addr, dx.addr))
    }

    /// `dW[out, in] = dyᵀ · x`, `db = Σ_n dy`.
    unsafe fn linear_backward_params_unchecked(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (e, x, dy, dparams) = (&self.launcher, self.region(x)?, self.region(dy)?, self.region_mut(dparams)?);
        let (n, inf, outf) = (g.batch, g.in_features, g.out_features);
        row_gemm(e, &RowGemm { trans_a: true, ..RowGemm::single(outf, inf, n, dy.addr, x.addr, dparams.addr) })?;
        if g.bias {
            channel_sum(e, dy, dparams.sub(g.weight_len(), outf), n, outf, 1)?;
        }
        Ok(())
    }
}
