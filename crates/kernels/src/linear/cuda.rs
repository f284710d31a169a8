//! GPU fully connected layer: cuBLAS GEMMs plus the per-channel bias kernels of
//! `vector.cu` (with one "pixel" per channel).

use super::LinearGeom;
use crate::cuda::exec::{Dv, Exec};
use crate::error::Result;
use crate::gemm::cuda::{RowGemm, row_gemm};
use crate::vector::cuda::{channel_add, channel_sum};

/// `y[n, out] = x[n, in] · Wᵀ + b`.
pub(crate) fn forward<E: Exec>(e: &E, g: &LinearGeom, x: Dv, params: Dv, y: Dv) -> Result<()> {
    let (n, inf, outf) = (g.batch, g.in_features, g.out_features);
    row_gemm(e, &RowGemm { trans_b: true, ..RowGemm::single(n, outf, inf, x.addr, params.addr, y.addr) })?;
    if g.bias {
        channel_add(e, y, params.sub(g.weight_len(), outf), n, outf, 1)?;
    }
    Ok(())
}

/// `dx[n, in] = dy[n, out] · W[out, in]`.
pub(crate) fn backward_data<E: Exec>(e: &E, g: &LinearGeom, dy: Dv, params: Dv, dx: Dv) -> Result<()> {
    row_gemm(e, &RowGemm::single(g.batch, g.in_features, g.out_features, dy.addr, params.addr, dx.addr))
}

/// `dW[out, in] = dyᵀ · x`, `db = Σ_n dy`.
pub(crate) fn backward_params<E: Exec>(e: &E, g: &LinearGeom, x: Dv, dy: Dv, dparams: Dv) -> Result<()> {
    let (n, inf, outf) = (g.batch, g.in_features, g.out_features);
    row_gemm(e, &RowGemm { trans_a: true, ..RowGemm::single(outf, inf, n, dy.addr, x.addr, dparams.addr) })?;
    if g.bias {
        channel_sum(e, dy, dparams.sub(g.weight_len(), outf), n, outf, 1)?;
    }
    Ok(())
}
