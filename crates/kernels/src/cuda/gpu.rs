//! `impl Backend for GpuBackend<E>`: the CPU backend's argument checks (same errors), then
//! each op's GPU code (`<op>/cuda.rs`) on the executor.

use crossbow_tensor::Device;

use super::exec::{Dv, Exec};
use crate::args;
use crate::augment::CropFlipGeom;
use crate::backend::{Backend, View, ViewMut};
use crate::batch_norm::BatchNormGeom;
use crate::conv2d::Conv2dGeom;
use crate::dropout::DropoutConfig;
use crate::error::{Result, check_len};
use crate::gemm::GemmConfig;
use crate::linear::LinearGeom;
use crate::optim::SgdConfig;
use crate::pool::Pool2dGeom;
use crate::softmax_xent::SoftmaxXentGeom;
use crate::{activation, augment, batch_norm, conv2d, dropout, gemm, linear, optim, pool, softmax_xent, vector};

/// A backend that runs this crate's GPU kernels (the `.cu` sources next to each op) and
/// GEMMs on an executor: [`super::CudaExec`] on a real GPU — [`super::CudaBackend`] is
/// `GpuBackend<CudaExec>` — or the host emulator the CPU-only tests use.
#[derive(Clone)]
pub struct GpuBackend<E> {
    pub(crate) exec: E,
}

impl<E: Exec> GpuBackend<E> {
    /// The executor.
    pub fn exec(&self) -> &E {
        &self.exec
    }

    fn v(&self, v: View<'_, Self>) -> Result<Dv> {
        Ok(Dv { addr: self.exec.addr(v.buffer())? + 4 * v.offset() as u64, len: v.len() })
    }

    fn m(&self, v: ViewMut<'_, Self>) -> Result<Dv> {
        let (buf, r) = v.into_parts();
        Ok(Dv { addr: self.exec.addr_mut(buf)? + 4 * r.start as u64, len: r.len() })
    }
}

impl<E> std::fmt::Debug for GpuBackend<E>
where
    E: Exec,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBackend({})", self.exec.describe())
    }
}

impl<E: Exec> Backend for GpuBackend<E> {
    type Buffer = E::Buffer;

    fn buffer_len(buf: &E::Buffer) -> usize {
        E::buffer_len(buf)
    }

    fn device(&self) -> Device {
        self.exec.device()
    }

    fn describe(&self) -> String {
        self.exec.describe()
    }

    fn alloc(&self, len: usize) -> Result<E::Buffer> {
        self.exec.alloc(len)
    }

