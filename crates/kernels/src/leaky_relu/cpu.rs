//! CPU leaky ReLU.

use super::LeakyRelu;
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, sl, sm};
use crate::error::Result;

impl LeakyRelu for CpuBackend {
    unsafe fn leaky_relu_forward_unchecked(&self, slope: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        for (o, &v) in sm(y).iter_mut().zip(sl(x)) {
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
        for ((o, &d), &v) in sm(dx).iter_mut().zip(sl(dy)).zip(sl(y)) {
            *o = if v > 0.0 { d } else { slope * d };
        }
        Ok(())
    }
}
