pub(crate) fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
        *o = x + z;
    }
}

pub(crate) fn sub(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
        *o = x - z;
    }
}

pub(crate) fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((o, &x), &z) in y.iter_mut().zip(a).zip(b) {
        *o = x * z;
    }
}

pub(crate) fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o += alpha * v;
    }
}

pub(crate) fn axpby(alpha: f32, x: &[f32], beta: f32, y: &mut [f32]) {
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

pub(crate) fn scale(alpha: f32, y: &mut [f32]) {
    for o in y.iter_mut() {
        *o *= alpha;
    }
}

pub(crate) fn sum_squares(x: &[f32]) -> f32 {
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
