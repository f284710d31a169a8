//! 2-d max and average pooling, NCHW, with stride, zero padding and Caffe-style ceil mode
//! (the original Crossbow's choice; PyTorch's default is floor). Global average pooling is
//! average pooling with the kernel equal to the input size.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};

/// Pooling. The provided methods check the arguments, then run the backend's `*_unchecked`
/// kernels (what a backend implements).
pub trait Pool2d: Storage {
    checked_op! {
        /// Max pooling (padding never wins; ties go to the first element in row-major order).
        fn max_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) {
            g.check("max_pool_forward", x.len(), y.len())?;
        }

        /// The kernel of [`Pool2d::max_pool_forward`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn max_pool_forward_unchecked;
    }

    checked_op! {
        /// Routes `dy` to the arg-max of each window (recomputed from `x` and `y`).
        fn max_pool_backward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: View<'_, Self>, dy: View<'_, Self>, dx: ViewMut<'_, Self>) {
            let op = "max_pool_backward";
            g.check(op, x.len(), y.len())?;
            check_len(op, "dy", g.output_len(), dy.len())?;
            check_len(op, "dx", g.input_len(), dx.len())?;
        }

        /// The kernel of [`Pool2d::max_pool_backward`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn max_pool_backward_unchecked;
    }

    checked_op! {
        /// Average pooling; each window is divided by its number of in-bounds (non-padding)
        /// elements (PyTorch's `count_include_pad=False`).
        fn avg_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) {
            g.check("avg_pool_forward", x.len(), y.len())?;
        }

        /// The kernel of [`Pool2d::avg_pool_forward`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn avg_pool_forward_unchecked;
    }

    checked_op! {
        /// Gradient of [`Pool2d::avg_pool_forward`].
        fn avg_pool_backward(&self, g: &Pool2dGeom, dy: View<'_, Self>, dx: ViewMut<'_, Self>) {
            g.check("avg_pool_backward", dx.len(), dy.len())?;
        }

        /// The kernel of [`Pool2d::avg_pool_backward`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn avg_pool_backward_unchecked;
    }
}

/// The geometry of a pooling call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pool2dGeom {
    /// Images in the batch (`n`).
    pub batch: usize,
    /// Channels per image, pooled independently (`c`, same in and out).
    pub channels: usize,
    /// Input height in pixels, before padding.
    pub in_h: usize,
    /// Input width in pixels, before padding.
    pub in_w: usize,
    /// Window height.
    pub kernel_h: usize,
    /// Window width.
    pub kernel_w: usize,
    /// Vertical step between windows, in input pixels (at least 1).
    pub stride_h: usize,
    /// Horizontal step between windows, in input pixels (at least 1).
    pub stride_w: usize,
    /// Padding rows above and below the input (never counted in a window's max or mean).
    pub pad_h: usize,
    /// Padding columns left and right of the input (never counted in a window's max or mean).
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

    /// Checks the geometry and the lengths of the input and output views.
    pub(crate) fn check(&self, op: &'static str, x: usize, y: usize) -> Result<()> {
        self.validate()?;
        check_len(op, "input", self.input_len(), x)?;
        check_len(op, "output", self.output_len(), y)
    }
}
