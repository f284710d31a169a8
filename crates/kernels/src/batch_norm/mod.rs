//! Batch normalisation over the channel axis of `[n, c, spatial]` tensors (2-d BN with
//! `spatial = h*w`, 1-d BN after a linear layer with `spatial = 1`).
//!
//! Training mode normalises with the batch mean and biased variance, saves `mean` and
//! `inv_std = 1/sqrt(var + eps)` for the backward pass, and updates the running statistics
//! with the unbiased variance, `r = (1 - momentum) r + momentum * batch` (PyTorch). Inference
//! mode uses the running statistics. Reductions accumulate in f64 on the CPU.
//!
//! The fused calls (`*_fused`) also apply what follows batch norm in a residual network,
//! `y = relu?(bn(x) + residual?)` ([`Epilogue`]), and their backward pass masks the gradient
//! and hands it to the residual, so that the ReLU and the residual sum cost no passes of their
//! own. They give the same bits as the separate calls (`relu_forward`, `add`) would.

mod cpu;
pub(crate) mod cuda;
#[cfg(feature = "cuda")]
pub(crate) mod cudnn;
#[cfg(feature = "testing")]
pub mod tests;

use serde::{Deserialize, Serialize};

use crate::backend::{Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};

/// What a fused forward call does after batch norm's affine map:
/// `y = relu?(bn(x) + residual?)`. The end of a residual block is both; conv, batch norm,
/// ReLU is `relu` alone; [`Epilogue::none`] is plain batch norm.
pub struct Epilogue<'a, B: Storage + ?Sized> {
    /// A tensor of the output's shape added to the normalised values.
    pub residual: Option<View<'a, B>>,
    /// Whether the sum is rectified, `max(·, 0)`.
    pub relu: bool,
}

impl<B: Storage + ?Sized> Clone for Epilogue<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Storage + ?Sized> Copy for Epilogue<'_, B> {}

impl<B: Storage + ?Sized> std::fmt::Debug for Epilogue<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epilogue").field("residual", &self.residual).field("relu", &self.relu).finish()
    }
}

impl<'a, B: Storage + ?Sized> Epilogue<'a, B> {
    /// Plain batch norm: nothing after the affine map.
    pub fn none() -> Self {
        Epilogue { residual: None, relu: false }
    }

    /// `max(bn(x), 0)`.
    pub fn relu() -> Self {
        Epilogue { residual: None, relu: true }
    }

    /// `max(bn(x) + residual, 0)`: the end of a residual block.
    pub fn add_relu(residual: View<'a, B>) -> Self {
        Epilogue { residual: Some(residual), relu: true }
    }

    fn check(&self, op: &'static str, g: &BatchNormGeom) -> Result<()> {
        match self.residual {
            Some(r) => check_len(op, "residual", g.len(), r.len()),
            None => Ok(()),
        }
    }
}

/// Batch normalisation (per channel over N, H, W). The provided methods check the
/// arguments, then run the backend's `*_unchecked` kernels (what a backend implements).
pub trait BatchNorm: Storage {
    /// Training-mode batch norm with batch statistics. `params` = `[gamma(C), beta(C)]`;
    /// writes `y`, `saved = [mean(C), inv_std(C)]` for the backward pass, and updates
    /// `running = [mean(C), var(C)]` as `r = (1 - momentum) r + momentum * batch` with the
    /// unbiased batch variance (PyTorch's convention).
    fn batch_norm_forward_train(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()> {
        let lens = [x.len(), params.len(), y.len(), saved.len(), running.len()];
        g.check_train("batch_norm_forward_train", lens, &Epilogue::<Self>::none())?;
        // SAFETY: the geometry and the lengths were checked.
        unsafe { self.batch_norm_forward_train_unchecked(g, x, Epilogue::none(), params, y, saved, running) }
    }

    /// [`BatchNorm::batch_norm_forward_train`] followed by `ep`:
    /// `y = relu?(bn(x) + residual?)`, with `saved` and `running` as there.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_forward_train_fused(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()> {
        let lens = [x.len(), params.len(), y.len(), saved.len(), running.len()];
        g.check_train("batch_norm_forward_train_fused", lens, &ep)?;
        // SAFETY: the geometry and the lengths were checked.
        unsafe { self.batch_norm_forward_train_unchecked(g, x, ep, params, y, saved, running) }
    }

