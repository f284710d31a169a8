// ReLU forward and backward (activation/cpu.rs is the reference).

extern "C" __global__ void cb_relu_fwd(const float* x, float* y, i64 n) {
    CB_FOR(i, n) y[i] = fmaxf(x[i], 0.0f);
}

extern "C" __global__ void cb_relu_fwd_inplace(float* y, i64 n) {
    CB_FOR(i, n) y[i] = fmaxf(y[i], 0.0f);
}

// dx = y > 0 ? dy : 0 (a NaN y gives 0, as on the CPU)
extern "C" __global__ void cb_relu_bwd(const float* y, const float* dy, float* dx, i64 n) {
    CB_FOR(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// d = 0 where y <= 0 (a NaN y keeps d, as on the CPU)
extern "C" __global__ void cb_relu_bwd_inplace(const float* y, float* d, i64 n) {
    CB_FOR(i, n) {
        if (y[i] <= 0.0f) d[i] = 0.0f;
    }
}
