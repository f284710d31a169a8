pub(crate) fn relu_forward(x: &[f32], y: &mut [f32]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v.max(0.0);
    }
}

pub(crate) fn relu_forward_inplace(y: &mut [f32]) {
    for v in y.iter_mut() {
        *v = v.max(0.0);
    }
}

pub(crate) fn relu_backward(y: &[f32], dy: &[f32], dx: &mut [f32]) {
    for ((o, &d), &v) in dx.iter_mut().zip(dy).zip(y) {
        *o = if v > 0.0 { d } else { 0.0 };
    }
}

pub(crate) fn relu_backward_inplace(y: &[f32], d: &mut [f32]) {
    // A select, not a conditional store: this vectorises (a branchy loop was 10% of a
    // ResNet-20 training step).
    for (o, &v) in d.iter_mut().zip(y) {
        *o = if v > 0.0 { *o } else { 0.0 };
    }
}
