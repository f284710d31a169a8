// On-GPU augmentation of CIFAR-shaped batches (augment/cpu.rs is the reference): zero-pad by
// `pad`, crop h x w at (dy, dx), mirror horizontally when flip. params = 3 floats per image
// (dy, dx, flip); invalid parameters (not integers in [0, 2*pad], flip not 0/1) give NaNs
// for that image (the CPU rejects them with an error).

extern "C" __global__ void cb_crop_flip(const float* x, const float* params, float* y, i64 N, i64 C,
                                        i64 H, i64 W, i64 pad) {
    CB_FOR(i, N * C * H * W) {
        i64 ox = i % W;
        i64 oy = (i / W) % H;
        i64 c = (i / (W * H)) % C;
        i64 n = i / (W * H * C);
        float fy = params[3 * n];
        float fx = params[3 * n + 1];
        float ff = params[3 * n + 2];
        float lim = (float)(2 * pad);
        bool ok = fy >= 0.0f && fy <= lim && floorf(fy) == fy && fx >= 0.0f && fx <= lim &&
                  floorf(fx) == fx && (ff == 0.0f || ff == 1.0f);
        if (!ok) {
            y[i] = cb_nan();
            continue;
        }
        i64 sx = ff == 1.0f ? W - 1 - ox : ox;
        i64 iy = oy + (i64)fy - pad;
        i64 ix = sx + (i64)fx - pad;
        bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
        y[i] = inside ? x[((n * C + c) * H + iy) * W + ix] : 0.0f;
    }
}
