//! The backend trait every device implements, and the buffer views ops take.

use std::ops::Range;

use crossbow_tensor::Device;

use crate::augment::CropFlipGeom;
use crate::batch_norm::BatchNormGeom;
use crate::conv2d::Conv2dGeom;
use crate::dropout::DropoutConfig;
use crate::error::{KernelError, Result};
use crate::gemm::GemmConfig;
use crate::linear::LinearGeom;
use crate::optim::SgdConfig;
use crate::pool::Pool2dGeom;
use crate::softmax_xent::SoftmaxXentGeom;

/// A compute device's implementation of every crossbow operator.
///
/// A backend owns device memory as [`Backend::Buffer`]s (a `Vec<f32>` on the CPU, a
/// `CudaSlice<f32>` on a GPU). Ops never allocate: they read [`View`]s and write
/// [`ViewMut`]s — `(buffer, offset, len)` — so a model can keep all its parameters in one flat
/// buffer and hand each layer its region, and activations in buffers a memory plan reuses.
///
/// Conventions for every op:
/// * Tensors are dense, row-major; images NCHW. Geometry comes in a small `*Geom` struct that
///   is validated (`validate()`) and checked against every view's length; a mismatch is a
///   [`KernelError::Length`] naming the op and the argument, never a panic.
/// * Outputs are overwritten, never accumulated into (except where a doc says otherwise).
///   Where an op has two outputs they live in different buffers (borrowing makes that a
///   compile-time rule). A layer's parameters are one contiguous region, weights first and
///   bias (or beta) after, so the backward pass writes all of a layer's gradients in one view.
/// * Labels are class indices stored as `f32` (exact up to 2^24 classes).
/// * Work is ordered: on a GPU ops are enqueued on the backend's stream and run in call
///   order; [`Backend::download`] and [`Backend::synchronize`] wait for it. On the CPU every op
///   has finished when it returns.
///
/// The CPU backend ([`crate::CpuBackend`]) is the reference every other backend is tested
/// against (see [`crate::testing`] with the `testing` feature).
pub trait Backend: Send + Sync + 'static {
    /// Device memory holding `f32`s.
    type Buffer: Send + Sync + 'static;

    /// Number of `f32`s in a buffer.
    fn buffer_len(buf: &Self::Buffer) -> usize;

    /// The device this backend runs on.
    fn device(&self) -> Device;

    /// A human-readable description (device, library versions, threads).
    fn describe(&self) -> String;

    /// A zero-filled buffer of `len` `f32`s.
    fn alloc(&self, len: usize) -> Result<Self::Buffer>;

    /// Copies host memory into a view (`src.len() == dst.len()`).
    fn upload(&self, src: &[f32], dst: ViewMut<'_, Self>) -> Result<()>;

    /// Copies a view to host memory, waiting for pending work (`src.len() == dst.len()`).
    fn download(&self, src: View<'_, Self>, dst: &mut [f32]) -> Result<()>;

    /// Copies between two views of this device (`src.len() == dst.len()`).
    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()>;

    /// Sets every element of a view to `value`.
    fn fill(&self, dst: ViewMut<'_, Self>, value: f32) -> Result<()>;

    /// Waits until all work issued on this backend has finished.
    fn synchronize(&self) -> Result<()>;

    /// A point in this backend's queue of work (a CUDA event; nothing on the CPU).
    type Event: Send + Sync;

    /// Marks the current end of this backend's queue: an event that completes when all work
    /// issued so far has finished.
    fn record(&self) -> Result<Self::Event>;

    /// Makes work issued on this backend from now on wait until `event` (recorded on any
    /// backend of this kind) has completed. This is how work on one learner's stream is
    /// ordered after work on another stream that touched the same buffers. CPU ops finish
    /// before they return, so there it does nothing.
    fn wait(&self, event: &Self::Event) -> Result<()>;

    // ---- dense linear algebra -------------------------------------------------------------

    /// Row-major `C = alpha * op(A) * op(B) + beta * C` (see [`GemmConfig`]).
    fn gemm(&self, cfg: &GemmConfig, a: View<'_, Self>, b: View<'_, Self>, c: ViewMut<'_, Self>) -> Result<()>;

    // ---- element-wise and vector ops (also what synchronisers are built from) ---------------

    /// `y = a + b`.
    fn add(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// `y = a - b`.
    fn sub(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// `y = a * b` (element-wise).
    fn mul(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// `y += alpha * x`.
    fn axpy(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// `y = alpha * x + beta * y` (a weighted sum; `beta = 0` ignores the old `y`, NaNs included).
    fn axpby(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) -> Result<()>;
    /// `y *= alpha`.
    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()>;
    /// `out[0] = sum(x^2)` (a norm, and a cheap NaN/Inf detector).
    fn sum_squares(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) -> Result<()>;

    /// One SGD step with weight decay and (optionally Nesterov) momentum, the learning rate
    /// folded into the velocity (see [`crate::optim`]):
    /// `g = grad + wd*p; v = mu*v - lr*g; p += nesterov ? mu*v - lr*g : v`.
    fn sgd_step(
        &self,
        cfg: &SgdConfig,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
    ) -> Result<()>;

    // ---- activations ----------------------------------------------------------------------

    /// `y = max(x, 0)`.
    fn relu_forward(&self, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// `y = max(y, 0)` in place.
    fn relu_forward_inplace(&self, y: ViewMut<'_, Self>) -> Result<()>;
    /// `dx = dy * (y > 0)`, from the forward output `y`.
    fn relu_backward(&self, y: View<'_, Self>, dy: View<'_, Self>, dx: ViewMut<'_, Self>) -> Result<()>;
    /// `d = d * (y > 0)` in place (the incoming gradient becomes the outgoing one).
    fn relu_backward_inplace(&self, y: View<'_, Self>, d: ViewMut<'_, Self>) -> Result<()>;

    // ---- convolution ----------------------------------------------------------------------

    /// Scratch `f32`s the conv2d calls need for this geometry (0 when none).
    fn conv2d_workspace_len(&self, g: &Conv2dGeom) -> usize;
    /// `y = conv(x, w) + b`; `params` = weights `[c_out, c_in, kh, kw]` then bias `[c_out]` if
    /// the geometry has one.
    fn conv2d_forward(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// `dx` from `dy` and the weights.
    fn conv2d_backward_data(
        &self,
        g: &Conv2dGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// Weight (and bias) gradients, laid out like `params`.
    fn conv2d_backward_params(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()>;

    // ---- fully connected ------------------------------------------------------------------

    /// `y = x W^T + b`; `params` = `W [out, in]` then `b [out]` if the geometry has one.
    fn linear_forward(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// `dx = dy W`.
    fn linear_backward_data(
        &self,
        g: &LinearGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// `dW = dy^T x`, `db = sum_n dy`, laid out like `params`.
    fn linear_backward_params(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()>;

    // ---- batch normalisation (per channel over N, H, W) -----------------------------------

    /// Training-mode batch norm with batch statistics. `params` = `[gamma(C), beta(C)]`;
    /// writes `y`, `saved = [mean(C), inv_std(C)]` for the backward pass, and updates
    /// `running = [mean(C), var(C)]` as `r = (1 - momentum) r + momentum * batch` with the
    /// unbiased batch variance (PyTorch's convention).
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_forward_train(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// Inference-mode batch norm with the running statistics `[mean(C), var(C)]`.
    fn batch_norm_forward_infer(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// Gradients of training-mode batch norm: `dx`, and `dparams = [dgamma, dbeta]`.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_backward(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        saved: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()>;

    // ---- pooling --------------------------------------------------------------------------

    /// Max pooling (padding never wins; ties go to the first element in row-major order).
    fn max_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// Routes `dy` to the arg-max of each window (recomputed from `x` and `y`).
    fn max_pool_backward(
        &self,
        g: &Pool2dGeom,
        x: View<'_, Self>,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// Average pooling; each window is divided by its number of in-bounds (non-padding)
    /// elements (PyTorch's `count_include_pad=False`).
    fn avg_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// Gradient of [`Backend::avg_pool_forward`].
    fn avg_pool_backward(&self, g: &Pool2dGeom, dy: View<'_, Self>, dx: ViewMut<'_, Self>) -> Result<()>;

    // ---- dropout --------------------------------------------------------------------------

    /// Inverted dropout: `mask[i] = keep(i) ? 1/(1-p) : 0`, `y = x * mask`, where `keep(i)`
    /// comes from a counter-based hash of `(seed, i)` ([`crate::dropout::keep`]), so every
    /// backend draws the same mask. The backward pass is `dx = dy * mask` ([`Backend::mul`]).
    fn dropout_forward(
        &self,
        cfg: &DropoutConfig,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
        mask: ViewMut<'_, Self>,
    ) -> Result<()>;

    // ---- loss -----------------------------------------------------------------------------

    /// Fused softmax + cross-entropy over `logits [batch, classes]` with class-index `labels`.
    /// Writes `stats = [sum of per-sample losses, number of correct arg-max predictions]` and,
    /// when `dlogits` is given, `dlogits = grad_scale * (softmax(logits) - onehot(labels))`
    /// (with `grad_scale = 1/batch` this is the gradient of the mean loss). A label outside
    /// `0..classes` is an error on the CPU; on a GPU it yields a NaN loss.
    fn softmax_xent(
        &self,
        g: &SoftmaxXentGeom,
        logits: View<'_, Self>,
        labels: View<'_, Self>,
        dlogits: Option<ViewMut<'_, Self>>,
        stats: ViewMut<'_, Self>,
    ) -> Result<()>;

    // ---- augmentation ---------------------------------------------------------------------

    /// Random crop with zero padding and horizontal flip of a batch of images (see
    /// [`crate::augment`]): `params` holds 3 `f32`s per image (`dy`, `dx`, `flip`), drawn
    /// on the host. The default implementation downloads `x` and `params`, runs the CPU
    /// kernel and uploads `y`; backends override it with a device kernel.
    fn crop_flip(
        &self,
        g: &CropFlipGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        default_crop_flip(self, g, x, params, y)
    }
}

/// [`Backend::crop_flip`] through host memory, for any backend.
pub(crate) fn default_crop_flip<B: Backend + ?Sized>(
    be: &B,
    g: &CropFlipGeom,
    x: View<'_, B>,
    params: View<'_, B>,
    y: ViewMut<'_, B>,
) -> Result<()> {
    g.check("crop_flip", x.len(), params.len(), y.len())?;
    let mut hx = vec![0.0; x.len()];
    be.download(x, &mut hx)?;
    let mut hp = vec![0.0; params.len()];
    be.download(params, &mut hp)?;
    let mut hy = vec![0.0; hx.len()];
    crate::augment::cpu::crop_flip(g, &hx, &hp, &mut hy)?;
    be.upload(&hy, y)
}

/// A read-only region of a backend buffer: `(buffer, offset, len)`.
pub struct View<'a, B: Backend + ?Sized> {
    buf: &'a B::Buffer,
    offset: usize,
    len: usize,
}

impl<B: Backend + ?Sized> Clone for View<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend + ?Sized> Copy for View<'_, B> {}

impl<B: Backend + ?Sized> std::fmt::Debug for View<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "View({}..{})", self.offset, self.offset + self.len)
    }
}

fn check_range(range: &Range<usize>, len: usize) -> Result<()> {
    if range.start <= range.end && range.end <= len {
        Ok(())
    } else {
        Err(KernelError::Range { start: range.start, end: range.end, len })
    }
}

impl<'a, B: Backend + ?Sized> View<'a, B> {
    /// The whole buffer.
    pub fn whole(buf: &'a B::Buffer) -> Self {
        View { buf, offset: 0, len: B::buffer_len(buf) }
    }

    /// A region of a buffer; an error if it does not lie inside.
    pub fn new(buf: &'a B::Buffer, range: Range<usize>) -> Result<Self> {
        check_range(&range, B::buffer_len(buf))?;
        Ok(View { buf, offset: range.start, len: range.end - range.start })
    }

    /// A sub-region, relative to this view.
    pub fn slice(self, range: Range<usize>) -> Result<Self> {
        check_range(&range, self.len)?;
        Ok(View { buf: self.buf, offset: self.offset + range.start, len: range.end - range.start })
    }

    /// Splits into `[0, mid)` and `[mid, len)`.
    pub fn split_at(self, mid: usize) -> Result<(Self, Self)> {
        Ok((self.slice(0..mid)?, self.slice(mid..self.len)?))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the view in its buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The range of the view in its buffer.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }

    /// The underlying buffer (backends use this with [`View::range`]).
    pub fn buffer(&self) -> &'a B::Buffer {
        self.buf
    }
}

/// A writable region of a backend buffer: `(buffer, offset, len)`.
pub struct ViewMut<'a, B: Backend + ?Sized> {
    buf: &'a mut B::Buffer,
    offset: usize,
    len: usize,
}

impl<B: Backend + ?Sized> std::fmt::Debug for ViewMut<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ViewMut({}..{})", self.offset, self.offset + self.len)
    }
}

impl<'a, B: Backend + ?Sized> ViewMut<'a, B> {
    /// The whole buffer.
    pub fn whole(buf: &'a mut B::Buffer) -> Self {
        let len = B::buffer_len(buf);
        ViewMut { buf, offset: 0, len }
    }

    /// A region of a buffer; an error if it does not lie inside.
    pub fn new(buf: &'a mut B::Buffer, range: Range<usize>) -> Result<Self> {
        check_range(&range, B::buffer_len(buf))?;
        Ok(ViewMut { buf, offset: range.start, len: range.end - range.start })
    }

    /// A sub-region, relative to this view.
    pub fn slice(self, range: Range<usize>) -> Result<Self> {
        check_range(&range, self.len)?;
        Ok(ViewMut { buf: self.buf, offset: self.offset + range.start, len: range.end - range.start })
    }

    /// A shorter-lived copy of this view, so it can be passed to an op and used again after.
    pub fn reborrow(&mut self) -> ViewMut<'_, B> {
        ViewMut { buf: self.buf, offset: self.offset, len: self.len }
    }

    /// A read-only view of the same region.
    pub fn as_view(&self) -> View<'_, B> {
        View { buf: self.buf, offset: self.offset, len: self.len }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The range of the view in its buffer.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }

    /// The underlying buffer and the view's range in it (backends use this).
    pub fn into_parts(self) -> (&'a mut B::Buffer, Range<usize>) {
        let r = self.offset..self.offset + self.len;
        (self.buf, r)
    }
}
