// Runtime of the CUDA kernel emulator (see emu.h): the kernel registry and the launcher.
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "emu.h"

namespace cb_emu {
thread_local cb_dim3 threadIdx, blockIdx, blockDim, gridDim;
static thread_local std::barrier<>* current_barrier = nullptr;

struct Entry {
    thunk_t f;
    const char* signature;
};

static std::map<std::string, Entry>& registry() {
    static std::map<std::string, Entry> m;
    return m;
}

Registrar::Registrar(const char* name, thunk_t f, const char* signature) { registry()[name] = Entry{f, signature}; }

void syncthreads() {
    if (current_barrier == nullptr) {
        std::fprintf(stderr, "cb_emu: __syncthreads() in a kernel not launched as cooperative\n");
        std::abort();
    }
    current_barrier->arrive_and_wait();
}
}  // namespace cb_emu

// The parameter codes of a kernel (see cb_emu::signature), or null for an unknown kernel.
extern "C" const char* cb_emu_signature(const char* name) {
    auto it = cb_emu::registry().find(name);
    return it == cb_emu::registry().end() ? nullptr : it->second.signature;
}

// 0 = done, 1 = unknown kernel, 2 = the host could not start the threads.
extern "C" int cb_emu_launch(const char* name, unsigned grid, unsigned block, int cooperative, void** args) {
    using namespace cb_emu;
    auto it = registry().find(name);
    if (it == registry().end()) return 1;
    thunk_t f = it->second.f;
    if (!cooperative) {
        blockDim = {block, 1, 1};
        gridDim = {grid, 1, 1};
        for (unsigned b = 0; b < grid; ++b) {
            blockIdx = {b, 0, 0};
            for (unsigned t = 0; t < block; ++t) {
                threadIdx = {t, 0, 0};
                f(args);
            }
        }
        return 0;
    }
    // __shared__ arrays are function-local statics here: one cooperative launch at a time
    // in the whole process (tests launch from several threads).
    static std::mutex cooperative_launch;
    std::lock_guard<std::mutex> one_at_a_time(cooperative_launch);
    try {
        std::barrier<> bar(block);
        std::vector<std::thread> threads;
        threads.reserve(block);
        for (unsigned t = 0; t < block; ++t) {
            threads.emplace_back([&bar, f, args, grid, block, t] {
                current_barrier = &bar;
                blockDim = {block, 1, 1};
                gridDim = {grid, 1, 1};
                threadIdx = {t, 0, 0};
                for (unsigned b = 0; b < grid; ++b) {
                    blockIdx = {b, 0, 0};
                    f(args);
                    bar.arrive_and_wait();  // the block is done before the next one starts
                }
                current_barrier = nullptr;
            });
        }
        for (auto& th : threads) th.join();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cb_emu: %s\n", e.what());
        return 2;
    }
    return 0;
}
