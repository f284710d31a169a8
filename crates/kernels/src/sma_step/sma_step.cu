// SMA's fused updates (sma_step/mod.rs; sma_step/cpu.rs is the reference), the unfused ops'
// order of operations (NVRTC compiles with --fmad=false, so the bits match the CPU):
//   learner: c = (w - z) * alpha; SGD step on w, v; w = w - c  (= w + -1 * c, axpy)
//   central: t = total [+ -decay * z] [+ mu * z + -mu * z_prev]; z_prev = z; z = z + t; total = t

extern "C" __global__ void cb_sma_learner(float* p, const float* grad, float* v, const float* z, float* c,
                                          i64 n, float alpha, float lr, float mu, float wd, int nesterov) {
    CB_FOR(i, n) {
        float ci = (p[i] - z[i]) * alpha;
        float g = grad[i] + wd * p[i];
        float vi = mu * v[i] - lr * g;
        v[i] = vi;
        float stepped = nesterov ? p[i] + (mu * vi - lr * g) : p[i] + vi;
        p[i] = stepped - ci;
        c[i] = ci;
    }
}

extern "C" __global__ void cb_sma_central(float* total, float* z, float* zp, i64 n, float mu, float decay) {
    CB_FOR(i, n) {
        float t = total[i];
        if (decay != 0.0f) t = t + -decay * z[i];
        if (mu != 0.0f) {
            t = t + mu * z[i];
            t = t + -mu * zp[i];
        }
        zp[i] = z[i];
        z[i] = z[i] + t;
        total[i] = t;
    }
}
