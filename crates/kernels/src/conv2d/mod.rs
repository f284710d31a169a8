//! 2-d convolution (cross-correlation, as in every DL framework), NCHW, with stride, zero
//! padding and an optional bias.
//!
//! CPU: where the CPU has AVX-512F or AVX2 + FMA (chosen at run time), the convolution's
//! own kernels in `direct.rs`, with no im2col and no GEMM: the forward and backward-data
//! passes of stride-1 convolutions with output rows of at least 8 pixels (`Direct`:
//! backward-data as a convolution of `dy` with the transposed, flipped kernel; an unmasked
//! AVX-512 kernel over a zero-padded copy where rows are a multiple of 16 or exactly 8
//! pixels, masked loads elsewhere), the forward pass of stride-2 convolutions larger than 1×1
//! (over a copy split into column phases), their backward-data pass as four stride-1 direct
//! convolutions, one per parity class of the input pixels (`phases.rs`), and the weight
//! gradient of every convolution but 1×1 unpadded (`ParamsDirect`, output channels in the
//! vector lanes; strided 1×1 projections, `projection.rs`, as a product along the
//! subsampled pixels). Everything else (the forward and backward-data passes of 1×1 and of
//! other strides, CPUs without AVX2): per image, im2col into a workspace
//! then one GEMM (`W[c_out, K] * col[K, OH*OW]`, `K = c_in*kh*kw`); a 1×1 stride-1 unpadded
//! convolution skips im2col; the backward-params pass of stride-1 convolutions runs one GEMM
//! per kernel row from windows of a padded copy (`cpu.rs`, `Window`), other geometries
//! transpose the im2col matrix and `dy` first. The batch is split into as many groups as
//! the backend has threads, each with its own slice of the workspace; weight gradients are
//! summed per group, then across groups in a fixed order (deterministic for a given thread
//! count and CPU: the AVX-512 and AVX2 direct kernels add in the same order and give the
//! same bits, tested). With AVX2 or AVX-512 the wide 3×3 layers (stride 1, padding 1, at
//! least 32 channels in and out) take Winograd F(4×4, 3×3) instead: the forward and
//! backward-data passes (`winograd.rs`, at batches of 16 or more) and the weight gradient
//! (`winograd_params.rs`, any batch).

pub(crate) mod cpu;
pub(crate) mod direct;
pub(crate) mod phases;
pub(crate) mod projection;
pub(crate) mod winograd;
pub(crate) mod winograd_params;
pub(crate) mod cuda;
#[cfg(feature = "cuda")]
pub(crate) mod cudnn;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result};

/// Convolution. The provided methods check the arguments (the workspace against
/// [`Conv2d::conv2d_workspace_len`] too), then run the backend's `*_unchecked` kernels (what
/// a backend implements).
pub trait Conv2d: Storage {
    /// Scratch `f32`s the conv2d calls need for this geometry (0 when none).
    fn conv2d_workspace_len(&self, g: &Conv2dGeom) -> usize;

    checked_op! {
        /// `y = conv(x, w) + b`; `params` = weights `[c_out, c_in, kh, kw]` then bias `[c_out]` if
        /// the geometry has one.
        fn conv2d_forward(&self, g: &Conv2dGeom, x: View<'_, Self>, params: View<'_, Self>, y: ViewMut<'_, Self>, workspace: ViewMut<'_, Self>) {
            let ws = self.conv2d_workspace_len(g);
            g.check_pass("conv2d_forward", x.len(), params.len(), y.len(), workspace.len(), ws)?;
        }

        /// The kernel of [`Conv2d::conv2d_forward`].
        ///
        /// # Safety
        /// `g` is valid, every view has the length it implies, and the workspace holds at least
        /// [`Conv2d::conv2d_workspace_len`] elements.
        unsafe fn conv2d_forward_unchecked;
    }

    checked_op! {
        /// `dx` from `dy` and the weights.
        fn conv2d_backward_data(&self, g: &Conv2dGeom, dy: View<'_, Self>, params: View<'_, Self>, dx: ViewMut<'_, Self>, workspace: ViewMut<'_, Self>) {
            let ws = self.conv2d_workspace_len(g);
            g.check_pass("conv2d_backward_data", dx.len(), params.len(), dy.len(), workspace.len(), ws)?;
        }

        /// The kernel of [`Conv2d::conv2d_backward_data`].
        ///
        /// # Safety
        /// As for [`Conv2d::conv2d_forward_unchecked`].
        unsafe fn conv2d_backward_data_unchecked;
    }

    checked_op! {
        /// Weight (and bias) gradients, laid out like `params`.
        fn conv2d_backward_params(&self, g: &Conv2dGeom, x: View<'_, Self>, dy: View<'_, Self>, dparams: ViewMut<'_, Self>, workspace: ViewMut<'_, Self>) {
            let ws = self.conv2d_workspace_len(g);
            g.check_pass("conv2d_backward_params", x.len(), dparams.len(), dy.len(), workspace.len(), ws)?;
        }

        /// The kernel of [`Conv2d::conv2d_backward_params`].
        ///
        /// # Safety
        /// As for [`Conv2d::conv2d_forward_unchecked`].
        unsafe fn conv2d_backward_params_unchecked;
    }
}

