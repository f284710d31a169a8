//! CPU SGD step.

use super::{Optim, SgdConfig};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut, split_mut_by};
use crate::error::Result;

impl Optim for CpuBackend {
    unsafe fn sgd_step_unchecked(
        &self,
        cfg: &SgdConfig,
        param: ViewMut<'_, Self>,
        grad: View<'_, Self>,
        velocity: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (p, g, v) = (host_slice_mut(param), host_slice(grad), host_slice_mut(velocity));
        // Split over the learner's threads as element-wise ops are (the same bits for any split).
        let ctx = self.ctx();
        let ranges = ctx.elementwise_ranges(p.len());
        let ps = split_mut_by(p, &ranges, 1);
        let vs = split_mut_by(v, &ranges, 1);
        let items: Vec<_> = ranges.into_iter().zip(ps).zip(vs).collect();
        ctx.for_each(items, |((r, p), v)| sgd_step(cfg, p, &g[r], v));
        Ok(())
    }
}

crate::cpu::simd::multiversion! {
    /// One SGD step with momentum (and Nesterov) and weight decay, element by element.
    fn sgd_step / sgd_step_portable(cfg: &SgdConfig, p: &mut [f32], grad: &[f32], v: &mut [f32]) {
        let (lr, mu, wd) = (cfg.lr, cfg.momentum, cfg.weight_decay);
        if cfg.nesterov {
            for ((pv, &gv), vv) in p.iter_mut().zip(grad).zip(v.iter_mut()) {
                let g = gv + wd * *pv;
                *vv = mu * *vv - lr * g;
                *pv += mu * *vv - lr * g;
            }
        } else {
            for ((pv, &gv), vv) in p.iter_mut().zip(grad).zip(v.iter_mut()) {
                let g = gv + wd * *pv;
                *vv = mu * *vv - lr * g;
                *pv += *vv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::test_vectors;

    /// The dispatching function (the AVX2 path on a CPU that has it) gives the same bits as
    /// the portable path, with and without Nesterov momentum.
    #[test]
    fn avx2_and_portable_paths_agree_bit_for_bit() {
        for g in test_vectors() {
            for nesterov in [false, true] {
                let cfg = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov };
                let p0: Vec<f32> = g.iter().map(|v| v * 0.1 - 0.2).collect();
                let v0: Vec<f32> = g.iter().map(|v| v * -0.01).collect();
                let (mut p1, mut v1, mut p2, mut v2) = (p0.clone(), v0.clone(), p0, v0);
                sgd_step(&cfg, &mut p1, &g, &mut v1);
                sgd_step_portable(&cfg, &mut p2, &g, &mut v2);
                assert_eq!((p1, v1), (p2, v2));
            }
        }
    }

    /// Split over a backend's threads, the step gives the bits of one whole call.
    #[test]
    fn split_over_threads_gives_the_whole_call_bits() {
        use crate::backend::{View, ViewMut};
        let n = 3 * crate::cpu::ELEMENTWISE_MIN_PER_THREAD + 7;
        let g: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let be = CpuBackend::with_threads(0, 3).unwrap();
        for nesterov in [false, true] {
            let cfg = SgdConfig { lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov };
            let p0: Vec<f32> = (0..n).map(|i| ((i * 104_729) % 997) as f32 / 300.0 - 1.5).collect();
            let v0: Vec<f32> = g.iter().map(|v| v * -0.01).collect();
            let (mut p1, mut v1, mut p2, mut v2) = (p0.clone(), v0.clone(), p0, v0);
            sgd_step(&cfg, &mut p1, &g, &mut v1);
            be.sgd_step(&cfg, ViewMut::whole(&mut p2), View::whole(&g), ViewMut::whole(&mut v2)).unwrap();
            assert_eq!((p1, v1), (p2, v2));
        }
    }
}
