//! CPU ReLU.

use super::Activation;
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;

/// Each op is split over the backend's threads where the tensor is large enough
/// ([`crate::cpu::CpuCtx::elementwise`]): LeNet-5's ReLU backward ran on one thread while the
/// other waited, 3.5% of its step.
impl Activation for CpuBackend {
    fn relu_forward_inplace(&self, y: ViewMut<'_, Self>) -> Result<()> {
        self.ctx().elementwise(host_slice_mut(y), |_, y| relu_inplace(y));
        Ok(())
    }

    unsafe fn relu_forward_unchecked(&self, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        let x = host_slice(x);
        self.ctx().elementwise(host_slice_mut(y), |r, y| relu(&x[r], y));
        Ok(())
    }

    unsafe fn relu_backward_unchecked(
        &self,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (y, dy) = (host_slice(y), host_slice(dy));
        self.ctx().elementwise(host_slice_mut(dx), |r, dx| relu_backward(&y[r.clone()], &dy[r], dx));
        Ok(())
    }

    unsafe fn relu_backward_inplace_unchecked(&self, y: View<'_, Self>, d: ViewMut<'_, Self>) -> Result<()> {
        let y = host_slice(y);
        self.ctx().elementwise(host_slice_mut(d), |r, d| relu_backward_inplace(&y[r], d));
        Ok(())
    }
}

crate::cpu::simd::multiversion! {
    /// `y = max(y, 0)`.
    fn relu_inplace / relu_inplace_portable(y: &mut [f32]) {
        for v in y.iter_mut() {
            *v = v.max(0.0);
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `y = max(x, 0)`.
    fn relu / relu_portable(x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = v.max(0.0);
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `dx = dy` where `y > 0`, else 0.
    fn relu_backward / relu_backward_portable(y: &[f32], dy: &[f32], dx: &mut [f32]) {
        for ((o, &d), &v) in dx.iter_mut().zip(dy).zip(y) {
            *o = if v > 0.0 { d } else { 0.0 };
        }
    }
}

crate::cpu::simd::multiversion! {
    /// `d = 0` where `y <= 0`. A select, not a conditional store: this vectorises (a branchy
    /// loop was 10% of a ResNet-20 training step).
    fn relu_backward_inplace / relu_backward_inplace_portable(y: &[f32], d: &mut [f32]) {
        for (o, &v) in d.iter_mut().zip(y) {
            *o = if v > 0.0 { *o } else { 0.0 };
        }
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
            let n = x.len();
            let d: Vec<f32> = x.iter().map(|v| v * 0.5 + 0.25).collect();
            let (mut a, mut b) = (x.clone(), x.clone());
            relu_inplace(&mut a);
            relu_inplace_portable(&mut b);
            assert_eq!(a, b);
            let (mut a, mut b) = (vec![f32::NAN; n], vec![f32::NAN; n]);
            relu(&x, &mut a);
            relu_portable(&x, &mut b);
            assert_eq!(a, b);
            relu_backward(&x, &d, &mut a);
            relu_backward_portable(&x, &d, &mut b);
            assert_eq!(a, b);
            let (mut a, mut b) = (d.clone(), d.clone());
            relu_backward_inplace(&x, &mut a);
            relu_backward_inplace_portable(&x, &mut b);
            assert_eq!(a, b);
        }
    }

    /// Split over 3 threads (a tensor long enough, not a multiple of 3), each op gives what
    /// one call on the whole tensor gives.
    #[test]
    fn split_over_threads_gives_the_whole_call_bits() {
        let n = 3 * crate::cpu::ELEMENTWISE_MIN_PER_THREAD + 7;
        let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let d: Vec<f32> = x.iter().map(|v| v * 0.5 + 0.25).collect();
        let be = CpuBackend::with_threads(0, 3).unwrap();
        let (mut want, mut got) = (x.clone(), x.clone());
        relu_inplace(&mut want);
        be.relu_forward_inplace(ViewMut::whole(&mut got)).unwrap();
        assert_eq!(got, want);
        let mut got = vec![f32::NAN; n];
        be.relu_forward(View::whole(&x), ViewMut::whole(&mut got)).unwrap();
        assert_eq!(got, want);
        relu_backward(&x, &d, &mut want);
        be.relu_backward(View::whole(&x), View::whole(&d), ViewMut::whole(&mut got)).unwrap();
        assert_eq!(got, want);
        let mut got = d.clone();
        be.relu_backward_inplace(View::whole(&x), ViewMut::whole(&mut got)).unwrap();
        assert_eq!(got, want);
        // Half the elements are rectified, so the checks above can fail.
        assert!(want.iter().filter(|&&v| v == 0.0).count() > n / 4);
    }
}
