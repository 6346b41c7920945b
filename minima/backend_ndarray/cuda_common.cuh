// minima CUDA backend: shared definitions (dtypes, op codes, error handling, launch geometry).
// The kernels live in cuda_kernels.cu; the chapter nbs/22_cuda.ipynb walks through both files.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <climits>
#include <type_traits>

typedef int64_t i64;
typedef __half f16;
typedef __nv_bfloat16 bf16;

// dtype codes, in the order of minima's DTYPES
enum DType { DT_F32 = 0, DT_F64 = 1, DT_I64 = 2, DT_BOOL = 3, DT_F16 = 4, DT_I32 = 5, DT_I16 = 6, DT_I8 = 7,
             DT_U8 = 8, DT_BF16 = 9 };
static const char* const DT_NAMES[] = {"float32", "float64", "int64", "bool", "float16", "int32", "int16", "int8",
                                       "uint8", "bfloat16"};
static inline const char* dt_name(int dt) { return (dt >= 0 && dt < 10) ? DT_NAMES[dt] : "?"; }
// One `case` per held dtype: `switch (dt) { DT_CASES(X) }` with X(code, type) a macro that returns.
#define DT_CASES(X) X(DT_F32, float) X(DT_F64, double) X(DT_I64, i64) X(DT_BOOL, bool) X(DT_F16, f16) \
                    X(DT_I32, int32_t) X(DT_I16, int16_t) X(DT_I8, int8_t) X(DT_U8, uint8_t) X(DT_BF16, bf16)

// binary op codes: EWISE_OPS, then the reversed scalar variants of SCALAR_OPS
enum BinOp { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM, OP_MINIMUM,
             OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_RSUB, OP_RDIV, OP_RPOW, OP_NBIN };
static const char* const BIN_NAMES[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                        "eq", "ne", "lt", "le", "gt", "ge", "rsub", "rdiv", "rpow"};
// unary op codes: UNARY_OPS
enum UnOp { OP_NEG, OP_EXP, OP_LOG, OP_SQRT, OP_SIN, OP_COS, OP_TANH, OP_ABS, OP_SIGN, OP_ROUND, OP_FLOOR, OP_ERF, OP_NUN };
static const char* const UN_NAMES[] = {"neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "abs", "sign", "round", "floor",
                                        "erf"};

// ---- errors: every entry point returns 0 or an error code; the message waits in g_err for Python to fetch.
static thread_local char g_err[1024];
static int g_sync_each = -1;

static int fail_cuda(const char* kernel, int dt, cudaError_t e) {
    cudaGetLastError();  // clear a non-sticky error so that the next launch check does not report it again
    snprintf(g_err, sizeof g_err, "CUDA error in %s%s%s%s: %s: %s", kernel, dt < 0 ? "" : "[", dt < 0 ? "" : dt_name(dt),
             dt < 0 ? "" : "]", cudaGetErrorName(e), cudaGetErrorString(e));
    return (int)e;
}
static int fail_msg(const char* kernel, int dt, const char* msg) {
    snprintf(g_err, sizeof g_err, "%s%s%s%s: %s", kernel, dt < 0 ? "" : "[", dt < 0 ? "" : dt_name(dt), dt < 0 ? "" : "]", msg);
    return -1;
}
// Launches are asynchronous: cudaGetLastError catches bad configurations at once, while faults inside a kernel
// surface at the next synchronising call. MINIMA_CUDA_SYNC=1 synchronises after every launch to pin them down.
static int check_launch(const char* kernel, int dt) {
    if (g_sync_each < 0) { const char* s = getenv("MINIMA_CUDA_SYNC"); g_sync_each = (s && s[0] && s[0] != '0'); }
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && g_sync_each) e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : fail_cuda(kernel, dt, e);
}
#define CUDA_TRY(call, kernel, dt) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return fail_cuda(kernel, dt, e_); } while (0)
#define TRY(expr) do { int r_ = (expr); if (r_) return r_; } while (0)

// ---- launch geometry: grid-stride loops with a grid of a few waves of blocks
static int g_sm_count = 0;
static int sm_count() {
    if (!g_sm_count) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) g_sm_count = 80;
    }
    return g_sm_count;
}
static inline unsigned grid_for(i64 n, int threads, int per_thread) {
    i64 blocks = (n + (i64)threads * per_thread - 1) / ((i64)threads * per_thread);
    i64 cap = (i64)sm_count() * 32;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

// ---- the 16-bit floats: stored in 16 bits, computed in float32 (torch's "opmath" type), rounded once on store.
// `Wide<T>::type` is the type a kernel computes in; `widen` loads into it; `convert<D>` stores with numpy's astype
// rules (16-bit floats round to nearest even, float -> int truncates, anything -> bool is `!= 0`).
template <class T> struct is_low_float : std::false_type {};
template <> struct is_low_float<f16> : std::true_type {};
template <> struct is_low_float<bf16> : std::true_type {};
template <class T> struct Wide { typedef T type; };
template <> struct Wide<f16> { typedef float type; };
template <> struct Wide<bf16> { typedef float type; };
template <class T> __host__ __device__ __forceinline__ typename Wide<T>::type widen(T x) {
    if constexpr (std::is_same<T, f16>::value) return __half2float(x);
    else if constexpr (std::is_same<T, bf16>::value) return __bfloat162float(x);
    else return x;
}
template <class D, class S> __host__ __device__ __forceinline__ D convert(S x) {
    if constexpr (is_low_float<S>::value) return convert<D>(widen(x));
    else if constexpr (std::is_same<D, bool>::value) return x != S(0);
    else if constexpr (std::is_same<D, f16>::value) {
        if constexpr (std::is_same<S, float>::value) return __float2half_rn(x); else return __double2half((double)x);
    } else if constexpr (std::is_same<D, bf16>::value) {
        if constexpr (std::is_same<S, float>::value) return __float2bfloat16_rn(x);
        else return __double2bfloat16((double)x);
    } else if constexpr (std::is_floating_point<S>::value && std::is_unsigned<D>::value && sizeof(D) < 8) {
        // a negative float into an unsigned type is undefined in C++ (the GPU saturates, x86 wraps): do what numpy
        // does on x86, truncate to int64, then keep the low bits (-1.27 -> 255 as uint8)
        return static_cast<D>(static_cast<i64>(x));
    } else return static_cast<D>(x);
}
template <class T> __host__ __device__ __forceinline__ T zero() { return convert<T>(0.f); }

// ---- scalar helpers that work for every dtype
template <class T> __device__ __forceinline__ bool is_nan(T x) {
    if constexpr (std::is_floating_point<T>::value) return x != x; else return false;
}
template <class T> __device__ __forceinline__ T lowest() {
    if constexpr (std::is_floating_point<T>::value) return -INFINITY;
    else if constexpr (std::is_same<T, bool>::value) return false;
    else if constexpr (std::is_signed<T>::value) return (T)((unsigned long long)1 << (sizeof(T) * 8 - 1));
    else return T(0);
}
