//! 2-d max and average pooling, NCHW, with stride, zero padding and Caffe-style ceil mode
//! (the original Crossbow's choice; PyTorch's default is floor). Global average pooling is
//! average pooling with the kernel equal to the input size.

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::error::{KernelError, Result, check_len};

/// The geometry of a pooling call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pool2dGeom {
    pub batch: usize,
    pub channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub pad_h: usize,
    pub pad_w: usize,
    /// Round the output size up (a last, partial window) instead of down.
    pub ceil_mode: bool,
}

impl Pool2dGeom {
    /// A square window with equal stride and padding, floor mode.
    pub fn square(
        batch: usize,
        channels: usize,
        in_hw: (usize, usize),
        kernel: usize,
        stride: usize,
        pad: usize,
    ) -> Self {
        Pool2dGeom {
            batch,
            channels,
            in_h: in_hw.0,
            in_w: in_hw.1,
            kernel_h: kernel,
            kernel_w: kernel,
            stride_h: stride,
            stride_w: stride,
            pad_h: pad,
            pad_w: pad,
            ceil_mode: false,
        }
    }

    /// Global pooling: one window covering the whole `h × w` input.
    pub fn global(batch: usize, channels: usize, in_hw: (usize, usize)) -> Self {
        Pool2dGeom {
            batch,
            channels,
            in_h: in_hw.0,
            in_w: in_hw.1,
            kernel_h: in_hw.0,
            kernel_w: in_hw.1,
            stride_h: 1,
            stride_w: 1,
            pad_h: 0,
            pad_w: 0,
            ceil_mode: false,
        }
    }

    /// Checks sizes: non-zero, padding smaller than the kernel (so no window is all padding),
    /// a kernel that fits the padded input.
    pub fn validate(&self) -> Result<()> {
        let op = "pool2d";
        if [self.batch, self.channels, self.in_h, self.in_w, self.kernel_h, self.kernel_w, self.stride_h, self.stride_w]
            .contains(&0)
        {
            return Err(KernelError::invalid(op, format!("zero-sized dimension or stride in {self:?}")));
        }
        if self.pad_h >= self.kernel_h || self.pad_w >= self.kernel_w {
            return Err(KernelError::invalid(op, format!("padding must be smaller than the kernel in {self:?}")));
        }
        if self.kernel_h > self.in_h + 2 * self.pad_h || self.kernel_w > self.in_w + 2 * self.pad_w {
            return Err(KernelError::invalid(op, format!("kernel larger than the padded input in {self:?}")));
        }
        if self.batch.checked_mul(self.channels).and_then(|v| v.checked_mul(self.in_h * self.in_w)).is_none() {
            return Err(KernelError::invalid(op, format!("element count overflows in {self:?}")));
        }
        Ok(())
    }

    fn out_dim(input: usize, k: usize, s: usize, p: usize, ceil: bool) -> usize {
        let span = (input + 2 * p).saturating_sub(k);
        let mut o = if ceil { span.div_ceil(s.max(1)) + 1 } else { span / s.max(1) + 1 };
        // As in PyTorch/Caffe: the last window must start inside the input or left padding.
        if ceil && (o - 1) * s >= input + p {
            o -= 1;
        }
        o
    }

    /// Output height.
    pub fn out_h(&self) -> usize {
        Self::out_dim(self.in_h, self.kernel_h, self.stride_h, self.pad_h, self.ceil_mode)
    }

    /// Output width.
    pub fn out_w(&self) -> usize {
        Self::out_dim(self.in_w, self.kernel_w, self.stride_w, self.pad_w, self.ceil_mode)
    }

    /// Elements of the input.
    pub fn input_len(&self) -> usize {
        self.batch * self.channels * self.in_h * self.in_w
    }

    /// Elements of the output.
    pub fn output_len(&self) -> usize {
        self.batch * self.channels * self.out_h() * self.out_w()
    }

    /// The input rows (or columns) window `o` covers, clipped to the input.
    pub(crate) fn window(o: usize, k: usize, s: usize, p: usize, input: usize) -> (usize, usize) {
        let start = (o * s) as isize - p as isize;
        let end = (start + k as isize).min(input as isize);
        (start.max(0) as usize, end.max(0) as usize)
    }

    pub(crate) fn check(&self, op: &'static str, x: usize, y: usize) -> Result<()> {
        self.validate()?;
        check_len(op, "input", self.input_len(), x)?;
        check_len(op, "output", self.output_len(), y)
    }
}