    fn upload(&self, src: &[f32], dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("upload", "dst", src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let d = self.m(dst)?;
        self.exec.upload(src, d.addr)
    }

    fn download(&self, src: View<'_, Self>, dst: &mut [f32]) -> Result<()> {
        check_len("download", "dst", src.len(), dst.len())?;
        let s = self.v(src)?;
        self.exec.download(s.addr, dst)
    }

    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("copy", "dst", src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let s = self.v(src)?;
        let d = self.m(dst)?;
        self.exec.copy(s.addr, d.addr, s.len)
    }

    fn fill(&self, dst: ViewMut<'_, Self>, value: f32) -> Result<()> {
        let d = self.m(dst)?;
        vector::cuda::fill(&self.exec, d, value)
    }

    fn synchronize(&self) -> Result<()> {
        self.exec.synchronize()
    }

    type Event = E::Event;

    fn record(&self) -> Result<E::Event> {
        self.exec.record()
    }

    fn wait(&self, event: &E::Event) -> Result<()> {
        self.exec.wait(event)
    }

    fn gemm(&self, cfg: &GemmConfig, a: View<'_, Self>, b: View<'_, Self>, c: ViewMut<'_, Self>) -> Result<()> {
        args::gemm(cfg, a.len(), b.len(), c.len())?;
        gemm::cuda::gemm(&self.exec, cfg, self.v(a)?, self.v(b)?, self.m(c)?)
    }

    fn add(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("add", a.len(), &[("b", b.len()), ("y", y.len())])?;
        vector::cuda::binary(&self.exec, "cb_add", self.v(a)?, self.v(b)?, self.m(y)?)
    }

    fn sub(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("sub", a.len(), &[("b", b.len()), ("y", y.len())])?;
        vector::cuda::binary(&self.exec, "cb_sub", self.v(a)?, self.v(b)?, self.m(y)?)
    }

    fn mul(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("mul", a.len(), &[("b", b.len()), ("y", y.len())])?;
        vector::cuda::binary(&self.exec, "cb_mul", self.v(a)?, self.v(b)?, self.m(y)?)
    }

    fn axpy(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("axpy", x.len(), &[("y", y.len())])?;
        vector::cuda::axpy(&self.exec, alpha, self.v(x)?, self.m(y)?)
    }

    fn axpby(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("axpby", x.len(), &[("y", y.len())])?;
        vector::cuda::axpby(&self.exec, alpha, self.v(x)?, beta, self.m(y)?)
    }

    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()> {
        vector::cuda::scale(&self.exec, alpha, self.m(y)?)
    }

    fn sum_squares(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) -> Result<()> {
        check_len("sum_squares", "out", 1, out.len())?;
        vector::cuda::sum_squares(&self.exec, self.v(x)?, self.m(out)?)
    }

    fn sgd_step(
        &self,
        cfg: &SgdConfig,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::sgd(cfg, param.len(), grad.len(), velocity.len())?;
        optim::cuda::sgd_step(&self.exec, cfg, self.m(param)?, self.v(grad)?, self.m(velocity)?)
    }

    fn relu_forward(&self, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("relu_forward", x.len(), &[("y", y.len())])?;
        activation::cuda::relu_forward(&self.exec, self.v(x)?, self.m(y)?)
    }

    fn relu_forward_inplace(&self, y: ViewMut<'_, Self>) -> Result<()> {
        activation::cuda::relu_forward_inplace(&self.exec, self.m(y)?)
    }

    fn relu_backward(&self, y: View<'_, Self>, dy: View<'_, Self>, dx: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("relu_backward", y.len(), &[("dy", dy.len()), ("dx", dx.len())])?;
        activation::cuda::relu_backward(&self.exec, self.v(y)?, self.v(dy)?, self.m(dx)?)
    }

    fn relu_backward_inplace(&self, y: View<'_, Self>, d: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("relu_backward_inplace", y.len(), &[("d", d.len())])?;
        activation::cuda::relu_backward_inplace(&self.exec, self.v(y)?, self.m(d)?)
    }

    fn conv2d_workspace_len(&self, g: &Conv2dGeom) -> usize {
        conv2d::cuda::workspace_len(&self.exec, g)
    }

    fn conv2d_forward(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::conv2d(
            "conv2d_forward",
            g,
            x.len(),
            params.len(),
            y.len(),
            workspace.len(),
            self.conv2d_workspace_len(g),
        )?;
        conv2d::cuda::forward(&self.exec, g, self.v(x)?, self.v(params)?, self.m(y)?, self.m(workspace)?)
    }

    fn conv2d_backward_data(
        &self,
        g: &Conv2dGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::conv2d(
            "conv2d_backward_data",
            g,
            dx.len(),
            params.len(),
            dy.len(),
            workspace.len(),
            self.conv2d_workspace_len(g),
        )?;
        conv2d::cuda::backward_data(&self.exec, g, self.v(dy)?, self.v(params)?, self.m(dx)?, self.m(workspace)?)
    }

    fn conv2d_backward_params(
        &self,
        g: &Conv2dGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
        workspace: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::conv2d(
            "conv2d_backward_params",
            g,
            x.len(),
            dparams.len(),
            dy.len(),
            workspace.len(),
            self.conv2d_workspace_len(g),
        )?;
        conv2d::cuda::backward_params(&self.exec, g, self.v(x)?, self.v(dy)?, self.m(dparams)?, self.m(workspace)?)
    }

    fn linear_forward(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check_lens("linear_forward", x.len(), params.len(), y.len())?;
        linear::cuda::forward(&self.exec, g, self.v(x)?, self.v(params)?, self.m(y)?)
    }

    fn linear_backward_data(
        &self,
        g: &LinearGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check_lens("linear_backward_data", dx.len(), params.len(), dy.len())?;
        linear::cuda::backward_data(&self.exec, g, self.v(dy)?, self.v(params)?, self.m(dx)?)
    }

    fn linear_backward_params(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check_lens("linear_backward_params", x.len(), dparams.len(), dy.len())?;
        linear::cuda::backward_params(&self.exec, g, self.v(x)?, self.v(dy)?, self.m(dparams)?)
    }

    fn batch_norm_forward_train(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
        saved: ViewMut<'_, Self>,
        running: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::bn_train(g, x.len(), params.len(), y.len(), saved.len(), running.len())?;
        batch_norm::cuda::forward_train(
            &self.exec,
            g,
            self.v(x)?,
            self.v(params)?,
            self.m(y)?,
            self.m(saved)?,
            self.m(running)?,
        )
    }

    fn batch_norm_forward_infer(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        running: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::bn_infer(g, x.len(), params.len(), running.len(), y.len())?;
        batch_norm::cuda::forward_infer(&self.exec, g, self.v(x)?, self.v(params)?, self.v(running)?, self.m(y)?)
    }

    fn batch_norm_backward(
        &self,
        g: &BatchNormGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        saved: View<'_, Self>,
        dx: ViewMut<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::bn_backward(g, x.len(), dy.len(), params.len(), saved.len(), dx.len(), dparams.len())?;
        batch_norm::cuda::backward(
            &self.exec,
            g,
            self.v(x)?,
            self.v(dy)?,
            self.v(params)?,
            self.v(saved)?,
            self.m(dx)?,
            self.m(dparams)?,
        )
    }

    fn max_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        g.check("max_pool_forward", x.len(), y.len())?;
        pool::cuda::max_forward(&self.exec, g, self.v(x)?, self.m(y)?)
    }

