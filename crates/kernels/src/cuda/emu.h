// Host emulation of the CUDA built-ins the crossbow kernels use, so the .cu sources compile
// with a C++20 compiler and run on the CPU (cuda/emu.rs). Prepended to every kernel source
// (before cuda/prelude.cuh). Blocks run one after another; the threads of a block run one
// after another, except for "cooperative" kernels (those using __shared__ memory and
// __syncthreads), whose threads run concurrently on host threads with a barrier.
#include <math.h>
#include <stddef.h>
#include <string.h>

#include <type_traits>
#include <utility>

struct cb_dim3 {
    unsigned int x, y, z;
};

namespace cb_emu {
extern thread_local cb_dim3 threadIdx, blockIdx, blockDim, gridDim;
void syncthreads();
typedef void (*thunk_t)(void**);
struct Registrar {
    Registrar(const char* name, thunk_t f, const char* signature);
};
// One character per kernel parameter, so the launcher can check each argument's width
// and kind against the kernel's declared type: 'p' pointer, 'f' float, 'd' double,
// 'i'/'I' 32-bit signed/unsigned integer, 'l'/'L' 64-bit signed/unsigned integer, '?'
// anything else (always rejected).
template <typename T>
constexpr char param_code() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_pointer_v<U>) {
        return 'p';
    } else if constexpr (std::is_same_v<U, float>) {
        return 'f';
    } else if constexpr (std::is_same_v<U, double>) {
        return 'd';
    } else if constexpr (std::is_integral_v<U> && sizeof(U) == 4) {
        return std::is_signed_v<U> ? 'i' : 'I';
    } else if constexpr (std::is_integral_v<U> && sizeof(U) == 8) {
        return std::is_signed_v<U> ? 'l' : 'L';
    } else {
        return '?';
    }
}
template <typename... A>
const char* signature(void (*)(A...)) {
    static constexpr char s[sizeof...(A) + 1] = {param_code<A>()..., '\0'};
    return s;
}
// Calls f with its parameters read from CUDA-style kernelParams (pointers to each value).
template <typename... A, size_t... I>
void call_impl(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}
template <typename... A>
void call(void (*f)(A...), void** args) {
    call_impl(f, args, std::index_sequence_for<A...>{});
}
}  // namespace cb_emu

using cb_emu::blockDim;
using cb_emu::blockIdx;
using cb_emu::gridDim;
using cb_emu::threadIdx;

#define __global__
#define __device__ static inline
#define __shared__ static
#define __syncthreads() cb_emu::syncthreads()

static inline float __int_as_float(int v) {
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}
