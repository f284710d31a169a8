//! CPU fused softmax + cross-entropy + accuracy.

use super::{SoftmaxXent, SoftmaxXentGeom};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::{KernelError, Result};

impl SoftmaxXent for CpuBackend {
    unsafe fn softmax_xent_unchecked(
        &self,
        g: &SoftmaxXentGeom,
        logits: View<'_, Self>,
        labels: View<'_, Self>,
        dlogits: Option<ViewMut<'_, Self>>,
        stats: ViewMut<'_, Self>,
    ) -> Result<()> {
        forward(g, host_slice(logits), host_slice(labels), dlogits.map(host_slice_mut), host_slice_mut(stats))
    }
}

fn forward(
    g: &SoftmaxXentGeom,
    logits: &[f32],
    labels: &[f32],
    mut dlogits: Option<&mut [f32]>,
    stats: &mut [f32],
) -> Result<()> {
    let c = g.classes;
    // Validate every label first so nothing is written on error.
    for (n, &l) in labels.iter().enumerate() {
        if !(l >= 0.0 && l < c as f32 && l.fract() == 0.0) {
            return Err(KernelError::invalid(
                "softmax_xent",
                format!("label {l} of sample {n} is not a class index in 0..{c}"),
            ));
        }
    }
    let mut loss = 0.0f64;
    let mut correct = 0usize;
    for (n, row) in logits.chunks(c).enumerate() {
        let label = labels[n] as usize;
        let mut max = f32::NEG_INFINITY;
        let mut arg = 0;
        for (j, &v) in row.iter().enumerate() {
            if v > max {
                max = v;
                arg = j;
            }
        }
        if arg == label {
            correct += 1;
        }
        let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
        let lse = max + sum.ln();
        loss += (lse - row[label]) as f64;
        if let Some(d) = dlogits.as_deref_mut() {
            let inv = 1.0 / sum;
            for (j, (o, &v)) in d[n * c..(n + 1) * c].iter_mut().zip(row).enumerate() {
                let p = (v - max).exp() * inv;
                *o = g.grad_scale * (p - if j == label { 1.0 } else { 0.0 });
            }
        }
    }
    stats[0] = loss as f32;
    stats[1] = correct as f32;
    Ok(())
}
