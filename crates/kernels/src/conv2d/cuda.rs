//! GPU conv2d: cuDNN (`cudnn.rs`) when the device uses it and plans the geometry, else the
//! fallback —
//! im2col (`conv2d.cu`) over a chunk of images into the workspace, then one strided-batched
//! cuBLAS GEMM per chunk (forward, backward-data + col2im) or one GEMM per image
//! accumulating into the weight gradient (backward-params). A 1×1 stride-1 unpadded
//! convolution skips im2col. The bias is added / reduced by the `vector.cu` kernels on both
//! paths.

use super::{Conv2d, Conv2dGeom};
use crate::backend::{View, ViewMut};
use crate::cuda::GpuBackend;
use crate::cuda::launch::{DeviceRegion, Launcher, KernelArg, KernelSource, int, launch_n};
use crate::error::Result;
use crate::gemm::cuda::{RowGemm, row_gemm};
use crate::vector::cuda::{channel_add, channel_sum};

pub(crate) const SOURCES: &[KernelSource] = &[KernelSource {
    module: "conv2d",
    code: include_str!("conv2d.cu"),
    kernels: &["cb_im2col", "cb_col2im"],
    cooperative: &[],
}];

impl<E: Launcher> Conv2d for GpuBackend<E> {
    fn conv2d_workspace_len(&self, g: &Conv2dGeom) -> usize {
        workspace_len(&self.launcher, g)
    }

    unsafe fn conv2d_forward_unchecked(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        forward(&self.launcher, g, self.region(x)?, self.region(params)?, self.region_mut(y)?, self.region_mut(workspace)?)
    }

    unsafe fn conv2d_backward_data_unchecked(
        &self,
        g: &Conv2dGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        backward_data(&self.launcher, g, self.region(dy)?, self.region(params)?, self.region_mut(dx)?, self.region_mut(workspace)?)
    }

    unsafe fn conv2d_backward_params_unchecked(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        backward_params(&self.launcher, g, self.region(x)?, self.region(dy)?, self.region_mut(dparams)?, self.region_mut(workspace)?)
    }
}

/// Which convolution pass a cuDNN call computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvPass {
    /// `(x, weights) -> y`
    Forward,
    /// `(dy, weights) -> dx`
    BackwardData,
    /// `(x, dy) -> dweights`
    BackwardFilter,
}

/// Runs one pass through cuDNN (`cudnn.rs`) when the executor has it and it handles `g`:
/// `Ok(true)` when done, `Ok(false)` when the fallback must run.
#[allow(unused_variables)]
fn cudnn_pass<E: Launcher>(e: &E, pass: ConvPass, g: &Conv2dGeom, a: DeviceRegion, b: DeviceRegion, out: DeviceRegion, ws: DeviceRegion) -> Result<bool> {
    #[cfg(feature = "cuda")]
    {
        let op = crate::cuda::cudnn::CudnnOp(crate::cuda::cudnn::CudnnCall::Conv { pass, g: *g, a, b, out, ws });
        if let Some(done) = e.cudnn_op(op)? {
            return Ok(done);
        }
    }
    Ok(false)
}

/// Workspace `f32`s cuDNN needs for all three passes of `g`, or `None` when it does not
/// handle this geometry here.
#[allow(unused_variables)]
fn cudnn_workspace<E: Launcher>(e: &E, g: &Conv2dGeom) -> Option<usize> {
    #[cfg(feature = "cuda")]
    if let Ok(Some(ws)) = e.with_cudnn(|c| Ok(super::cudnn::workspace(c, g))) {
        return ws;
    }
    None
}

/// Most `f32`s of im2col workspace the fallback uses per chunk of images (16 MiB), unless a
/// single image needs more.
pub(crate) const COL_BUDGET: usize = 1 << 22;

/// Images unfolded at once by the fallback, with `budget` f32s of im2col workspace.
pub(crate) fn chunk_images(g: &Conv2dGeom, budget: usize) -> usize {
    if g.is_pointwise() {
        return g.batch.max(1);
    }
    let per_image = g.col_rows().saturating_mul(g.col_cols()).max(1);
    (budget / per_image).clamp(1, g.batch.max(1))
}

/// Workspace `f32`s of the fallback.
pub(crate) fn fallback_workspace_len(g: &Conv2dGeom, budget: usize) -> usize {
    if g.is_pointwise() { 0 } else { chunk_images(g, budget).saturating_mul(g.col_rows().saturating_mul(g.col_cols())) }
}

/// [`Conv2d::conv2d_workspace_len`]: enough for cuDNN (when it handles `g`) and for the
/// fallback.
fn workspace_len<E: Launcher>(e: &E, g: &Conv2dGeom) -> usize {
    let fallback = fallback_workspace_len(g, e.conv_col_budget());
    if g.validate().is_err() {
        return fallback;
    }
    cudnn_workspace(e, g).map_or(fallback, |c| c.max(fallback))
}

/// `C, H, W, KH, KW, SH, SW, PH, PW, OH, OW`.
fn dims(g: &Conv2dGeom) -> [KernelArg; 11] {
    [
        int(g.in_channels),
        int(g.in_h),
        int(g.in_w),
        int(g.kernel_h),
        int(g.kernel_w),
        int(g.stride_h),
        int(g.stride_w),
        int(g.pad_h),
        int(g.pad_w),
        int(g.out_h()),
        int(g.out_w()),
    ]
}