    fn max_pool_backward(
        &self,
        g: &Pool2dGeom,
        x: View<'_, Self>,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::max_pool_backward(g, x.len(), y.len(), dy.len(), dx.len())?;
        pool::cuda::max_backward(&self.exec, g, self.v(x)?, self.v(y)?, self.v(dy)?, self.m(dx)?)
    }

    fn avg_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        g.check("avg_pool_forward", x.len(), y.len())?;
        pool::cuda::avg_forward(&self.exec, g, self.v(x)?, self.m(y)?)
    }

    fn avg_pool_backward(&self, g: &Pool2dGeom, dy: View<'_, Self>, dx: ViewMut<'_, Self>) -> Result<()> {
        g.check("avg_pool_backward", dx.len(), dy.len())?;
        pool::cuda::avg_backward(&self.exec, g, self.v(dy)?, self.m(dx)?)
    }

    fn dropout_forward(
        &self,
        cfg: &DropoutConfig,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
        mask: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::dropout(cfg, x.len(), y.len(), mask.len())?;
        dropout::cuda::forward(&self.exec, cfg, self.v(x)?, self.m(y)?, self.m(mask)?)
    }

    fn softmax_xent(
        &self,
        g: &SoftmaxXentGeom,
        logits: View<'_, Self>,
        labels: View<'_, Self>,
        dlogits: Option<ViewMut<'_, Self>>,
        stats: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check(logits.len(), labels.len(), dlogits.as_ref().map(|d| d.len()), stats.len())?;
        let d = match dlogits {
            Some(d) => Some(self.m(d)?),
            None => None,
        };
        softmax_xent::cuda::forward(&self.exec, g, self.v(logits)?, self.v(labels)?, d, self.m(stats)?)
    }

    fn crop_flip(
        &self,
        g: &CropFlipGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check("crop_flip", x.len(), params.len(), y.len())?;
        augment::cuda::crop_flip(&self.exec, g, self.v(x)?, self.v(params)?, self.m(y)?)
    }
}
