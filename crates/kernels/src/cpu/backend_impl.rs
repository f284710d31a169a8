//! `impl Backend for CpuBackend`: argument checks, then the per-op CPU kernels.

use crossbow_tensor::Device;

use super::CpuBackend;
use crate::args;
use crate::augment::CropFlipGeom;
use crate::backend::{Backend, View, ViewMut};
use crate::batch_norm::BatchNormGeom;
use crate::conv2d::Conv2dGeom;
use crate::dropout::DropoutConfig;
use crate::error::{KernelError, Result, check_len};
use crate::gemm::GemmConfig;
use crate::linear::LinearGeom;
use crate::optim::SgdConfig;
use crate::pool::Pool2dGeom;
use crate::softmax_xent::SoftmaxXentGeom;
use crate::{activation, augment, batch_norm, conv2d, dropout, gemm, linear, optim, pool, softmax_xent, vector};

fn sl<'a>(v: View<'a, CpuBackend>) -> &'a [f32] {
    &v.buffer()[v.range()]
}

fn sm<'a>(v: ViewMut<'a, CpuBackend>) -> &'a mut [f32] {
    let (buf, r) = v.into_parts();
    &mut buf[r]
}

impl Backend for CpuBackend {
    type Buffer = Vec<f32>;

    fn buffer_len(buf: &Vec<f32>) -> usize {
        buf.len()
    }

    fn device(&self) -> Device {
        Device::Cpu(self.index)
    }

    fn describe(&self) -> String {
        format!(
            "cpu:{} ({} thread{}, {:?} GEMM)",
            self.index,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.gemm
        )
    }