    /// Inference-mode batch norm with the running statistics `[mean(C), var(C)]`.
    fn batch_norm_forward_infer(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let lens = [x.len(), params.len(), y.len(), running.len()];
        g.check_infer("batch_norm_forward_infer", lens, &Epilogue::<Self>::none())?;
        // SAFETY: the geometry and the lengths were checked.
        unsafe { self.batch_norm_forward_infer_unchecked(g, x, Epilogue::none(), params, running, y) }
    }

    /// [`BatchNorm::batch_norm_forward_infer`] followed by `ep`: `y = relu?(bn(x) + residual?)`.
    fn batch_norm_forward_infer_fused(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let lens = [x.len(), params.len(), y.len(), running.len()];
        g.check_infer("batch_norm_forward_infer_fused", lens, &ep)?;
        // SAFETY: the geometry and the lengths were checked.
        unsafe { self.batch_norm_forward_infer_unchecked(g, x, ep, params, running, y) }
    }

    checked_op! {
        /// Gradients of training-mode batch norm: `dx`, and `dparams = [dgamma, dbeta]`.
        #[allow(clippy::too_many_arguments)]
        fn batch_norm_backward(&self, g: &BatchNormGeom, x: View<'_, Self>, dy: View<'_, Self>, params: View<'_, Self>, saved: View<'_, Self>, dx: ViewMut<'_, Self>, dparams: ViewMut<'_, Self>) {
            let op = "batch_norm_backward";
            g.check(op, x.len(), params.len(), dy.len())?;
            check_len(op, "saved", g.stats_len(), saved.len())?;
            check_len(op, "dx", g.len(), dx.len())?;
            check_len(op, "dparams", g.stats_len(), dparams.len())?;
        }

        /// The kernel of [`BatchNorm::batch_norm_backward`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn batch_norm_backward_unchecked;
    }

    checked_op! {
        /// Gradients of a fused forward call ([`BatchNorm::batch_norm_forward_train_fused`]).
        /// `y` is that call's output when it rectified (`None` when it did not): the ReLU's mask.
        /// `dy` is the gradient of `y`; some backends overwrite it with the gradient of the sum
        /// (`dy` where `y > 0`, else 0), so its contents afterwards are unspecified. Writes `dx`,
        /// `dparams = [dgamma, dbeta]` and, when given, `dres`: the gradient of the residual
        /// (the masked `dy`).
        #[allow(clippy::too_many_arguments)]
        fn batch_norm_backward_fused(&self, g: &BatchNormGeom, x: View<'_, Self>, y: Option<View<'_, Self>>, dy: ViewMut<'_, Self>, params: View<'_, Self>, saved: View<'_, Self>, dx: ViewMut<'_, Self>, dres: Option<ViewMut<'_, Self>>, dparams: ViewMut<'_, Self>) {
            let op = "batch_norm_backward_fused";
            g.check(op, x.len(), params.len(), dy.len())?;
            if let Some(y) = &y {
                check_len(op, "y", g.len(), y.len())?;
            }
            if let Some(d) = &dres {
                check_len(op, "dres", g.len(), d.len())?;
            }
            check_len(op, "saved", g.stats_len(), saved.len())?;
            check_len(op, "dx", g.len(), dx.len())?;
            check_len(op, "dparams", g.stats_len(), dparams.len())?;
        }

        /// The kernel of [`BatchNorm::batch_norm_backward_fused`].
        ///
        /// # Safety
        /// `g` is valid and every view has the length it implies.
        unsafe fn batch_norm_backward_fused_unchecked;
    }