/// The geometry of a conv2d call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2dGeom {
    /// Images in the batch (`n`).
    pub batch: usize,
    /// Input channels (`c_in`).
    pub in_channels: usize,
    /// Input height in pixels, before padding.
    pub in_h: usize,
    /// Input width in pixels, before padding.
    pub in_w: usize,
    /// Output channels (`c_out`): the number of filters.
    pub out_channels: usize,
    /// Kernel height (`kh`).
    pub kernel_h: usize,
    /// Kernel width (`kw`).
    pub kernel_w: usize,
    /// Vertical step between output rows, in input pixels (at least 1).
    pub stride_h: usize,
    /// Horizontal step between output columns, in input pixels (at least 1).
    pub stride_w: usize,
    /// Zero rows added above and below the input.
    pub pad_h: usize,
    /// Zero columns added left and right of the input.
    pub pad_w: usize,
    /// Whether `params` holds a bias `[c_out]` after the weights.
    pub bias: bool,
}

impl Conv2dGeom {
    /// A square kernel with equal stride and padding in both directions.
    #[allow(clippy::too_many_arguments)]
    pub fn square(
        batch: usize,
        in_channels: usize,
        in_hw: (usize, usize),
        out_channels: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
        bias: bool,
    ) -> Self {
        Conv2dGeom {
            batch,
            in_channels,
            in_h: in_hw.0,
            in_w: in_hw.1,
            out_channels,
            kernel_h: kernel,
            kernel_w: kernel,
            stride_h: stride,
            stride_w: stride,
            pad_h: pad,
            pad_w: pad,
            bias,
        }
    }

    /// Checks that the geometry is usable: non-zero sizes and strides, a kernel that fits in
    /// the padded input, element counts that do not overflow.
    pub fn validate(&self) -> Result<()> {
        let op = "conv2d";
        if self.batch == 0 || self.in_channels == 0 || self.out_channels == 0 {
            return Err(KernelError::invalid(op, format!("zero batch or channel count in {self:?}")));
        }
        if self.in_h == 0 || self.in_w == 0 || self.kernel_h == 0 || self.kernel_w == 0 {
            return Err(KernelError::invalid(op, format!("zero-sized input or kernel in {self:?}")));
        }
        if self.stride_h == 0 || self.stride_w == 0 {
            return Err(KernelError::invalid(op, "stride must be at least 1"));
        }
        if self.kernel_h > self.in_h + 2 * self.pad_h || self.kernel_w > self.in_w + 2 * self.pad_w {
            return Err(KernelError::invalid(
                op,
                format!(
                    "kernel {}x{} is larger than the padded input {}x{}",
                    self.kernel_h,
                    self.kernel_w,
                    self.in_h + 2 * self.pad_h,
                    self.in_w + 2 * self.pad_w
                ),
            ));
        }
        let checked = [
            self.batch.checked_mul(self.in_channels * self.in_h).and_then(|v| v.checked_mul(self.in_w)),
            self.batch.checked_mul(self.out_channels * self.out_h()).and_then(|v| v.checked_mul(self.out_w())),
            self.col_rows().checked_mul(self.col_cols()),
        ];
        if checked.iter().any(Option::is_none) {
            return Err(KernelError::invalid(op, format!("element count overflows in {self:?}")));
        }
        Ok(())
    }

    /// Output height `floor((H + 2p - k) / s) + 1`.
    pub fn out_h(&self) -> usize {
        (self.in_h + 2 * self.pad_h).saturating_sub(self.kernel_h) / self.stride_h.max(1) + 1
    }

    /// Output width.
    pub fn out_w(&self) -> usize {
        (self.in_w + 2 * self.pad_w).saturating_sub(self.kernel_w) / self.stride_w.max(1) + 1
    }

    /// Elements of the input `[n, c_in, h, w]`.
    pub fn input_len(&self) -> usize {
        self.batch * self.in_channels * self.in_h * self.in_w
    }

    /// Elements of the output `[n, c_out, oh, ow]`.
    pub fn output_len(&self) -> usize {
        self.batch * self.out_channels * self.out_h() * self.out_w()
    }

    /// Elements of the weights `[c_out, c_in, kh, kw]`.
    pub fn weight_len(&self) -> usize {
        self.out_channels * self.col_rows()
    }

    /// Elements of weights plus bias.
    pub fn params_len(&self) -> usize {
        self.weight_len() + if self.bias { self.out_channels } else { 0 }
    }

    /// Rows of the im2col matrix: `c_in * kh * kw`.
    pub fn col_rows(&self) -> usize {
        self.in_channels * self.kernel_h * self.kernel_w
    }

    /// Columns of the im2col matrix (output pixels per image).
    pub fn col_cols(&self) -> usize {
        self.out_h() * self.out_w()
    }

    /// True for a 1×1, stride-1, unpadded convolution (a plain GEMM, no im2col).
    pub fn is_pointwise(&self) -> bool {
        self.kernel_h == 1
            && self.kernel_w == 1
            && self.stride_h == 1
            && self.stride_w == 1
            && self.pad_h == 0
            && self.pad_w == 0
    }

    /// Forward FLOPs (multiply-adds counted as 2) for the whole batch.
    pub fn forward_flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.out_channels as f64 * self.col_rows() as f64 * self.col_cols() as f64
    }

    /// Checks the geometry, the lengths of a pass's views (for the backward passes, `dx` is
    /// the input and `dy` the output side) and a workspace of at least `ws_need` elements.
    pub(crate) fn check_pass(
        &self,
        op: &'static str,
        input: usize,
        params: usize,
        output: usize,
        ws_have: usize,
        ws_need: usize,
    ) -> Result<()> {
        self.validate()?;
        crate::error::check_len(op, "input", self.input_len(), input)?;
        crate::error::check_len(op, "params", self.params_len(), params)?;
        crate::error::check_len(op, "output", self.output_len(), output)?;
        if ws_have >= ws_need {
            Ok(())
        } else {
            Err(KernelError::Length { op: "conv2d", arg: "workspace", expected: ws_need, actual: ws_have })
        }
    }
}
