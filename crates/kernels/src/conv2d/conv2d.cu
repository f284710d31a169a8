// im2col / col2im for the conv2d fallback (cuDNN absent or disabled); the GEMMs go through
// cuBLAS. Layout as on the CPU (conv2d/cpu.rs): per image, col[K = c_in*kh*kw][P = oh*ow],
// row k = (c*kh + ki)*kw + kj; `images` images are unfolded back to back.

// col[img][k][p] = x[img][c][oy*sh + ki - ph][ox*sw + kj - pw], 0 outside the input.
extern "C" __global__ void cb_im2col(const float* x, float* col, i64 images, i64 C, i64 H, i64 W,
                                     i64 KH, i64 KW, i64 SH, i64 SW, i64 PH, i64 PW, i64 OH,
                                     i64 OW) {
    i64 P = OH * OW;
    i64 K = C * KH * KW;
    CB_FOR(i, images * K * P) {
        i64 p = i % P;
        i64 k = (i / P) % K;
        i64 img = i / (P * K);
        i64 ox = p % OW;
        i64 oy = p / OW;
        i64 kj = k % KW;
        i64 ki = (k / KW) % KH;
        i64 c = k / (KW * KH);
        i64 iy = oy * SH + ki - PH;
        i64 ix = ox * SW + kj - PW;
        bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
        col[i] = inside ? x[((img * C + c) * H + iy) * W + ix] : 0.0f;
    }
}

// dx[img][c][iy][ix] = sum over (ki, kj), in that order, of the col entries unfolded from it.
// Every element of dx is written (no atomics, no zero-fill needed).
extern "C" __global__ void cb_col2im(const float* col, float* dx, i64 images, i64 C, i64 H, i64 W,
                                     i64 KH, i64 KW, i64 SH, i64 SW, i64 PH, i64 PW, i64 OH,
                                     i64 OW) {
    i64 P = OH * OW;
    i64 K = C * KH * KW;
    CB_FOR(i, images * C * H * W) {
        i64 ix = i % W;
        i64 iy = (i / W) % H;
        i64 c = (i / (W * H)) % C;
        i64 img = i / (W * H * C);
        float acc = 0.0f;
        for (i64 ki = 0; ki < KH; ++ki) {
            i64 ty = iy + PH - ki;
            if (ty < 0 || ty % SH != 0) continue;
            i64 oy = ty / SH;
            if (oy >= OH) continue;
            for (i64 kj = 0; kj < KW; ++kj) {
                i64 tx = ix + PW - kj;
                if (tx < 0 || tx % SW != 0) continue;
                i64 ox = tx / SW;
                if (ox >= OW) continue;
                acc = acc + col[(img * K + (c * KH + ki) * KW + kj) * P + oy * OW + ox];
            }
        }
        dx[i] = acc;
    }
}
