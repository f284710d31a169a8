// Element-wise and vector ops (see vector/mod.rs and vector/cpu.rs for the reference),
// plus the per-channel bias add / bias sum used by conv2d and linear.

extern "C" __global__ void cb_add(const float* a, const float* b, float* y, i64 n) {
    CB_FOR(i, n) y[i] = a[i] + b[i];
}

extern "C" __global__ void cb_sub(const float* a, const float* b, float* y, i64 n) {
    CB_FOR(i, n) y[i] = a[i] - b[i];
}

extern "C" __global__ void cb_mul(const float* a, const float* b, float* y, i64 n) {
    CB_FOR(i, n) y[i] = a[i] * b[i];
}

// y += alpha * x
extern "C" __global__ void cb_axpy(float alpha, const float* x, float* y, i64 n) {
    CB_FOR(i, n) y[i] = y[i] + alpha * x[i];
}

// y = alpha * x + beta * y; beta == 0 never reads y (NaNs included)
extern "C" __global__ void cb_axpby(float alpha, const float* x, float beta, float* y, i64 n) {
    if (beta == 0.0f) {
        CB_FOR(i, n) y[i] = alpha * x[i];
    } else {
        CB_FOR(i, n) y[i] = alpha * x[i] + beta * y[i];
    }
}

extern "C" __global__ void cb_scale(float alpha, float* y, i64 n) {
    CB_FOR(i, n) y[i] = y[i] * alpha;
}

extern "C" __global__ void cb_fill(float value, float* y, i64 n) {
    CB_FOR(i, n) y[i] = value;
}

// out[0] = sum(x^2), accumulated in double. One block of CB_BLOCK threads (cooperative).
extern "C" __global__ void cb_sum_squares(const float* x, float* out, i64 n) {
    __shared__ double sh[CB_BLOCK];
    double acc = 0.0;
    for (i64 i = threadIdx.x; i < n; i += CB_BLOCK) {
        double v = (double)x[i];
        acc += v * v;
    }
    double s = cb_block_sum(acc, sh);
    if (threadIdx.x == 0) out[0] = (float)s;
}

// y[(n*C + c)*P + p] += b[c]  (bias of conv2d with P = oh*ow, of linear with P = 1)
extern "C" __global__ void cb_channel_add(float* y, const float* b, i64 N, i64 C, i64 P) {
    CB_FOR(i, N * C * P) y[i] = y[i] + b[(i / P) % C];
}

// out[c] = sum over n, p of x[(n*C + c)*P + p], in double. Grid = C blocks of CB_BLOCK
// threads (cooperative).
extern "C" __global__ void cb_channel_sum(const float* x, float* out, i64 N, i64 C, i64 P) {
    __shared__ double sh[CB_BLOCK];
    i64 c = blockIdx.x;
    if (c >= C) return;
    double acc = 0.0;
    for (i64 j = threadIdx.x; j < N * P; j += CB_BLOCK) {
        i64 n = j / P;
        i64 p = j - n * P;
        acc += (double)x[(n * C + c) * P + p];
    }
    double s = cb_block_sum(acc, sh);
    if (threadIdx.x == 0) out[c] = (float)s;
}
