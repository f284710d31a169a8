//! CPU crop-and-flip.

use super::{Augment, CropFlipGeom};
use crate::backend::{View, ViewMut};
use crate::cpu::{CpuBackend, host_slice, host_slice_mut};
use crate::error::{KernelError, Result};

impl Augment for CpuBackend {
    unsafe fn crop_flip_unchecked(
        &self,
        g: &CropFlipGeom,
        x: View<'_, Self>,
        params: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        crop_flip(g, host_slice(x), host_slice(params), host_slice_mut(y))
    }
}

/// Decodes and checks the parameters of image `n`: `(dy, dx, flip)`.
fn image_params(g: &CropFlipGeom, params: &[f32], n: usize) -> Result<(usize, usize, bool)> {
    let lim = (2 * g.pad) as f32;
    let offset = |v: f32, what: &str| -> Result<usize> {
        if v >= 0.0 && v <= lim && v.fract() == 0.0 {
            Ok(v as usize)
        } else {
            Err(KernelError::invalid(
                "crop_flip",
                format!("{what} {v} of image {n} is not an integer in 0..={}", 2 * g.pad),
            ))
        }
    };
    let dy = offset(params[3 * n], "dy")?;
    let dx = offset(params[3 * n + 1], "dx")?;
    let flip = match params[3 * n + 2] {
        0.0 => false,
        1.0 => true,
        v => return Err(KernelError::invalid("crop_flip", format!("flip {v} of image {n} is not 0 or 1"))),
    };
    Ok((dy, dx, flip))
}

/// Crop with zero padding and optional horizontal flip (see the module docs). Every
/// parameter is checked before anything is written.
pub(crate) fn crop_flip(g: &CropFlipGeom, x: &[f32], params: &[f32], y: &mut [f32]) -> Result<()> {
    let per_image = (0..g.batch).map(|n| image_params(g, params, n)).collect::<Result<Vec<_>>>()?;
    let (h, w, pad) = (g.height as isize, g.width as isize, g.pad as isize);
    let plane = g.height * g.width;
    for (n, &(dy, dx, flip)) in per_image.iter().enumerate() {
        for c in 0..g.channels {
            let base = (n * g.channels + c) * plane;
            let src = &x[base..base + plane];
            let dst = &mut y[base..base + plane];
            for i in 0..h {
                let iy = i + dy as isize - pad;
                let row = &mut dst[(i * w) as usize..((i + 1) * w) as usize];
                if iy < 0 || iy >= h {
                    row.fill(0.0);
                    continue;
                }
                let srow = &src[(iy * w) as usize..((iy + 1) * w) as usize];
                for (j, out) in row.iter_mut().enumerate() {
                    let j = j as isize;
                    let sj = if flip { w - 1 - j } else { j };
                    let ix = sj + dx as isize - pad;
                    *out = if ix >= 0 && ix < w { srow[ix as usize] } else { 0.0 };
                }
            }
        }
    }
    Ok(())
}
