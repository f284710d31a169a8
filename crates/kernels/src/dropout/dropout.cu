// Inverted dropout with the counter-based mask of dropout/mod.rs: the same SplitMix64
// finaliser on unsigned 64-bit integers (wrapping arithmetic) and the same conversion of
// the top 24 bits to a float in [0, 1), so the mask is bit-identical to the CPU's.

__device__ float cb_dropout_uniform(u64 seed, u64 i) {
    u64 z = seed + (i + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

// mask[i] = uniform(seed, i) >= p ? scale : 0;  y[i] = x[i] * mask[i]
extern "C" __global__ void cb_dropout_fwd(const float* x, float* y, float* mask, i64 n, float p,
                                          float scale, u64 seed) {
    CB_FOR(i, n) {
        float m = cb_dropout_uniform(seed, (u64)i) >= p ? scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}
