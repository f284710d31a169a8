// Batch normalisation over the channel axis of [N, C, S] tensors: the fallback kernels used
// when cuDNN is absent or disabled (batch_norm/cpu.rs is the reference, whose formulas these
// mirror term by term). Statistics are two-pass (mean, then centred squares) accumulated in
// double. The training kernels run one block of CB_BLOCK threads per channel (cooperative).

// element j of channel c, j in [0, N*S)
__device__ i64 cb_bn_index(i64 j, i64 c, i64 C, i64 S) {
    i64 n = j / S;
    i64 s = j - n * S;
    return (n * C + c) * S + s;
}

// The fused epilogue of a forward pass: v + res[k] when res is not null, then max(v, 0) when
// relu != 0 (batch_norm/cpu.rs's scale_shift_* functions, in the same order).
__device__ float cb_bn_epi(float v, const float* res, i64 k, i64 relu) {
    if (res) v = v + res[k];
    if (relu) v = fmaxf(v, 0.0f);
    return v;
}

// dy where the fused forward output y is positive, else 0; dy alone when mask is null.
__device__ float cb_bn_masked(const float* dy, const float* mask, i64 k) {
    if (mask) return mask[k] > 0.0f ? dy[k] : 0.0f;
    return dy[k];
}

// y = (x - mean) * inv_std * gamma + beta with batch statistics, then the epilogue (res may be
// null); saved = [mean, inv_std]; running = (1 - momentum) * running + momentum * [mean,
// unbiased var].
extern "C" __global__ void cb_bn_fwd_train(const float* x, const float* res, const float* params,
                                           float* y, float* saved, float* running, i64 N, i64 C,
                                           i64 S, float eps, float momentum, i64 relu) {
    __shared__ double sh[CB_BLOCK];
    i64 c = blockIdx.x;
    if (c >= C) return;
    i64 m = N * S;
    double acc = 0.0;
    for (i64 j = threadIdx.x; j < m; j += CB_BLOCK) acc += (double)x[cb_bn_index(j, c, C, S)];
    double mean = cb_block_sum(acc, sh) / (double)m;
    acc = 0.0;
    for (i64 j = threadIdx.x; j < m; j += CB_BLOCK) {
        double d = (double)x[cb_bn_index(j, c, C, S)] - mean;
        acc += d * d;
    }
    double var = cb_block_sum(acc, sh) / (double)m;
    double inv = 1.0 / sqrt(var + (double)eps);
    double gamma = (double)params[c];
    double beta = (double)params[C + c];
    float scale = (float)(gamma * inv);
    float shift = (float)(beta - mean * gamma * inv);
    if (threadIdx.x == 0) {
        double mom = (double)momentum;
        double unbias = m > 1 ? (double)m / (double)(m - 1) : 1.0;
        saved[c] = (float)mean;
        saved[C + c] = (float)inv;
        running[c] = (float)((1.0 - mom) * (double)running[c] + mom * mean);
        running[C + c] = (float)((1.0 - mom) * (double)running[C + c] + mom * var * unbias);
    }
    for (i64 j = threadIdx.x; j < m; j += CB_BLOCK) {
        i64 k = cb_bn_index(j, c, C, S);
        y[k] = cb_bn_epi(x[k] * scale + shift, res, k, relu);
    }
}

// Inference with running = [mean, var], then the epilogue; element-wise (grid-stride).
extern "C" __global__ void cb_bn_fwd_infer(const float* x, const float* res, const float* params,
                                           const float* running, float* y, i64 N, i64 C, i64 S,
                                           float eps, i64 relu) {
    CB_FOR(i, N * C * S) {
        i64 c = (i / S) % C;
        double inv = 1.0 / sqrt((double)running[C + c] + (double)eps);
        double gamma = (double)params[c];
        float scale = (float)(gamma * inv);
        float shift = (float)((double)params[C + c] - (double)running[c] * gamma * inv);
        y[i] = cb_bn_epi(x[i] * scale + shift, res, i, relu);
    }
}

// The epilogue alone, after cuDNN's batch norm wrote y: y = relu?(y + res?).
extern "C" __global__ void cb_bn_epilogue(float* y, const float* res, i64 n, i64 relu) {
    CB_FOR(i, n) { y[i] = cb_bn_epi(y[i], res, i, relu); }
}

// The gradient of the sum before cuDNN's backward pass: out = dy masked by y > 0 (y may be
// null: a copy); out may be dy itself.
extern "C" __global__ void cb_bn_grad_mask(const float* y, const float* dy, float* out, i64 n) {
    CB_FOR(i, n) { out[i] = cb_bn_masked(dy, y, i); }
}

// dparams = [dgamma, dbeta]; dx = a*dy + b*x + k per channel (batch_norm/cpu.rs), with dy
// masked by mask > 0 when mask is not null (a fused ReLU) and the masked dy also written to
// dres when it is not null (a fused residual sum).
extern "C" __global__ void cb_bn_bwd(const float* x, const float* mask, const float* dy,
                                     const float* params, const float* saved, float* dx,
                                     float* dres, float* dparams, i64 N, i64 C, i64 S) {
    __shared__ double sh[CB_BLOCK];
    i64 c = blockIdx.x;
    if (c >= C) return;
    i64 m = N * S;
    double mean = (double)saved[c];
    double inv = (double)saved[C + c];
    double a1 = 0.0;
    double a2 = 0.0;
    for (i64 j = threadIdx.x; j < m; j += CB_BLOCK) {
        i64 k = cb_bn_index(j, c, C, S);
        double d = (double)cb_bn_masked(dy, mask, k);
        a1 += d;
        a2 += d * ((double)x[k] - mean) * inv;
    }
    double sdy = cb_block_sum(a1, sh);
    double sdyx = cb_block_sum(a2, sh);
    if (threadIdx.x == 0) {
        dparams[C + c] = (float)sdy;
        dparams[c] = (float)sdyx;
    }
    double gm = (double)params[c];
    double a = gm * inv;
    double b = -gm * inv * inv * sdyx / (double)m;
    float ka = (float)a;
    float kb = (float)b;
    float kc = (float)(-a * sdy / (double)m - b * mean);
    for (i64 j = threadIdx.x; j < m; j += CB_BLOCK) {
        i64 k = cb_bn_index(j, c, C, S);
        float m = cb_bn_masked(dy, mask, k);
        if (dres) dres[k] = m;
        dx[k] = ka * m + kb * x[k] + kc;
    }
}