    fn alloc(&self, len: usize) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        v.try_reserve_exact(len)
            .map_err(|_| KernelError::invalid("alloc", format!("cannot allocate {len} f32s on the CPU")))?;
        v.resize(len, 0.0);
        Ok(v)
    }

    fn upload(&self, src: &[f32], dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("upload", "dst", src.len(), dst.len())?;
        sm(dst).copy_from_slice(src);
        Ok(())
    }

    fn download(&self, src: View<'_, Self>, dst: &mut [f32]) -> Result<()> {
        check_len("download", "dst", src.len(), dst.len())?;
        dst.copy_from_slice(sl(src));
        Ok(())
    }

    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("copy", "dst", src.len(), dst.len())?;
        sm(dst).copy_from_slice(sl(src));
        Ok(())
    }

    fn fill(&self, dst: ViewMut<'_, Self>, value: f32) -> Result<()> {
        sm(dst).fill(value);
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    type Event = ();

    fn record(&self) -> Result<()> {
        Ok(())
    }

    fn wait(&self, _event: &()) -> Result<()> {
        Ok(())
    }

    fn gemm(&self, cfg: &GemmConfig, a: View<'_, Self>, b: View<'_, Self>, c: ViewMut<'_, Self>) -> Result<()> {
        args::gemm(cfg, a.len(), b.len(), c.len())?;
        gemm::cpu::gemm_config(self.gemm, cfg, sl(a), sl(b), sm(c));
        Ok(())
    }

    fn add(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("add", a.len(), &[("b", b.len()), ("y", y.len())])?;
        vector::cpu::add(sl(a), sl(b), sm(y));
        Ok(())
    }

    fn sub(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("sub", a.len(), &[("b", b.len()), ("y", y.len())])?;
        vector::cpu::sub(sl(a), sl(b), sm(y));
        Ok(())
    }

    fn mul(&self, a: View<'_, Self>, b: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("mul", a.len(), &[("b", b.len()), ("y", y.len())])?;
        vector::cpu::mul(sl(a), sl(b), sm(y));
        Ok(())
    }

    fn axpy(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("axpy", x.len(), &[("y", y.len())])?;
        vector::cpu::axpy(alpha, sl(x), sm(y));
        Ok(())
    }

    fn axpby(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("axpby", x.len(), &[("y", y.len())])?;
        vector::cpu::axpby(alpha, sl(x), beta, sm(y));
        Ok(())
    }

    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()> {
        vector::cpu::scale(alpha, sm(y));
        Ok(())
    }

    fn sum_squares(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) -> Result<()> {
        check_len("sum_squares", "out", 1, out.len())?;
        sm(out)[0] = vector::cpu::sum_squares(sl(x));
        Ok(())
    }

    fn sgd_step(
        &self,
        cfg: &SgdConfig,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::sgd(cfg, param.len(), grad.len(), velocity.len())?;
        optim::cpu::sgd_step(cfg, sm(param), sl(grad), sm(velocity));
        Ok(())
    }

    fn relu_forward(&self, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("relu_forward", x.len(), &[("y", y.len())])?;
        activation::cpu::relu_forward(sl(x), sm(y));
        Ok(())
    }

    fn relu_forward_inplace(&self, y: ViewMut<'_, Self>) -> Result<()> {
        activation::cpu::relu_forward_inplace(sm(y));
        Ok(())
    }

    fn relu_backward(&self, y: View<'_, Self>, dy: View<'_, Self>, dx: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("relu_backward", y.len(), &[("dy", dy.len()), ("dx", dx.len())])?;
        activation::cpu::relu_backward(sl(y), sl(dy), sm(dx));
        Ok(())
    }

    fn relu_backward_inplace(&self, y: View<'_, Self>, d: ViewMut<'_, Self>) -> Result<()> {
        args::same_len("relu_backward_inplace", y.len(), &[("d", d.len())])?;
        activation::cpu::relu_backward_inplace(sl(y), sm(d));
        Ok(())
    }

    fn conv2d_workspace_len(&self, g: &Conv2dGeom) -> usize {
        conv2d::cpu::workspace_len(g, self.threads)
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
        conv2d::cpu::forward(self.ctx(), g, sl(x), sl(params), sm(y), sm(workspace));
        Ok(())
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
        conv2d::cpu::backward_data(self.ctx(), g, sl(dy), sl(params), sm(dx), sm(workspace));
        Ok(())
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
        conv2d::cpu::backward_params(self.ctx(), g, sl(x), sl(dy), sm(dparams), sm(workspace));
        Ok(())
    }

    fn linear_forward(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check_lens("linear_forward", x.len(), params.len(), y.len())?;
        linear::cpu::forward(self.ctx(), g, sl(x), sl(params), sm(y));
        Ok(())
    }

    fn linear_backward_data(
        &self,
        g: &LinearGeom,
        dy: View<'_, Self>,
        params: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check_lens("linear_backward_data", dx.len(), params.len(), dy.len())?;
        linear::cpu::backward_data(self.ctx(), g, sl(dy), sl(params), sm(dx));
        Ok(())
    }

    fn linear_backward_params(
        &self,
        g: &LinearGeom,
        x: View<'_, Self>,
        dy: View<'_, Self>,
        dparams: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check_lens("linear_backward_params", x.len(), dparams.len(), dy.len())?;
        linear::cpu::backward_params(self.ctx(), g, sl(x), sl(dy), sm(dparams));
        Ok(())
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
        batch_norm::cpu::forward_train(self.ctx(), g, sl(x), sl(params), sm(y), sm(saved), sm(running));
        Ok(())
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
        batch_norm::cpu::forward_infer(self.ctx(), g, sl(x), sl(params), sl(running), sm(y));
        Ok(())
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
        batch_norm::cpu::backward(self.ctx(), g, sl(x), sl(dy), sl(params), sl(saved), sm(dx), sm(dparams));
        Ok(())
    }

    fn max_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        g.check("max_pool_forward", x.len(), y.len())?;
        pool::cpu::max_forward(self.ctx(), g, sl(x), sm(y));
        Ok(())
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
        pool::cpu::max_backward(self.ctx(), g, sl(x), sl(y), sl(dy), sm(dx));
        Ok(())
    }

    fn avg_pool_forward(&self, g: &Pool2dGeom, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        g.check("avg_pool_forward", x.len(), y.len())?;
        pool::cpu::avg_forward(self.ctx(), g, sl(x), sm(y));
        Ok(())
    }

    fn avg_pool_backward(&self, g: &Pool2dGeom, dy: View<'_, Self>, dx: ViewMut<'_, Self>) -> Result<()> {
        g.check("avg_pool_backward", dx.len(), dy.len())?;
        pool::cpu::avg_backward(self.ctx(), g, sl(dy), sm(dx));
        Ok(())
    }

    fn dropout_forward(
        &self,
        cfg: &DropoutConfig,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
        mask: ViewMut<'_, Self>,
    ) -> Result<()> {
        args::dropout(cfg, x.len(), y.len(), mask.len())?;
        dropout::cpu::forward(cfg, sl(x), sm(y), sm(mask));
        Ok(())
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
        softmax_xent::cpu::forward(g, sl(logits), sl(labels), dlogits.map(sm), sm(stats))
    }

    fn crop_flip(
        &self,
        g: &CropFlipGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        g.check("crop_flip", x.len(), params.len(), y.len())?;
        augment::cpu::crop_flip(g, sl(x), sl(params), sm(y))
    }
}
