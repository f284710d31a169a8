//! 2-d convolution (cross-correlation, as in every DL framework), NCHW, with stride, zero
//! padding and an optional bias.
//!
//! CPU: per image, im2col into a workspace then one GEMM (`W[c_out, K] * col[K, OH*OW]`,
//! `K = c_in*kh*kw`); a 1×1 stride-1 unpadded convolution skips im2col. The batch is split
//! into as many groups as the backend has threads, each with its own slice of the workspace;
//! weight gradients are summed per group, then across groups in a fixed order (deterministic
//! for a given thread count).

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::error::{KernelError, Result};

/// The geometry of a conv2d call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2dGeom {
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub pad_h: usize,
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

    pub(crate) fn check_lens(&self, op: &'static str, x: usize, params: usize, y: usize) -> Result<()> {
        self.validate()?;
        crate::error::check_len(op, "input", self.input_len(), x)?;
        crate::error::check_len(op, "params", self.params_len(), params)?;
        crate::error::check_len(op, "output", self.output_len(), y)
    }
}
