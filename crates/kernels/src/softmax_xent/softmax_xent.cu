// Fused softmax + cross-entropy + accuracy (softmax_xent/cpu.rs is the reference).
// One block of CB_BLOCK threads (cooperative); each thread owns whole rows, so a row is
// processed in the CPU's order. A label that is not a class index gives a NaN loss and a
// NaN gradient row (the CPU rejects it with an error instead).

extern "C" __global__ void cb_softmax_xent(const float* logits, const float* labels, float* dlogits,
                                           float* stats, i64 N, i64 C, float grad_scale,
                                           int has_grad) {
    __shared__ double sh[CB_BLOCK];
    double loss = 0.0;
    double correct = 0.0;
    for (i64 n = threadIdx.x; n < N; n += CB_BLOCK) {
        const float* row = logits + n * C;
        float l = labels[n];
        bool valid = l >= 0.0f && l < (float)C && floorf(l) == l;
        i64 label = valid ? (i64)l : -1;
        float mx = cb_neg_inf();
        i64 arg = 0;
        for (i64 j = 0; j < C; ++j) {
            float v = row[j];
            if (v > mx) {
                mx = v;
                arg = j;
            }
        }
        if (arg == label) correct += 1.0;
        float sum = 0.0f;
        for (i64 j = 0; j < C; ++j) sum = sum + expf(row[j] - mx);
        float lse = mx + logf(sum);
        loss += valid ? (double)(lse - row[label]) : (double)cb_nan();
        if (has_grad) {
            float inv = 1.0f / sum;
            float* d = dlogits + n * C;
            for (i64 j = 0; j < C; ++j) {
                float p = expf(row[j] - mx) * inv;
                float g = grad_scale * (p - (j == label ? 1.0f : 0.0f));
                d[j] = valid ? g : cb_nan();
            }
        }
    }
    double ls = cb_block_sum(loss, sh);
    double cs = cb_block_sum(correct, sh);
    if (threadIdx.x == 0) {
        stats[0] = (float)ls;
        stats[1] = (float)cs;
    }
}