fn in_image(g: &Conv2dGeom) -> usize {
    g.in_channels * g.in_h * g.in_w
}

fn out_image(g: &Conv2dGeom) -> usize {
    g.out_channels * g.col_cols()
}

/// Unfolds images `n0 .. n0 + count` of `x` into `col`.
fn im2col<E: Launcher>(e: &E, g: &Conv2dGeom, x: DeviceRegion, n0: usize, count: usize, col: DeviceRegion) -> Result<()> {
    let total = count * g.col_rows() * g.col_cols();
    debug_assert!(total <= col.len);
    let mut a = vec![KernelArg::Ptr(x.at(n0 * in_image(g))), KernelArg::Ptr(col.addr), int(count)];
    a.extend(dims(g));
    launch_n(e, "cb_im2col", total, &a)
}

/// Folds `col` back into images `n0 .. n0 + count` of `dx` (overwriting them).
fn col2im<E: Launcher>(e: &E, g: &Conv2dGeom, col: DeviceRegion, dx: DeviceRegion, n0: usize, count: usize) -> Result<()> {
    let mut a = vec![KernelArg::Ptr(col.addr), KernelArg::Ptr(dx.at(n0 * in_image(g))), int(count)];
    a.extend(dims(g));
    launch_n(e, "cb_col2im", count * in_image(g), &a)
}

/// Chunks `(n0, count)` of the batch.
fn chunks<E: Launcher>(e: &E, g: &Conv2dGeom) -> Vec<(usize, usize)> {
    let step = chunk_images(g, e.conv_col_budget());
    (0..g.batch).step_by(step).map(|n0| (n0, step.min(g.batch - n0))).collect()
}

fn forward<E: Launcher>(e: &E, g: &Conv2dGeom, x: DeviceRegion, params: DeviceRegion, y: DeviceRegion, ws: DeviceRegion) -> Result<()> {
    let w = params.sub(0, g.weight_len());
    let (k, p) = (g.col_rows(), g.col_cols());
    if !cudnn_pass(e, ConvPass::Forward, g, x, w, y, ws)? {
        for (n0, count) in chunks(e, g) {
            let (src, stride) = if g.is_pointwise() {
                (x.at(n0 * in_image(g)), in_image(g))
            } else {
                im2col(e, g, x, n0, count, ws)?;
                (ws.addr, k * p)
            };
            // y_i[c_out, P] = W[c_out, K] · col_i[K, P]
            row_gemm(
                e,
                &RowGemm {
                    batch: count,
                    stride_a: 0,
                    stride_b: stride,
                    stride_c: out_image(g),
                    ..RowGemm::single(g.out_channels, p, k, w.addr, src, y.at(n0 * out_image(g)))
                },
            )?;
        }
    }
    if g.bias {
        channel_add(e, y, params.sub(g.weight_len(), g.out_channels), g.batch, g.out_channels, p)?;
    }
    Ok(())
}

fn backward_data<E: Launcher>(e: &E, g: &Conv2dGeom, dy: DeviceRegion, params: DeviceRegion, dx: DeviceRegion, ws: DeviceRegion) -> Result<()> {
    let w = params.sub(0, g.weight_len());
    if cudnn_pass(e, ConvPass::BackwardData, g, dy, w, dx, ws)? {
        return Ok(());
    }
    let (k, p) = (g.col_rows(), g.col_cols());
    for (n0, count) in chunks(e, g) {
        let (dst, stride) = if g.is_pointwise() { (dx.at(n0 * in_image(g)), in_image(g)) } else { (ws.addr, k * p) };
        // dcol_i[K, P] = Wᵀ[K, c_out] · dy_i[c_out, P]
        row_gemm(
            e,
            &RowGemm {
                trans_a: true,
                batch: count,
                stride_a: 0,
                stride_b: out_image(g),
                stride_c: stride,
                ..RowGemm::single(k, p, g.out_channels, w.addr, dy.at(n0 * out_image(g)), dst)
            },
        )?;
        if !g.is_pointwise() {
            col2im(e, g, ws, dx, n0, count)?;
        }
    }
    Ok(())
}

fn backward_params<E: Launcher>(e: &E, g: &Conv2dGeom, x: DeviceRegion, dy: DeviceRegion, dparams: DeviceRegion, ws: DeviceRegion) -> Result<()> {
    let dw = dparams.sub(0, g.weight_len());
    let (k, p) = (g.col_rows(), g.col_cols());
    if !cudnn_pass(e, ConvPass::BackwardFilter, g, x, dy, dw, ws)? {
        let mut first = true;
        for (n0, count) in chunks(e, g) {
            let src = if g.is_pointwise() {
                x.at(n0 * in_image(g))
            } else {
                im2col(e, g, x, n0, count, ws)?;
                ws.addr
            };
            for i in 0..count {
                // dW[c_out, K] (+)= dy_i[c_out, P] · col_iᵀ[P, K]
                row_gemm(
                    e,
                    &RowGemm {
                        trans_b: true,
                        beta: if first { 0.0 } else { 1.0 },
                        ..RowGemm::single(
                            g.out_channels,
                            k,
                            p,
                            dy.at((n0 + i) * out_image(g)),
                            src + 4 * (i * k * p) as u64,
                            dw.addr,
                        )
                    },
                )?;
                first = false;
            }
        }
    }
    if g.bias {
        channel_sum(e, dy, dparams.sub(g.weight_len(), g.out_channels), g.batch, g.out_channels, p)?;
    }
    Ok(())
}
