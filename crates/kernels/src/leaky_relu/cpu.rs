//! CPU leaky ReLU.

use super::LeakyRelu;
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;

impl LeakyRelu for CpuBackend {
    unsafe fn leaky_relu_forward_unchecked(&self, slope: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        for (o, &v) in host_slice_mut(y).iter_mut().zip(host_slice(x)) {
            *o = if v > 0.0 { v } else { slope * v };
        }
        Ok(())
    }

    unsafe fn leaky_relu_backward_unchecked(
        &self,
        slope: f32,
        y: View<'_, Self>,
        dy: View<'_, Self>,
        dx: ViewMut<'_, Self>,
    ) -> Result<()> {
        for ((o, &d), &v) in host_slice_mut(dx).iter_mut().zip(host_slice(dy)).zip(host_slice(y)) {
            *o = if v > 0.0 { d } else { slope * d };
        }
        Ok(())
    }
}
