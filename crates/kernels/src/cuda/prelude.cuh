// crossbow CUDA prelude: prepended to every kernel source (`<op>/<op>.cu`) before it is
// compiled, by NVRTC at run time and by the host emulator of the CPU tests (`cuda/emu.rs`,
// which defines the CUDA built-ins first). Rules every kernel follows, so that both compile
// it and the emulator can run it:
//   * no #include, no templates, no warp intrinsics, no atomics;
//   * every kernel is `extern "C" __global__` and its name starts with `cb_` (unique across
//     all sources);
//   * sizes and indices are `i64`; element-wise kernels use grid-stride loops (`CB_FOR`),
//     so any grid size is correct;
//   * kernels that use `__shared__` memory / `__syncthreads()` are launched with exactly
//     `CB_BLOCK` threads per block and listed as "cooperative" in the op's `cuda.rs`;
//   * helpers are plain `__device__` functions (never `inline`: the emulator defines
//     `__device__` as `static inline`).
// Kernels are compiled with --fmad=false, so `a * b + c` rounds twice, exactly like the
// CPU reference.

typedef long long i64;
typedef unsigned long long u64;

#define CB_BLOCK 256

#define CB_FOR(i, n)                                                              \
    for (i64 i = (i64)blockIdx.x * (i64)blockDim.x + (i64)threadIdx.x; i < (i64)(n); \
         i += (i64)blockDim.x * (i64)gridDim.x)

__device__ float cb_nan() { return __int_as_float(0x7fc00000); }

__device__ float cb_neg_inf() { return __int_as_float((int)0xff800000u); }

// Sum of `v` over the block (blockDim.x == CB_BLOCK), returned to every thread. `sh` is a
// __shared__ double[CB_BLOCK] of the caller; it may be reused right after the call.
__device__ double cb_block_sum(double v, double* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = CB_BLOCK / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}
