use super::{DropoutConfig, keep};

pub(crate) fn forward(cfg: &DropoutConfig, x: &[f32], y: &mut [f32], mask: &mut [f32]) {
    let s = cfg.scale();
    for (i, ((yo, mo), &xv)) in y.iter_mut().zip(mask.iter_mut()).zip(x).enumerate() {
        let m = if keep(cfg.seed, i as u64, cfg.p) { s } else { 0.0 };
        *mo = m;
        *yo = xv * m;
    }
}
