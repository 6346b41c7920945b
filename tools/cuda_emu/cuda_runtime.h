// A CPU emulation of the small part of CUDA that minima's kernels use, so that their logic (index arithmetic,
// tiling, shuffles, the multi-pass reduction, the host wrappers) can be tested on a machine without a GPU.
// tools/cuda_emu/build.py compiles cuda_kernels.cu against this header with a C++ compiler.
//
// Each GPU thread of a block runs as a fiber (ucontext) on one OS thread; blocks run one after another.
// __syncthreads() and each half of a warp shuffle yield to a scheduler that runs every live fiber of the block up to
// its next yield, round after round: exactly the guarantee a barrier gives. Shared memory is a function-local static
// (blocks never overlap). Atomics need no atomicity, as fibers switch only at yields.
// It proves logic, not speed or memory-model subtleties; the real thing runs on a GPU.
#pragma once
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <cstdio>
#include <cmath>
#include <chrono>
#include <functional>
#include <vector>
#include <ucontext.h>
#include <sys/mman.h>
#include <unordered_map>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
#define MINIMA_CUDA_EMU 1
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

// ---- runtime API: errors
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9,
       cudaErrorInsufficientDriver = 35 };
inline cudaError_t emu_last_error = cudaSuccess;
inline cudaError_t emu_set(cudaError_t e) { if (e) emu_last_error = e; return e; }
inline cudaError_t cudaGetLastError() { cudaError_t e = emu_last_error; emu_last_error = cudaSuccess; return e; }
inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) { case 0: return "cudaSuccess"; case 1: return "cudaErrorInvalidValue";
                 case 2: return "cudaErrorMemoryAllocation"; case 9: return "cudaErrorInvalidConfiguration"; }
    return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) { case 0: return "no error"; case 1: return "invalid argument"; case 2: return "out of memory";
                 case 9: return "invalid configuration argument"; }
    return "unknown error";
}

// ---- memory, streams, events, device queries
typedef void* cudaStream_t;
typedef void* cudaEvent_t;
typedef void* cudaMemPool_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrComputeCapabilityMajor = 75 };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
struct cudaDeviceProp { char name[256]; int major, minor, multiProcessorCount; };

