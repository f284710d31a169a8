// Max and average pooling, NCHW, stride, zero padding, Caffe-style ceil mode (pool/cpu.rs is
// the reference). Forward: one thread per output element. Backward: one thread per input
// element, gathering from every window that covers it in the CPU's window order (no atomics;
// bit-identical accumulation order).

// The input range [lo, hi) that window o covers, clipped to the input (Pool2dGeom::window).
__device__ void cb_pool_window(i64 o, i64 k, i64 s, i64 p, i64 input, i64* lo, i64* hi) {
    i64 start = o * s - p;
    i64 end = start + k;
    if (end > input) end = input;
    if (start < 0) start = 0;
    if (end < 0) end = 0;
    *lo = start;
    *hi = end;
}

// The windows [first, last] (inclusive; empty when first > last) that cover input index i.
__device__ void cb_pool_covering(i64 i, i64 k, i64 s, i64 p, i64 out, i64* first, i64* last) {
    i64 t = i + p - k + 1;  // o*s >= t
    *first = t <= 0 ? 0 : (t + s - 1) / s;
    i64 l = (i + p) / s;  // o*s <= i + p
    *last = l < out - 1 ? l : out - 1;
}

extern "C" __global__ void cb_max_pool_fwd(const float* x, float* y, i64 NC, i64 H, i64 W, i64 OH,
                                           i64 OW, i64 KH, i64 KW, i64 SH, i64 SW, i64 PH,
                                           i64 PW) {
    CB_FOR(i, NC * OH * OW) {
        i64 ox = i % OW;
        i64 oy = (i / OW) % OH;
        i64 pl = i / (OW * OH);
        i64 y0, y1, x0, x1;
        cb_pool_window(oy, KH, SH, PH, H, &y0, &y1);
        cb_pool_window(ox, KW, SW, PW, W, &x0, &x1);
        const float* xp = x + pl * H * W;
        float m = cb_neg_inf();
        for (i64 iy = y0; iy < y1; ++iy) {
            for (i64 ix = x0; ix < x1; ++ix) {
                float v = xp[iy * W + ix];
                if (v > m || v != v) m = v;
            }
        }
        y[i] = m;
    }
}

// dx[i] = sum of dy[o] over the windows o whose first element equal to y[o] is i.
extern "C" __global__ void cb_max_pool_bwd(const float* x, const float* y, const float* dy, float* dx,
                                           i64 NC, i64 H, i64 W, i64 OH, i64 OW, i64 KH, i64 KW,
                                           i64 SH, i64 SW, i64 PH, i64 PW) {
    CB_FOR(i, NC * H * W) {
        i64 ix = i % W;
        i64 iy = (i / W) % H;
        i64 pl = i / (W * H);
        const float* xp = x + pl * H * W;
        const float* yp = y + pl * OH * OW;
        const float* dyp = dy + pl * OH * OW;
        i64 oy0, oy1, ox0, ox1;
        cb_pool_covering(iy, KH, SH, PH, OH, &oy0, &oy1);
        cb_pool_covering(ix, KW, SW, PW, OW, &ox0, &ox1);
        float acc = 0.0f;
        for (i64 oy = oy0; oy <= oy1; ++oy) {
            for (i64 ox = ox0; ox <= ox1; ++ox) {
                i64 y0, y1, x0, x1;
                cb_pool_window(oy, KH, SH, PH, H, &y0, &y1);
                cb_pool_window(ox, KW, SW, PW, W, &x0, &x1);
                float t = yp[oy * OW + ox];
                i64 fy = -1;
                i64 fx = -1;
                for (i64 yy = y0; yy < y1 && fy < 0; ++yy) {
                    for (i64 xx = x0; xx < x1; ++xx) {
                        float v = xp[yy * W + xx];
                        if (v == t || (v != v && t != t)) {
                            fy = yy;
                            fx = xx;
                            break;
                        }
                    }
                }
                if (fy == iy && fx == ix) acc = acc + dyp[oy * OW + ox];
            }
        }
        dx[i] = acc;
    }
}

// Average over the in-bounds elements of each window (count_include_pad = false).
extern "C" __global__ void cb_avg_pool_fwd(const float* x, float* y, i64 NC, i64 H, i64 W, i64 OH,
                                           i64 OW, i64 KH, i64 KW, i64 SH, i64 SW, i64 PH,
                                           i64 PW) {
    CB_FOR(i, NC * OH * OW) {
        i64 ox = i % OW;
        i64 oy = (i / OW) % OH;
        i64 pl = i / (OW * OH);
        i64 y0, y1, x0, x1;
        cb_pool_window(oy, KH, SH, PH, H, &y0, &y1);
        cb_pool_window(ox, KW, SW, PW, W, &x0, &x1);
        const float* xp = x + pl * H * W;
        float s = 0.0f;
        for (i64 iy = y0; iy < y1; ++iy) {
            float r = 0.0f;
            for (i64 ix = x0; ix < x1; ++ix) r = r + xp[iy * W + ix];
            s = s + r;
        }
        y[i] = s / (float)((y1 - y0) * (x1 - x0));
    }
}

extern "C" __global__ void cb_avg_pool_bwd(const float* dy, float* dx, i64 NC, i64 H, i64 W, i64 OH,
                                           i64 OW, i64 KH, i64 KW, i64 SH, i64 SW, i64 PH,
                                           i64 PW) {
    CB_FOR(i, NC * H * W) {
        i64 ix = i % W;
        i64 iy = (i / W) % H;
        i64 pl = i / (W * H);
        const float* dyp = dy + pl * OH * OW;
        i64 oy0, oy1, ox0, ox1;
        cb_pool_covering(iy, KH, SH, PH, OH, &oy0, &oy1);
        cb_pool_covering(ix, KW, SW, PW, OW, &ox0, &ox1);
        float acc = 0.0f;
        for (i64 oy = oy0; oy <= oy1; ++oy) {
            for (i64 ox = ox0; ox <= ox1; ++ox) {
                i64 y0, y1, x0, x1;
                cb_pool_window(oy, KH, SH, PH, H, &y0, &y1);
                cb_pool_window(ox, KW, SW, PW, W, &x0, &x1);
                acc = acc + dyp[oy * OW + ox] / (float)((y1 - y0) * (x1 - x0));
            }
        }
        dx[i] = acc;
    }
}