    /// The kernel of [`BatchNorm::batch_norm_forward_train`].
    ///
    /// # Safety
    /// `g` is valid and every view has the length it implies.
    #[allow(clippy::too_many_arguments)]
    unsafe fn batch_norm_forward_train_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()>;

    /// The kernel of [`BatchNorm::batch_norm_forward_infer`].
    ///
    /// # Safety
    /// `g` is valid and every view has the length it implies.
    unsafe fn batch_norm_forward_infer_unchecked(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        ep: Epilogue<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
}

/// The geometry and constants of a batch-norm call.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchNormGeom {
    /// Samples in the batch (`n`).
    pub batch: usize,
    /// Channels (`c`): one `gamma`, `beta`, mean and variance each.
    pub channels: usize,
    /// Elements per channel per sample (`h*w`; 1 after a linear layer).
    pub spatial: usize,
    /// Added to the variance before the square root.
    pub eps: f32,
    /// Weight of the new batch statistics in the running averages.
    pub momentum: f32,
}

impl BatchNormGeom {
    /// A 2-d batch norm with PyTorch's defaults (`eps = 1e-5`, `momentum = 0.1`).
    pub fn new(batch: usize, channels: usize, spatial: usize) -> Self {
        BatchNormGeom { batch, channels, spatial, eps: 1e-5, momentum: 0.1 }
    }

    /// Checks sizes and constants.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.channels == 0 || self.spatial == 0 {
            return Err(KernelError::invalid("batch_norm", format!("zero-sized dimension in {self:?}")));
        }
        if self.len_checked().is_none() {
            return Err(KernelError::invalid("batch_norm", format!("element count overflows in {self:?}")));
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return Err(KernelError::invalid("batch_norm", format!("eps must be positive, got {}", self.eps)));
        }
        if !(0.0..=1.0).contains(&self.momentum) {
            return Err(KernelError::invalid(
                "batch_norm",
                format!("momentum must be in [0, 1], got {}", self.momentum),
            ));
        }
        Ok(())
    }

    fn len_checked(&self) -> Option<usize> {
        self.batch.checked_mul(self.channels)?.checked_mul(self.spatial)
    }

    /// Elements of the input (and output).
    pub fn len(&self) -> usize {
        self.batch * self.channels * self.spatial
    }

    /// True when the tensor is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values averaged per channel: `batch * spatial`.
    pub fn count(&self) -> usize {
        self.batch * self.spatial
    }

    /// Elements of `params` (`gamma`, `beta`), `running` (`mean`, `var`) and `saved`
    /// (`mean`, `inv_std`): `2 * channels` each.
    pub fn stats_len(&self) -> usize {
        2 * self.channels
    }

    /// Checks a training forward call: `[x, params, y, saved, running]` lengths and `ep`.
    fn check_train<B: Storage + ?Sized>(&self, op: &'static str, lens: [usize; 5], ep: &Epilogue<'_, B>) -> Result<()> {
        let [x, params, y, saved, running] = lens;
        self.check(op, x, params, y)?;
        ep.check(op, self)?;
        check_len(op, "saved", self.stats_len(), saved)?;
        check_len(op, "running", self.stats_len(), running)
    }

    /// Checks an inference forward call: `[x, params, y, running]` lengths and `ep`.
    fn check_infer<B: Storage + ?Sized>(&self, op: &'static str, lens: [usize; 4], ep: &Epilogue<'_, B>) -> Result<()> {
        let [x, params, y, running] = lens;
        self.check(op, x, params, y)?;
        ep.check(op, self)?;
        check_len(op, "running", self.stats_len(), running)
    }

    /// Checks the geometry and the lengths of the input, parameter and output views.
    pub(crate) fn check(&self, op: &'static str, x: usize, params: usize, y: usize) -> Result<()> {
        self.validate()?;
        check_len(op, "input", self.len(), x)?;
        check_len(op, "params", self.stats_len(), params)?;
        check_len(op, "output", self.len(), y)
    }
}