// Every allocation ends exactly at an inaccessible guard page, so a kernel that reads or writes past the end of
// a buffer crashes the test run at once instead of silently touching a neighbour (as it might on a GPU).
inline std::unordered_map<void*, std::pair<void*, size_t>> emu_maps;
inline cudaError_t cudaMalloc(void** p, size_t n) {
    if (n > (size_t(1) << 40)) return emu_set(cudaErrorMemoryAllocation);
    const size_t page = 4096, body = (n + 7) / 8 * 8, total = (body + page - 1) / page * page + page;
    void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return emu_set(cudaErrorMemoryAllocation);
    mprotect((char*)base + total - page, page, PROT_NONE);
    *p = (char*)base + total - page - body;
    emu_maps[*p] = {base, total};
    return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
inline cudaError_t cudaFree(void* p) {
    auto it = emu_maps.find(p);
    if (it == emu_maps.end()) return emu_set(cudaErrorInvalidValue);
    munmap(it->second.first, it->second.second);
    emu_maps.erase(it);
    return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { memmove(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(d, s, n, k); }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
// 2 SMs by default keeps emulated grids small; EMU_SMS=132 reproduces an H100's launch geometry
// and it reports compute capability 9 (an sm_90 GPU) so that the tensor-core paths run (tools/cuda_emu/mma.h)
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    if (a == cudaDevAttrComputeCapabilityMajor) { *v = 9; return cudaSuccess; }
    const char* s = getenv("EMU_SMS"); *v = s ? atoi(s) : 2; return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    snprintf(p->name, sizeof p->name, "minima CPU emulation of CUDA"); p->major = 0; p->minor = 0; p->multiProcessorCount = 2;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* p, int) { *p = nullptr; return cudaSuccess; }
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new double(0); return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    *(double*)e = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = float(*(double*)b - *(double*)a); return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete (double*)e; return cudaSuccess; }

// ---- the fiber scheduler
namespace emu {
struct Fiber { ucontext_t ctx; bool done; dim3 tid; unsigned linear; };
inline ucontext_t sched;
inline Fiber* cur = nullptr;
inline std::vector<Fiber> fibers(1024);
inline std::vector<std::vector<char>> stacks;
inline const std::function<void()>* body = nullptr;
inline unsigned char slots[1024][8];
constexpr size_t STACK = 64 * 1024;

inline void trampoline() {
    (*body)();
    cur->done = true;
    swapcontext(&cur->ctx, &sched);
}
inline void yield() { Fiber* f = cur; swapcontext(&f->ctx, &sched); }

inline void launch(dim3 g, dim3 b, const std::function<void()>& f) {
    const unsigned nt = b.x * b.y * b.z;
    if (nt == 0 || nt > 1024 || g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535) {
        emu_set(cudaErrorInvalidConfiguration); return;
    }
    if (stacks.empty()) for (int i = 0; i < 1024; ++i) stacks.emplace_back(STACK);
    gridDim = g; blockDim = b; body = &f;
    for (unsigned bz = 0; bz < g.z; ++bz)
    for (unsigned by = 0; by < g.y; ++by)
    for (unsigned bx = 0; bx < g.x; ++bx) {
        blockIdx = dim3(bx, by, bz);
        for (unsigned t = 0; t < nt; ++t) {
            Fiber& fb = fibers[t];
            fb.done = false; fb.linear = t;
            fb.tid = dim3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
            getcontext(&fb.ctx);
            fb.ctx.uc_stack.ss_sp = stacks[t].data(); fb.ctx.uc_stack.ss_size = STACK; fb.ctx.uc_link = nullptr;
            makecontext(&fb.ctx, trampoline, 0);
        }
        unsigned alive = nt;
        while (alive) {   // one round: every live fiber runs up to its next yield or its end
            for (unsigned t = 0; t < nt; ++t) {
                Fiber& fb = fibers[t];
                if (fb.done) continue;
                cur = &fb; threadIdx = fb.tid;
                swapcontext(&sched, &fb.ctx);
                if (fb.done) --alive;
            }
        }
    }
}

template <class T> inline T shfl_xor(T v, int mask) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    const unsigned t = cur->linear;
    memcpy(slots[t], &v, sizeof(T));
    yield();   // every lane of the warp has written its value
    T r;
    memcpy(&r, slots[(t & ~31u) | ((t & 31u) ^ (unsigned)mask)], sizeof(T));
    yield();   // every lane has read before anyone writes again
    return r;
}
}  // namespace emu

#define __syncthreads() emu::yield()
#define __syncwarp(...) emu::yield()   // coarser than a warp barrier: every thread of the block
#define __shfl_xor_sync(mask, v, lanemask) emu::shfl_xor((v), (lanemask))
#define EMU_LAUNCH(grid, block, ...) emu::launch(dim3(grid), dim3(block), [&] { __VA_ARGS__; })

template <class T, class U> inline T atomicAdd(T* p, U v) { T old = *p; *p = (T)(old + (T)v); return old; }

// dp4a: the four signed bytes of a times those of b, summed into c (sm_61 and later)
inline int __dp4a(int a, int b, int c) {
    for (int e = 0; e < 4; ++e) c += (int)(int8_t)(a >> (8 * e)) * (int)(int8_t)(b >> (8 * e));
    return c;
}

// A kernel that the student edition leaves to write holds MINIMA_TODO("kernel: hint"): the emulator keeps the message
// (emu_todo() returns it, or null), which the grader reports as "not written yet" instead of comparing garbage.
static const char* emu_todo_msg_ = nullptr;
extern "C" const char* emu_todo() { return emu_todo_msg_; }
extern "C" void emu_todo_clear() { emu_todo_msg_ = nullptr; }
#define MINIMA_TODO(msg) (emu_todo_msg_ = (msg))
