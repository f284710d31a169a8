//! CPU element-wise and vector ops.

use super::{BinaryOp, Vector};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::Result;

impl Vector for CpuBackend {
    fn scale(&self, alpha: f32, y: ViewMut<'_, Self>) -> Result<()> {
        scale(alpha, host_slice_mut(y));
        Ok(())
    }

    unsafe fn binary_unchecked(
        &self,
        op: BinaryOp,
        a: View<'_, Self>,
        b: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        match op {
            BinaryOp::Add => add(host_slice(a), host_slice(b), host_slice_mut(y)),
            BinaryOp::Sub => sub(host_slice(a), host_slice(b), host_slice_mut(y)),
            BinaryOp::Mul => mul(host_slice(a), host_slice(b), host_slice_mut(y)),
        }
        Ok(())
    }

    unsafe fn axpy_unchecked(&self, alpha: f32, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        axpy(alpha, host_slice(x), host_slice_mut(y));
        Ok(())
    }

    unsafe fn axpby_unchecked(&self, alpha: f32, x: View<'_, Self>, beta: f32, y: ViewMut<'_, Self>) -> Result<()> {
        axpby(alpha, host_slice(x), beta, host_slice_mut(y));
        Ok(())
    }

    unsafe fn sum_squares_unchecked(&self, x: View<'_, Self>, out: ViewMut<'_, Self>) -> Result<()> {
        host_slice_mut(out)[0] = sum_squares(host_slice(x));
        Ok(())
    }
}

fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
        *o = x + z;
    }
}

fn sub(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
        *o = x - z;
    }
}

fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
        *o = x * z;
    }
}

fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o += alpha * v;
    }
}

fn axpby(alpha: f32, x: &[f32], beta: f32, y: &mut [f32]) {
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

fn scale(alpha: f32, y: &mut [f32]) {
    for o in y.iter_mut() {
        *o *= alpha;
    }
}

fn sum_squares(x: &[f32]) -> f32 {
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
