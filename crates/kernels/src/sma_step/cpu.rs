//! CPU fused SMA updates.

use super::SmaStep;
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;
use crate::optim::SgdConfig;

impl SmaStep for CpuBackend {
    unsafe fn sma_learner_step_unchecked(
        &self,
        cfg: &SgdConfig,
        alpha: f32,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
        z: View<'_, Self>,
        correction: ViewMut<'_, Self>,
    ) -> Result<()> {
        learner_step(
            cfg,
            alpha,
            host_slice_mut(param),
            host_slice(grad),
            host_slice_mut(velocity),
            host_slice(z),
            host_slice_mut(correction),
        );
        Ok(())
    }

    unsafe fn sma_central_step_unchecked(
        &self,
        momentum: f32,
        decay: f32,
        total: ViewMut<'_, Self>,
        z: ViewMut<'_, Self>,
        z_prev: ViewMut<'_, Self>,
    ) -> Result<()> {
        central_step(momentum, decay, host_slice_mut(total), host_slice_mut(z), host_slice_mut(z_prev));
        Ok(())
    }
}

crate::cpu::simd::multiversion! {
    /// The learner step, element by element, in the unfused ops' order of operations.
    fn learner_step / learner_step_portable(cfg: &SgdConfig, alpha: f32, p: &mut [f32], grad: &[f32], v: &mut [f32], z: &[f32], c: &mut [f32]) {
        let (lr, mu, wd, nesterov) = (cfg.lr, cfg.momentum, cfg.weight_decay, cfg.nesterov);
        let n = p.len();
        let (grad, v, z, c) = (&grad[..n], &mut v[..n], &z[..n], &mut c[..n]);
        for i in 0..n {
            let ci = (p[i] - z[i]) * alpha;
            let g = grad[i] + wd * p[i];
            let vi = mu * v[i] - lr * g;
            v[i] = vi;
            let stepped = if nesterov { p[i] + (mu * vi - lr * g) } else { p[i] + vi };
            p[i] = stepped - ci;
            c[i] = ci;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// The central step, element by element, in the unfused ops' order of operations.
    fn central_step / central_step_portable(mu: f32, decay: f32, total: &mut [f32], z: &mut [f32], zp: &mut [f32]) {
        let n = total.len();
        let (z, zp) = (&mut z[..n], &mut zp[..n]);
        for i in 0..n {
            let mut t = total[i];
            if decay != 0.0 {
                t += -decay * z[i];
            }
            if mu != 0.0 {
                t += mu * z[i];
                t += -mu * zp[i];
            }
            zp[i] = z[i];
            z[i] += t;
            total[i] = t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::test_vectors;

    /// The dispatching functions (AVX2 where the CPU has it) give the portable paths' bits.
    #[test]
    fn avx2_and_portable_paths_agree_bit_for_bit() {
        for g in test_vectors() {
            let n = g.len();
            let cfg = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov: false };
            let p0: Vec<f32> = g.iter().map(|v| v * 0.1 - 0.2).collect();
            let z: Vec<f32> = g.iter().map(|v| v * 0.09).collect();
            let (mut p1, mut v1, mut c1) = (p0.clone(), vec![0.01; n], vec![0.0; n]);
            let (mut p2, mut v2, mut c2) = (p0, vec![0.01; n], vec![0.0; n]);
            learner_step(&cfg, 0.25, &mut p1, &g, &mut v1, &z, &mut c1);
            learner_step_portable(&cfg, 0.25, &mut p2, &g, &mut v2, &z, &mut c2);
            assert_eq!((p1, v1, c1), (p2, v2, c2));
            let (mut t1, mut z1, mut q1) = (g.clone(), z.clone(), vec![0.5; n]);
            let (mut t2, mut z2, mut q2) = (g.clone(), z.clone(), vec![0.5; n]);
            central_step(0.9, 1e-4, &mut t1, &mut z1, &mut q1);
            central_step_portable(0.9, 1e-4, &mut t2, &mut z2, &mut q2);
            assert_eq!((t1, z1, q1), (t2, z2, q2));
        }
    }
}
