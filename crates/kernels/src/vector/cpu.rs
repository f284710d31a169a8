//! CPU element-wise and vector ops.

use super::{BinaryOp, Vector};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;

impl Vector for CpuBackend {
    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()> {
        self.ctx().elementwise(host_slice_mut(y), |_, y| scale(alpha, y));
        Ok(())
    }

    unsafe fn binary_unchecked(
        &self,
        op: BinaryOp,
        a: View<'_, Self>,
        b: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (a, b) = (host_slice(a), host_slice(b));
        let f = match op {
            BinaryOp::Add => add,
            BinaryOp::Sub => sub,
            BinaryOp::Mul => mul,
        };
        self.ctx().elementwise(host_slice_mut(y), |r, y| f(&a[r.clone()], &b[r], y));
        Ok(())
    }

    unsafe fn axpy_unchecked(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let x = host_slice(x);
        self.ctx().elementwise(host_slice_mut(y), |r, y| axpy(alpha, &x[r], y));
        Ok(())
    }

    unsafe fn axpby_unchecked(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) -> Result<()> {
        let x = host_slice(x);
        self.ctx().elementwise(host_slice_mut(y), |r, y| axpby(alpha, &x[r], beta, y));
        Ok(())
    }

    unsafe fn sum_squares_unchecked(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) -> Result<()> {
        host_slice_mut(out)[0] = sum_squares(host_slice(x));
        Ok(())
    }
}

crate::cpu::simd::multiversion! {
    /// `y = a + b`.
    fn add / add_portable(a: &[f32], b: &[f32], y: &mut [f32]) {
        for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
            *o = x + z;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y = a - b`.
    fn sub / sub_portable(a: &[f32], b: &[f32], y: &mut [f32]) {
        for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
            *o = x - z;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y = a * b`.
    fn mul / mul_portable(a: &[f32], b: &[f32], y: &mut [f32]) {
        for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
            *o = x * z;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y += alpha x`.
    fn axpy / axpy_portable(alpha: f32, x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            *o += alpha * v;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y = alpha x + beta y` (`beta == 0` ignores `y`).
    fn axpby / axpby_portable(alpha: f32, x: &[f32], beta: f32, y: &mut [f32]) {
        if beta == 0.0 {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = alpha * v;
            }
        } else {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = alpha * v + beta * *o;
            }
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y *= alpha`.
    fn scale / scale_portable(alpha: f32, y: &mut [f32]) {
        for o in y.iter_mut() {
            *o *= alpha;
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `sum(x^2)`, accumulated in f64.
    fn sum_squares / sum_squares_portable(x: &[f32]) -> f32 {
        // Eight independent f64 partial sums: accurate and vectorisable.
        let mut acc = [0.0f64; 8];
        let chunks = x.chunks_exact(8);
        let rest = chunks.remainder();
        for c in chunks {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a += (v as f64) * (v as f64);
            }
        }
        let mut s: f64 = acc.iter().sum();
        for &v in rest {
            s += (v as f64) * (v as f64);
        }
        s as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::test_vectors;

    /// The dispatching functions (the AVX2 path on a CPU that has it) give the same bits as
    /// the portable path.
    #[test]
    fn avx2_and_portable_paths_agree_bit_for_bit() {
        for x in test_vectors() {
            let b: Vec<f32> = x.iter().map(|v| v * 0.37 - 1.0).collect();
            let n = x.len();
            type Bin = fn(&[f32], &[f32], &mut [f32]);
            let pairs: [(Bin, Bin); 3] = [(add, add_portable), (sub, sub_portable), (mul, mul_portable)];
            for (f, p) in pairs {
                let (mut y1, mut y2) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                f(&x, &b, &mut y1);
                p(&x, &b, &mut y2);
                assert_eq!(bits(&y1), bits(&y2));
            }
            let (mut y1, mut y2) = (b.clone(), b.clone());
            axpy(0.3, &x, &mut y1);
            axpy_portable(0.3, &x, &mut y2);
            assert_eq!(bits(&y1), bits(&y2));
            for beta in [0.0, 0.9] {
                let (mut y1, mut y2) = (b.clone(), b.clone());
                axpby(0.3, &x, beta, &mut y1);
                axpby_portable(0.3, &x, beta, &mut y2);
                assert_eq!(bits(&y1), bits(&y2));
            }
            let (mut y1, mut y2) = (x.clone(), x.clone());
            scale(-1.7, &mut y1);
            scale_portable(-1.7, &mut y2);
            assert_eq!(bits(&y1), bits(&y2));
            assert_eq!(sum_squares(&x).to_bits(), sum_squares_portable(&x).to_bits());
        }
    }

    /// Split over a backend's threads, each op gives the bits of one whole call (every
    /// thread reads its own range of the inputs).
    #[test]
    fn split_over_threads_gives_the_whole_call_bits() {
        use crate::backend::{View, ViewMut};
        let n = 3 * crate::cpu::ELEMENTWISE_MIN_PER_THREAD + 7;
        let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 104_729) % 997) as f32 / 300.0 - 1.5).collect();
        let be = CpuBackend::with_threads(0, 3).unwrap();
        assert_eq!(be.ctx().elementwise_ranges(n).len(), 3);
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul] {
            let mut want = vec![f32::NAN; n];
            match op {
                BinaryOp::Add => add(&x, &b, &mut want),
                BinaryOp::Sub => sub(&x, &b, &mut want),
                BinaryOp::Mul => mul(&x, &b, &mut want),
            }
            let mut got = vec![f32::NAN; n];
            let (xv, bv, gv) = (View::whole(&x), View::whole(&b), ViewMut::whole(&mut got));
            match op {
                BinaryOp::Add => be.add(xv, bv, gv),
                BinaryOp::Sub => be.sub(xv, bv, gv),
                BinaryOp::Mul => be.mul(xv, bv, gv),
            }
            .unwrap();
            assert_eq!(bits(&got), bits(&want), "{op:?}");
        }
        let (mut want, mut got) = (b.clone(), b.clone());
        axpy(0.3, &x, &mut want);
        be.axpy(0.3, View::whole(&x), ViewMut::whole(&mut got)).unwrap();
        assert_eq!(bits(&got), bits(&want));
        for beta in [0.0, 0.9] {
            let (mut want, mut got) = (b.clone(), b.clone());
            axpby(0.3, &x, beta, &mut want);
            be.axpby(0.3, View::whole(&x), beta, ViewMut::whole(&mut got)).unwrap();
            assert_eq!(bits(&got), bits(&want));
        }
        let (mut want, mut got) = (x.clone(), x.clone());
        scale(-1.7, &mut want);
        be.scale(-1.7, ViewMut::whole(&mut got)).unwrap();
        assert_eq!(bits(&got), bits(&want));
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }
}
