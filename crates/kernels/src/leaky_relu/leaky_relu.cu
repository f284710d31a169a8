// Leaky ReLU forward and backward (leaky_relu/cpu.rs is the reference; the same expressions,
// so results are bit-identical).

extern "C" __global__ void cb_leaky_relu_fwd(const float* x, float* y, float slope, i64 n) {
    CB_FOR(i, n) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}

// dx = y > 0 ? dy : slope * dy, from the forward output (slope >= 0: y > 0 exactly when x > 0)
extern "C" __global__ void cb_leaky_relu_bwd(const float* y, const float* dy, float* dx, float slope, i64 n) {
    CB_FOR(i, n) dx[i] = y[i] > 0.0f ? dy[i] : slope * dy[i];
}
