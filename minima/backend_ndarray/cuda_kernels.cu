// minima CUDA backend: every primitive of the backend contract as a CUDA kernel plus a C-ABI host wrapper.
// Python loads the compiled library with ctypes (minima/backend_ndarray/cuda.py). Sections are delimited by
// "// ==== name ====" lines so that the chapter nbs/22_cuda.ipynb can show each one next to its explanation.
#include "cuda_common.cuh"

// ==== memory ====
extern "C" const char* mc_last_error() { return g_err; }

// A real CUDA call: on a machine without a driver this returns cudaErrorInsufficientDriver (or cudaErrorNoDevice).
extern "C" int mc_probe(int* count) {
    *count = 0;
    CUDA_TRY(cudaGetDeviceCount(count), "cudaGetDeviceCount", -1);
    if (*count == 0) return fail_msg("cudaGetDeviceCount", -1, "no CUDA device");
    void* p = nullptr;
    CUDA_TRY(cudaMalloc(&p, 256), "cudaMalloc", -1);
    CUDA_TRY(cudaFree(p), "cudaFree", -1);
    // keep freed blocks in the stream-ordered pool instead of returning them to the driver
    cudaMemPool_t pool; int dev = 0;
    CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice", -1);
    if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    cudaGetLastError();
    return 0;
}

extern "C" int mc_device_info(char* name, int len, int* major, int* minor, int* sms) {
    int dev = 0; cudaDeviceProp prop;
    CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice", -1);
    CUDA_TRY(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties", -1);
    snprintf(name, len, "%s", prop.name);
    *major = prop.major; *minor = prop.minor; *sms = prop.multiProcessorCount;
    return 0;
}

// Allocation goes through the stream-ordered allocator: freed memory returns to a pool and is reused without a
// device-wide synchronisation, which is what makes a training loop of many small temporaries cheap.
extern "C" int mc_malloc(void** p, i64 nbytes) {
    CUDA_TRY(cudaMallocAsync(p, nbytes > 0 ? nbytes : 1, 0), "cudaMallocAsync", -1);
    return 0;
}
extern "C" int mc_free(void* p) { CUDA_TRY(cudaFreeAsync(p, 0), "cudaFreeAsync", -1); return 0; }
extern "C" int mc_h2d(void* dst, const void* src, i64 nbytes) {
    CUDA_TRY(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice), "cudaMemcpy(host->device)", -1); return 0;
}
extern "C" int mc_d2h(void* dst, const void* src, i64 nbytes) {
    CUDA_TRY(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost), "cudaMemcpy(device->host)", -1); return 0;
}
extern "C" int mc_d2d(void* dst, const void* src, i64 nbytes) {
    CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpy(device->device)", -1);
    return 0;
}
extern "C" int mc_sync() { CUDA_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize", -1); return 0; }

// device-side timing with CUDA events, for the benchmarks
extern "C" int mc_event_create(void** ev) { CUDA_TRY(cudaEventCreate((cudaEvent_t*)ev), "cudaEventCreate", -1); return 0; }
extern "C" int mc_event_record(void* ev) { CUDA_TRY(cudaEventRecord((cudaEvent_t)ev, 0), "cudaEventRecord", -1); return 0; }
extern "C" int mc_event_elapsed(void* start, void* stop, float* ms) {
    CUDA_TRY(cudaEventSynchronize((cudaEvent_t)stop), "cudaEventSynchronize", -1);
    CUDA_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)stop), "cudaEventElapsedTime", -1);
    return 0;
}
extern "C" int mc_event_destroy(void* ev) { CUDA_TRY(cudaEventDestroy((cudaEvent_t)ev), "cudaEventDestroy", -1); return 0; }

// ==== fill ====
template <class T>
__global__ void fill_kernel(T* __restrict__ out, i64 n, T v) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) out[i] = v;
}
template <class T> static T scalar_as(double v, i64 iv) {
    if constexpr (std::is_floating_point<T>::value || is_low_float<T>::value) return convert<T>(v); else return (T)iv;
}
template <class T> static int fill_t(void* out, i64 n, double v, i64 iv, int dt) {
    T x = scalar_as<T>(v, iv);
    fill_kernel<T><<<grid_for(n, 256, 4), 256>>>((T*)out, n, x);
    return check_launch("fill_kernel", dt);
}
extern "C" int mc_fill(int dt, void* out, i64 n, double v, i64 iv) {
    if (n <= 0) return 0;
#define X(code, T) case code: return fill_t<T>(out, n, v, iv, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg("fill_kernel", dt, "unsupported dtype");
}

// ==== strided ====
// A strided view maps the linear index i of its compact order to an element of a flat buffer:
//     i -> (j_0, ..., j_{d-1})  (row-major digits of i in the mixed radix `shape`)
//       -> offset + sum_k j_k * strides[k]
// One thread handles one (or a few) i. Neighbouring threads get neighbouring i, so the compact side of the copy
// is always coalesced; the strided side is as coalesced as the view's last stride allows.
// Up to MAXD dimensions (after merging, see below) travel by value in the kernel's parameters; more go through a
// small device buffer, so there is no cap on the number of dimensions.
#define MAXD 12
struct Dims { i64 shape[MAXD]; i64 strides[MAXD]; };

template <class Idx>
__device__ __forceinline__ Idx strided_index(Idx i, int ndim, const Dims& d, const i64* __restrict__ big, Idx offset) {
    Idx off = offset;
    if (big == nullptr) {
#pragma unroll
        for (int k = MAXD - 1; k >= 0; --k) {
            if (k < ndim) { Idx n = (Idx)d.shape[k]; off += (i % n) * (Idx)d.strides[k]; i /= n; }
        }
    } else {
        for (int k = ndim - 1; k >= 0; --k) { Idx n = (Idx)big[k]; off += (i % n) * (Idx)big[ndim + k]; i /= n; }
    }
    return off;
}

// MODE 0: compact (out[i] = a[view(i)]); 1: ewise_setitem (out[view(i)] = a[i]); 2: scalar_setitem (out[view(i)] = v)
template <class T, class Idx, int MODE>
__global__ void strided_kernel(const T* __restrict__ a, T* __restrict__ out, Idx n, int ndim, Dims d,
                               const i64* __restrict__ big, Idx offset, T v) {
    for (Idx i = (Idx)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (Idx)gridDim.x * blockDim.x) {
        Idx j = strided_index<Idx>(i, ndim, d, big, offset);
        if (MODE == 0) out[i] = a[j];
        else if (MODE == 1) out[j] = a[i];
        else out[j] = v;
    }
}

// Merge dimensions that walk memory like one: drop size-1 axes, and fuse axis k with k+1 when
// strides[k] == strides[k+1] * shape[k+1]. A transposed matrix stays 2-d; a compact slab becomes 1-d.
static int merge_dims(int ndim, const i64* shape, const i64* strides, i64* ms, i64* mt) {
    int m = 0;
    for (int k = 0; k < ndim; ++k) {
        if (shape[k] == 1) continue;
        if (m > 0 && mt[m - 1] == strides[k] * shape[k]) { ms[m - 1] *= shape[k]; mt[m - 1] = strides[k]; }
        else { ms[m] = shape[k]; mt[m] = strides[k]; ++m; }
    }
    return m;
}

static const char* const STRIDED_NAMES[] = {"compact_kernel", "ewise_setitem_kernel", "scalar_setitem_kernel"};

template <class T, int MODE>
static int strided_t(const void* a, void* out, int ndim, const i64* shape, const i64* strides, i64 offset, T v, int dt) {
    const char* name = STRIDED_NAMES[MODE];
    i64 n = 1;
    for (int k = 0; k < ndim; ++k) n *= shape[k];
    if (n <= 0) return 0;
    i64* ms = (i64*)malloc(sizeof(i64) * 2 * (ndim + 1));
    i64* mt = ms + ndim + 1;
    int m = merge_dims(ndim, shape, strides, ms, mt);
    // the view is one contiguous run: a plain device-to-device copy is the fastest kernel of all
    if (MODE < 2 && (m == 0 || (m == 1 && mt[0] == 1))) {
        free(ms);
        const T* src = MODE == 0 ? (const T*)a + offset : (const T*)a;
        T* dst = MODE == 0 ? (T*)out : (T*)out + offset;
        CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, 0), name, dt);
        return 0;
    }
    Dims d; memset(&d, 0, sizeof d);
    i64* big = nullptr;
    // the furthest element the view can reach decides whether 32-bit index arithmetic is safe
    i64 reach = offset < 0 ? -offset : offset;
    for (int k = 0; k < m; ++k) reach += (ms[k] - 1) * (mt[k] < 0 ? -mt[k] : mt[k]);
    if (m <= MAXD) { for (int k = 0; k < m; ++k) { d.shape[k] = ms[k]; d.strides[k] = mt[k]; } }
    else {
        cudaError_t e = cudaMallocAsync((void**)&big, sizeof(i64) * 2 * m, 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(big, ms, sizeof(i64) * m, cudaMemcpyHostToDevice, 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(big + m, mt, sizeof(i64) * m, cudaMemcpyHostToDevice, 0);
        if (e == cudaSuccess) e = cudaStreamSynchronize(0);  // the host arrays are freed below
        if (e != cudaSuccess) { free(ms); return fail_cuda(name, dt, e); }
    }
    free(ms);
    unsigned grid = grid_for(n, 256, 4);
    if (n < INT_MAX - (i64)grid * 256 && reach < INT_MAX)   // the grid-stride loop must not overflow either
        strided_kernel<T, int, MODE><<<grid, 256>>>((const T*)a, (T*)out, (int)n, m, d, big, (int)offset, v);
    else
        strided_kernel<T, i64, MODE><<<grid, 256>>>((const T*)a, (T*)out, n, m, d, big, offset, v);
    int rc = check_launch(name, dt);
    if (big) cudaFreeAsync(big, 0);
    return rc;
}

template <class T>
static int strided_dispatch(int mode, const void* a, void* out, int ndim, const i64* shape, const i64* strides,
                            i64 offset, double v, i64 iv, int dt) {
    T x = scalar_as<T>(v, iv);
    if (mode == 0) return strided_t<T, 0>(a, out, ndim, shape, strides, offset, x, dt);
    if (mode == 1) return strided_t<T, 1>(a, out, ndim, shape, strides, offset, x, dt);
    return strided_t<T, 2>(a, out, ndim, shape, strides, offset, x, dt);
}
static int strided_entry(int mode, int dt, const void* a, void* out, int ndim, const i64* shape, const i64* strides,
                         i64 offset, double v, i64 iv) {
#define X(code, T) case code: return strided_dispatch<T>(mode, a, out, ndim, shape, strides, offset, v, iv, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg(STRIDED_NAMES[mode], dt, "unsupported dtype");
}
extern "C" int mc_compact(int dt, const void* a, void* out, int ndim, const i64* shape, const i64* strides, i64 offset) {
    return strided_entry(0, dt, a, out, ndim, shape, strides, offset, 0, 0);
}
extern "C" int mc_ewise_setitem(int dt, const void* a, void* out, int ndim, const i64* shape, const i64* strides, i64 offset) {
    return strided_entry(1, dt, a, out, ndim, shape, strides, offset, 0, 0);
}
extern "C" int mc_scalar_setitem(int dt, double v, i64 iv, void* out, int ndim, const i64* shape, const i64* strides,
                                 i64 offset) {
    return strided_entry(2, dt, nullptr, out, ndim, shape, strides, offset, v, iv);
}
// A compact host copy of a strided view: copy directly when the view is contiguous, else compact on the device first.
extern "C" int mc_to_host(int dt, const void* a, void* host, int ndim, const i64* shape, const i64* strides, i64 offset,
                          int itemsize) {
    i64 n = 1;
    for (int k = 0; k < ndim; ++k) n *= shape[k];
    if (n <= 0) return 0;
    i64* ms = (i64*)malloc(sizeof(i64) * 2 * (ndim + 1));
    int m = merge_dims(ndim, shape, strides, ms, ms + ndim + 1);
    bool contiguous = m == 0 || (m == 1 && ms[ndim + 1] == 1);
    free(ms);
    if (contiguous) {
        CUDA_TRY(cudaMemcpy(host, (const char*)a + offset * itemsize, n * itemsize, cudaMemcpyDeviceToHost), "to_host", dt);
        return 0;
    }
    void* tmp = nullptr;
    CUDA_TRY(cudaMallocAsync(&tmp, n * itemsize, 0), "to_host", dt);
    int rc = mc_compact(dt, a, tmp, ndim, shape, strides, offset);
    if (rc == 0) {
        cudaError_t e = cudaMemcpy(host, tmp, n * itemsize, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) rc = fail_cuda("to_host", dt, e);
    }
    cudaFreeAsync(tmp, 0);
    return rc;
}

// ==== elementwise ====
// One functor per op; a kernel template applies it. Each thread loads UNROLL elements a block-width apart
// (so every load instruction of a warp touches 32 consecutive elements) before it computes and stores them:
// several independent loads in flight per thread is what keeps a memory-bound kernel near peak bandwidth.
template <class T> __device__ __forceinline__ T m_pow(T a, T b) {
    if constexpr (std::is_same<T, float>::value) return powf(a, b);
    else if constexpr (std::is_same<T, double>::value) return pow(a, b);
    else if constexpr (std::is_same<T, bool>::value) return a || !b;
    else {
        if constexpr (std::is_signed<T>::value) {
            if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
        }
        T r = 1;
        while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
        return r;
    }
}
template <class T> __device__ __forceinline__ T m_div(T a, T b) {
    if constexpr (std::is_floating_point<T>::value) return a / b;
    else if constexpr (std::is_same<T, bool>::value) return a;
    else return b == 0 ? 0 : a / b;
}
template <class T> __device__ __forceinline__ T m_max(T a, T b) { return (a > b || is_nan(a)) ? a : b; }
template <class T> __device__ __forceinline__ T m_min(T a, T b) { return (a < b || is_nan(a)) ? a : b; }

// A kernel on 16-bit floats loads them into float32 (`widen`), applies the same functor, and rounds once on store
// (`convert`): exactly what numpy does for float16 and ml_dtypes for bfloat16, so the two devices agree.
// The result type is spelled out, not deduced (`auto`): a kernel's template arguments must be the same in nvcc's
// host and device passes, and a return type deduced from a __device__ body is not (the host stub then registers a
// kernel the GPU does not have: cudaErrorInvalidDeviceFunction, found on the first real GPU, an H100).
template <int OP, class T> struct BinOut {
    typedef typename std::conditional<(OP >= OP_EQ && OP <= OP_GE), bool, T>::type type;
};
template <int OP> struct Bin {
    template <class T> __device__ __forceinline__ typename BinOut<OP, T>::type operator()(T a, T b) const {
        if constexpr (OP == OP_ADD) return (T)(a + b);
        else if constexpr (OP == OP_SUB) return (T)(a - b);
        else if constexpr (OP == OP_MUL) return (T)(a * b);
        else if constexpr (OP == OP_DIV) return m_div(a, b);
        else if constexpr (OP == OP_POW) return m_pow(a, b);
        else if constexpr (OP == OP_MAXIMUM) return m_max(a, b);
        else if constexpr (OP == OP_MINIMUM) return m_min(a, b);
        else if constexpr (OP == OP_EQ) return a == b;
        else if constexpr (OP == OP_NE) return a != b;
        else if constexpr (OP == OP_LT) return a < b;
        else if constexpr (OP == OP_LE) return a <= b;
        else if constexpr (OP == OP_GT) return a > b;
        else if constexpr (OP == OP_GE) return a >= b;
        else if constexpr (OP == OP_RSUB) return (T)(b - a);
        else if constexpr (OP == OP_RDIV) return m_div(b, a);
        else return m_pow(b, a);  // OP_RPOW
    }
};

#define UNROLL 4
// B_IS_SCALAR: the second operand is the single value `s` (the scalar ops) instead of the array b.
template <class T, class O, class F, bool B_IS_SCALAR>
__global__ void ewise_kernel(const T* __restrict__ a, const T* __restrict__ b, T s, O* __restrict__ out, i64 n, F f) {
    const i64 step = (i64)gridDim.x * blockDim.x * UNROLL;
    for (i64 base = (i64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < n; base += step) {
        T x[UNROLL], y[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            i64 i = base + (i64)u * blockDim.x;
            if (i < n) { x[u] = a[i]; y[u] = B_IS_SCALAR ? s : b[i]; }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            i64 i = base + (i64)u * blockDim.x;
            if (i < n) out[i] = convert<O>(f(widen(x[u]), widen(y[u])));
        }
    }
}

template <class T, int OP, bool SC>
static int launch_bin(const void* a, const void* b, T s, void* out, i64 n, int dt) {
    typedef typename BinOut<OP, T>::type O;
    ewise_kernel<T, O, Bin<OP>, SC><<<grid_for(n, 256, UNROLL), 256>>>((const T*)a, (const T*)b, s, (O*)out, n, Bin<OP>());
    char name[64];
    snprintf(name, sizeof name, "%s_%s_kernel", SC ? "scalar" : "ewise", BIN_NAMES[OP]);
    return check_launch(name, dt);
}

template <class T, bool SC>
static int bin_t(int op, const void* a, const void* b, T s, void* out, i64 n, int dt) {
    switch (op) {
        case OP_ADD: return launch_bin<T, OP_ADD, SC>(a, b, s, out, n, dt);
        case OP_SUB: return launch_bin<T, OP_SUB, SC>(a, b, s, out, n, dt);
        case OP_MUL: return launch_bin<T, OP_MUL, SC>(a, b, s, out, n, dt);
        case OP_DIV: return launch_bin<T, OP_DIV, SC>(a, b, s, out, n, dt);
        case OP_POW: return launch_bin<T, OP_POW, SC>(a, b, s, out, n, dt);
        case OP_MAXIMUM: return launch_bin<T, OP_MAXIMUM, SC>(a, b, s, out, n, dt);
        case OP_MINIMUM: return launch_bin<T, OP_MINIMUM, SC>(a, b, s, out, n, dt);
        case OP_EQ: return launch_bin<T, OP_EQ, SC>(a, b, s, out, n, dt);
        case OP_NE: return launch_bin<T, OP_NE, SC>(a, b, s, out, n, dt);
        case OP_LT: return launch_bin<T, OP_LT, SC>(a, b, s, out, n, dt);
        case OP_LE: return launch_bin<T, OP_LE, SC>(a, b, s, out, n, dt);
        case OP_GT: return launch_bin<T, OP_GT, SC>(a, b, s, out, n, dt);
        case OP_GE: return launch_bin<T, OP_GE, SC>(a, b, s, out, n, dt);
    }
    if (SC) switch (op) {
        case OP_RSUB: return launch_bin<T, OP_RSUB, SC>(a, b, s, out, n, dt);
        case OP_RDIV: return launch_bin<T, OP_RDIV, SC>(a, b, s, out, n, dt);
        case OP_RPOW: return launch_bin<T, OP_RPOW, SC>(a, b, s, out, n, dt);
    }
    char msg[64]; snprintf(msg, sizeof msg, "unknown binary op code %d", op);
    return fail_msg(SC ? "scalar_kernel" : "ewise_kernel", dt, msg);
}

extern "C" int mc_ewise(int op, int dt, const void* a, const void* b, void* out, i64 n) {
    if (n <= 0) return 0;
#define X(code, T) case code: return bin_t<T, false>(op, a, b, zero<T>(), out, n, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg("ewise_kernel", dt, "unsupported dtype");
}
extern "C" int mc_scalar(int op, int dt, const void* a, double v, i64 iv, void* out, i64 n) {
    if (n <= 0) return 0;
    // the scalar is first rounded to the array's dtype (bool: iv != 0), as the numpy device does
#define X(code, T) case code: return bin_t<T, true>(op, a, nullptr, scalar_as<T>(v, iv), out, n, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg("scalar_kernel", dt, "unsupported dtype");
}

// ==== unary ====
template <int OP> struct Un {
    template <class T> __device__ __forceinline__ T operator()(T a) const {
        if constexpr (OP == OP_NEG) return (T)(-a);
        else if constexpr (OP == OP_ABS) { if constexpr (!std::is_signed<T>::value) return a; else return a < 0 ? (T)(-a) : a; }
        else if constexpr (OP == OP_SIGN) {
            if constexpr (std::is_same<T, bool>::value) return a;
            else if constexpr (!std::is_signed<T>::value) return (T)(a > 0);
            else return is_nan(a) ? a : (T)((a > 0) - (a < 0));
        }
        else if constexpr ((OP == OP_ROUND || OP == OP_FLOOR) && !std::is_floating_point<T>::value) return a;
        else if constexpr (std::is_same<T, float>::value) {
            if constexpr (OP == OP_ROUND) return rintf(a);   // half to even, as numpy's rint and torch's round
            else if constexpr (OP == OP_FLOOR) return floorf(a);
            else if constexpr (OP == OP_ERF) return erff(a);
            else if constexpr (OP == OP_EXP) return expf(a);
            else if constexpr (OP == OP_LOG) return logf(a);
            else if constexpr (OP == OP_SQRT) return sqrtf(a);
            else if constexpr (OP == OP_SIN) return sinf(a);
            else if constexpr (OP == OP_COS) return cosf(a);
            else return tanhf(a);
        } else {
            if constexpr (OP == OP_ROUND) return rint(a);
            else if constexpr (OP == OP_FLOOR) return floor(a);
            else if constexpr (OP == OP_ERF) return erf(a);
            else if constexpr (OP == OP_EXP) return exp(a);
            else if constexpr (OP == OP_LOG) return log(a);
            else if constexpr (OP == OP_SQRT) return sqrt(a);
            else if constexpr (OP == OP_SIN) return sin(a);
            else if constexpr (OP == OP_COS) return cos(a);
            else return tanh(a);
        }
    }
};

template <class T, class F>
__global__ void unary_kernel(const T* __restrict__ a, T* __restrict__ out, i64 n, F f) {
    const i64 step = (i64)gridDim.x * blockDim.x * UNROLL;
    for (i64 base = (i64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < n; base += step) {
        T x[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) { i64 i = base + (i64)u * blockDim.x; if (i < n) x[u] = a[i]; }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) { i64 i = base + (i64)u * blockDim.x; if (i < n) out[i] = convert<T>(f(widen(x[u]))); }
    }
}

template <class T, int OP>
static int launch_un(const void* a, void* out, i64 n, int dt) {
    unary_kernel<T, Un<OP>><<<grid_for(n, 256, UNROLL), 256>>>((const T*)a, (T*)out, n, Un<OP>());
    char name[64]; snprintf(name, sizeof name, "unary_%s_kernel", UN_NAMES[OP]);
    return check_launch(name, dt);
}
template <class T>
static int un_t(int op, const void* a, void* out, i64 n, int dt) {
    switch (op) {
        case OP_NEG: return launch_un<T, OP_NEG>(a, out, n, dt);
        case OP_ABS: return launch_un<T, OP_ABS>(a, out, n, dt);
        case OP_SIGN: return launch_un<T, OP_SIGN>(a, out, n, dt);
        case OP_ROUND: return launch_un<T, OP_ROUND>(a, out, n, dt);
        case OP_FLOOR: return launch_un<T, OP_FLOOR>(a, out, n, dt);
    }
    if constexpr (std::is_floating_point<typename Wide<T>::type>::value) switch (op) {
        case OP_EXP: return launch_un<T, OP_EXP>(a, out, n, dt);
        case OP_LOG: return launch_un<T, OP_LOG>(a, out, n, dt);
        case OP_SQRT: return launch_un<T, OP_SQRT>(a, out, n, dt);
        case OP_SIN: return launch_un<T, OP_SIN>(a, out, n, dt);
        case OP_COS: return launch_un<T, OP_COS>(a, out, n, dt);
        case OP_TANH: return launch_un<T, OP_TANH>(a, out, n, dt);
        case OP_ERF: return launch_un<T, OP_ERF>(a, out, n, dt);
    }
    char msg[96];
    snprintf(msg, sizeof msg, "no unary kernel for op %s on this dtype", (op >= 0 && op < OP_NUN) ? UN_NAMES[op] : "?");
    return fail_msg("unary_kernel", dt, msg);
}
extern "C" int mc_unary(int op, int dt, const void* a, void* out, i64 n) {
    if (n <= 0) return 0;
#define X(code, T) case code: return un_t<T>(op, a, out, n, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg("unary_kernel", dt, "unsupported dtype");
}

// ==== where_cast ====
template <class T>
__global__ void where_kernel(const bool* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ out, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = c[i] ? a[i] : b[i];
}
template <class T> static int where_t(const void* c, const void* a, const void* b, void* out, i64 n, int dt) {
    where_kernel<T><<<grid_for(n, 256, 4), 256>>>((const bool*)c, (const T*)a, (const T*)b, (T*)out, n);
    return check_launch("where_kernel", dt);
}
extern "C" int mc_where(int dt, const void* c, const void* a, const void* b, void* out, i64 n) {
    if (n <= 0) return 0;
#define X(code, T) case code: return where_t<T>(c, a, b, out, n, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg("where_kernel", dt, "unsupported dtype");
}

// `convert` matches numpy's astype: float -> int truncates toward zero, anything -> bool is `!= 0`, a 16-bit float
// is the nearest one (ties to even).
template <class S, class D>
__global__ void cast_kernel(const S* __restrict__ a, D* __restrict__ out, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = convert<D>(a[i]);
}
template <class S, class D> static int cast_sd(const void* a, void* out, i64 n, int dt) {
    cast_kernel<S, D><<<grid_for(n, 256, 4), 256>>>((const S*)a, (D*)out, n);
    return check_launch("cast_kernel", dt);
}
template <class S> static int cast_s(int dto, const void* a, void* out, i64 n, int dt) {
#define X(code, D) case code: return cast_sd<S, D>(a, out, n, dt);
    switch (dto) { DT_CASES(X) }
#undef X
    return fail_msg("cast_kernel", dto, "unsupported target dtype");
}
extern "C" int mc_cast(int dti, int dto, const void* a, void* out, i64 n) {
    if (n <= 0) return 0;
#define X(code, S) case code: return cast_s<S>(dto, a, out, n, dti);
    switch (dti) { DT_CASES(X) }
#undef X
    return fail_msg("cast_kernel", dti, "unsupported source dtype");
}

// ==== reduce ====
// Reduce the last axis of a compact (outer, r) array. Three shapes of work, three mappings:
//   r <= 16:        one thread per row (a warp per row would leave most lanes idle);
//   r <= 2048:      one warp per row, lanes stride over the row, then a butterfly of warp shuffles;
//   larger r:       `splits` blocks per row; each block reduces a chunk with UNROLL independent accumulators
//                   per thread, then warp shuffles, then one value per warp through shared memory. With
//                   splits > 1 the partial results form a (outer, splits) array, reduced again by the same code.
// Each kernel reads T, combines in Op's type A (float32 for the 16-bit floats: a float16 accumulator would stop
// growing at 2048 when it adds ones) and stores O; the partial results of a split row stay in A.
template <class T> struct SumOp {
    typedef T A;
    __device__ static T init() { return T(0); }
    __device__ static T combine(T a, T b) { return (T)(a + b); }
};
template <class T> struct MaxOp {
    typedef T A;
    __device__ static T init() { return lowest<T>(); }
    __device__ static T combine(T a, T b) { return m_max(a, b); }
};

template <class T> __device__ __forceinline__ T shfl_xor(T v, int mask) {
    if constexpr (std::is_integral<T>::value && sizeof(T) < 4) return (T)__shfl_xor_sync(0xffffffffu, (int)v, mask);
    else if constexpr (std::is_same<T, i64>::value) return (i64)__shfl_xor_sync(0xffffffffu, (long long)v, mask);
    else return __shfl_xor_sync(0xffffffffu, v, mask);
}
template <class T, class Op> __device__ __forceinline__ T warp_reduce(T v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = Op::combine(v, shfl_xor(v, m));
    return v;
}

template <class T, class O, class Op>
__global__ void reduce_thread_kernel(const T* __restrict__ a, O* __restrict__ out, i64 outer, int r) {
    typedef typename Op::A A;
    for (i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x; row < outer; row += (i64)gridDim.x * blockDim.x) {
        A acc = Op::init();
        for (int j = 0; j < r; ++j) acc = Op::combine(acc, (A)widen(a[row * r + j]));
        out[row] = convert<O>(acc);
    }
}

template <class T, class O, class Op>
__global__ void reduce_warp_kernel(const T* __restrict__ a, O* __restrict__ out, i64 outer, i64 r) {
    typedef typename Op::A A;
    const int lane = threadIdx.x & 31;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < outer; row += nwarps) {
        const T* p = a + row * r;
        A acc = Op::init();
        for (i64 j = lane; j < r; j += 32) acc = Op::combine(acc, (A)widen(p[j]));
        acc = warp_reduce<A, Op>(acc);
        if (lane == 0) out[row] = convert<O>(acc);
    }
}

#define RED_THREADS 512
#define RED_UNROLL 8
template <class T, class O, class Op>
__global__ void __launch_bounds__(RED_THREADS) reduce_block_kernel(const T* __restrict__ a, O* __restrict__ out,
                                                                 i64 r, i64 chunk, int splits) {
    typedef typename Op::A A;
    __shared__ A warp_vals[RED_THREADS / 32];
    const i64 b = blockIdx.x, row = b / splits, s = b % splits;
    const i64 lo = s * chunk, hi = lo + chunk < r ? lo + chunk : r;
    const T* p = a + row * r;
    A acc[RED_UNROLL];
#pragma unroll
    for (int u = 0; u < RED_UNROLL; ++u) acc[u] = Op::init();
    i64 j = lo + threadIdx.x;
    for (; j + (RED_UNROLL - 1) * RED_THREADS < hi; j += RED_UNROLL * RED_THREADS) {
#pragma unroll
        for (int u = 0; u < RED_UNROLL; ++u) acc[u] = Op::combine(acc[u], (A)widen(p[j + u * RED_THREADS]));
    }
    for (; j < hi; j += RED_THREADS) acc[0] = Op::combine(acc[0], (A)widen(p[j]));
#pragma unroll
    for (int u = 1; u < RED_UNROLL; ++u) acc[0] = Op::combine(acc[0], acc[u]);
    A v = warp_reduce<A, Op>(acc[0]);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_vals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < RED_THREADS / 32 ? warp_vals[lane] : Op::init();
        v = warp_reduce<A, Op>(v);
        if (lane == 0) out[b] = convert<O>(v);
    }
}

template <class T, class O, class Op>
static int reduce_t(const T* a, O* out, i64 outer, i64 r, int dt, const char* name) {
    typedef typename Op::A A;
    if (r <= 16) {
        reduce_thread_kernel<T, O, Op><<<grid_for(outer, 256, 1), 256>>>(a, out, outer, (int)r);
        return check_launch(name, dt);
    }
    if (r <= 2048) {
        reduce_warp_kernel<T, O, Op><<<grid_for(outer * 32, 256, 1), 256>>>(a, out, outer, r);
        return check_launch(name, dt);
    }
    // enough blocks to fill the GPU a few times over, but never chunks of less than RED_THREADS * 16 elements
    i64 target = (i64)sm_count() * 8;
    i64 splits = (target + outer - 1) / outer;
    i64 max_splits = (r + RED_THREADS * 16 - 1) / (RED_THREADS * 16);
    if (splits > max_splits) splits = max_splits;
    if (splits < 1) splits = 1;
    i64 chunk = (r + splits - 1) / splits;
    if (splits == 1) {
        reduce_block_kernel<T, O, Op><<<(unsigned)outer, RED_THREADS>>>(a, out, r, chunk, 1);
        return check_launch(name, dt);
    }
    A* partial = nullptr;
    CUDA_TRY(cudaMallocAsync((void**)&partial, sizeof(A) * outer * splits, 0), name, dt);
    reduce_block_kernel<T, A, Op><<<(unsigned)(outer * splits), RED_THREADS>>>(a, partial, r, chunk, (int)splits);
    int rc = check_launch(name, dt);
    if (rc == 0) rc = reduce_t<A, O, Op>(partial, out, outer, splits, dt, name);
    cudaFreeAsync(partial, 0);
    return rc;
}
template <class T> static int reduce_kind(int kind, const void* a, void* out, i64 outer, i64 r, int dt) {
    typedef typename Wide<T>::type A;
    if (kind == 0) return reduce_t<T, T, SumOp<A>>((const T*)a, (T*)out, outer, r, dt, "reduce_sum_kernel");
    return reduce_t<T, T, MaxOp<A>>((const T*)a, (T*)out, outer, r, dt, "reduce_max_kernel");
}
extern "C" int mc_reduce(int kind, int dt, const void* a, void* out, i64 outer, i64 r) {
    if (outer <= 0) return 0;
    if (r <= 0) return fail_msg(kind ? "reduce_max_kernel" : "reduce_sum_kernel", dt, "empty reduction");
#define X(code, T) case code: return reduce_kind<T>(kind, a, out, outer, r, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg("reduce_kernel", dt, "unsupported dtype");
}

// ==== matmul_naive ====
// C[b] = A[b] @ B[b] with A (m, n), B (n, p), C (m, p), all compact. Batches loop over grid.z.
// One thread per output element. COALESCED picks which index the fast thread coordinate x walks:
//   true:  x -> column: a warp reads 32 neighbouring B elements and writes 32 neighbouring C elements;
//   false: x -> row:    a warp's B loads all hit one column (broadcast) but its A loads are n elements apart.
// Every matmul kernel accumulates in Wide<T>: the 16-bit floats multiply and add in float32 and round once.
template <class T, bool COALESCED>
__global__ void matmul_naive_kernel(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                    int m, int n, int p, i64 batch) {
    const int col = COALESCED ? blockIdx.x * blockDim.x + threadIdx.x : blockIdx.y * blockDim.y + threadIdx.y;
    const int row = COALESCED ? blockIdx.y * blockDim.y + threadIdx.y : blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= p) return;
    for (i64 bz = blockIdx.z; bz < batch; bz += gridDim.z) {
        const T* a = A + bz * m * n + (i64)row * n;
        const T* b = B + bz * n * p + col;
        typename Wide<T>::type acc = 0;
        for (int k = 0; k < n; ++k) acc += widen(a[k]) * widen(b[(i64)k * p]);
        C[bz * m * p + (i64)row * p + col] = convert<T>(acc);
    }
}

// ==== matmul_smem ====
// Tiled: a block computes a TS x TS tile of C. It marches along n in steps of TS; at each step its TS*TS threads
// copy one tile of A and one of B into shared memory (one element each, coalesced), synchronise, and every thread
// does TS multiply-adds out of shared memory. Each global element is now read m/TS (or p/TS) times, not m (or p).
template <class T, int TS>
__global__ void matmul_smem_kernel(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                   int m, int n, int p, i64 batch) {
    __shared__ T As[TS][TS];
    __shared__ T Bs[TS][TS + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TS + ty, col = blockIdx.x * TS + tx;
    for (i64 bz = blockIdx.z; bz < batch; bz += gridDim.z) {
        const T* a = A + bz * m * n;
        const T* b = B + bz * n * p;
        typename Wide<T>::type acc = 0;
        for (int k0 = 0; k0 < n; k0 += TS) {
            As[ty][tx] = (row < m && k0 + tx < n) ? a[(i64)row * n + k0 + tx] : zero<T>();
            Bs[ty][tx] = (k0 + ty < n && col < p) ? b[(i64)(k0 + ty) * p + col] : zero<T>();
            __syncthreads();
#pragma unroll
            for (int k = 0; k < TS; ++k) acc += widen(As[ty][k]) * widen(Bs[k][tx]);
            __syncthreads();
        }
        if (row < m && col < p) C[bz * m * p + (i64)row * p + col] = convert<T>(acc);
    }
}

// ==== matmul_reg ====
// Register blocking. A block of NT = (BM/TM)*(BN/TN) threads owns a BM x BN tile of C; each thread owns TM x TN
// outputs held in registers. Per step of BK along n:
//   1. the block stages A[BM x BK] (transposed, so a column of the A tile is contiguous) and B[BK x BN] in shared
//      memory; each thread moves 4 elements of each (one float4 load when VEC);
//   2. for each of the BK k's, a thread reads TM values of the A column and TN values of the B row into registers
//      and does the TM x TN outer product: TM + TN shared loads feed TM * TN multiply-adds.
// A thread's TM rows are two runs of TM/2 (one in each half of the tile), and likewise its TN columns, so that
// the threads of a warp read neighbouring 16-byte words of shared memory: no bank conflicts, vector loads.
template <class T, int BM, int BN, int BK, int TM, int TN, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), sizeof(T) == 4 ? 2 : 1)
matmul_reg_kernel(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int m, int n, int p, i64 batch) {
    constexpr int NT = (BM / TM) * (BN / TN);
    static_assert(BM * BK == 4 * NT && BK * BN == 4 * NT, "each thread stages 4 elements of A and 4 of B");
    constexpr int PAD = 4;
    __shared__ __align__(16) T As[BK][BM + PAD];
    __shared__ __align__(16) T Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    // staging coordinates: A tile rows ar, k-offsets ak..ak+3; B tile row br, columns bc..bc+3
    const int ar = tid / (BK / 4), ak = (tid % (BK / 4)) * 4;
    const int br = tid / (BN / 4), bc = (tid % (BN / 4)) * 4;
    for (i64 bz = blockIdx.z; bz < batch; bz += gridDim.z) {
        const T* a = A + bz * m * n;
        const T* b = B + bz * n * p;
        typedef typename Wide<T>::type A;
        A acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = A(0);
        for (int k0 = 0; k0 < n; k0 += BK) {
            {   // stage A (transposed) and B
                const int gr = row0 + ar, gk = k0 + ak;
                T v[4];
                bool done = false;
                if constexpr (VEC) {   // only float32 takes the float4 path
                    if (gr < m && gk < n) {
                        float4 f = *reinterpret_cast<const float4*>(a + (i64)gr * n + gk);
                        v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w; done = true;
                    }
                }
                if (!done) {
#pragma unroll
                    for (int q = 0; q < 4; ++q) v[q] = (gr < m && gk + q < n) ? a[(i64)gr * n + gk + q] : zero<T>();
                }
#pragma unroll
                for (int q = 0; q < 4; ++q) As[ak + q][ar] = v[q];
                const int gk2 = k0 + br, gc = col0 + bc;
                if (VEC && gk2 < n && gc < p) {
                    *reinterpret_cast<float4*>(&Bs[br][bc]) = *reinterpret_cast<const float4*>(b + (i64)gk2 * p + gc);
                } else {
#pragma unroll
                    for (int q = 0; q < 4; ++q) Bs[br][bc + q] = (gk2 < n && gc + q < p) ? b[(i64)gk2 * p + gc + q] : zero<T>();
                }
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                A ra[TM], rb[TN];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int i = 0; i < TM / 2; ++i) ra[h * TM / 2 + i] = widen(As[k][h * BM / 2 + trow * TM / 2 + i]);
#pragma unroll
                    for (int j = 0; j < TN / 2; ++j) rb[h * TN / 2 + j] = widen(Bs[k][h * BN / 2 + tcol * TN / 2 + j]);
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
            }
            __syncthreads();
        }
        T* c = C + bz * m * p;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int gr = row0 + (i / (TM / 2)) * BM / 2 + trow * TM / 2 + i % (TM / 2);
            if (gr >= m) continue;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int gc = col0 + (j / (TN / 2)) * BN / 2 + tcol * TN / 2 + j % (TN / 2);
                if (gc < p) c[(i64)gr * p + gc] = convert<T>(acc[i][j]);
            }
        }
    }
}

// ==== matmul_wmma ====
// Tensor cores through WMMA: a warp multiplies 16x16x16 tiles ("fragments") of float16, bfloat16 or int8 in one
// instruction sequence, accumulating in float32 (int32 for int8). A block of 8 warps owns a 128 x 128 tile of C;
// warp (wm, wn) owns 64 x 32 of it: 4 x 2 accumulator fragments. Per step of 32 along n the block stages the A
// and B tiles in shared memory with 16-byte loads, while the next step's tiles are loaded into registers.
// The tiles are stored in slabs 16 elements wide (As[k/16][row][k%16], Bs[col/16][k][col%16]) padded to LD
// elements per row, so that every fragment starts on the 32-byte boundary WMMA asks for, whatever the dtype.
// Edges are padded with zeros, which add nothing, so any shape works. bfloat16 WMMA needs sm_80, int8 sm_72 and
// float16 sm_70: the body compiles for sm_80 and later; the host checks the GPU's compute capability.
#include <mma.h>
static inline unsigned cdiv(i64 a, i64 b) { return (unsigned)((a + b - 1) / b); }
static inline unsigned zdim(i64 batch) { return (unsigned)(batch < 65535 ? batch : 65535); }
#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_THREADS 256
template <class T> struct TcAcc { typedef float type; };
template <> struct TcAcc<int8_t> { typedef int type; };
// MINB: blocks per SM the compiler must leave room for: 2 caps a thread at 128 registers (16 warps per SM to hide
// latency, a few bytes spilled), 1 lets it keep everything in registers (8 warps per SM); `algo` picks (wmma, wmma1).
template <class T, class TO, bool VEC, int MINB>
__global__ void __launch_bounds__(TC_THREADS, MINB) matmul_wmma_kernel(const T* __restrict__ A, const T* __restrict__ B,
                                                                 TO* __restrict__ C, int m, int n, int p, i64 batch) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    typedef typename TcAcc<T>::type Acc;
    constexpr int VW = 16 / sizeof(T), LD = 16 + VW;   // elements per 16-byte vector; padded slab row
    constexpr int AV = TC_BM * TC_BK / VW / TC_THREADS, BV = TC_BK * TC_BN / VW / TC_THREADS;
    __shared__ __align__(32) T As[TC_BK / 16][TC_BM][LD];
    __shared__ __align__(32) T Bs[TC_BN / 16][TC_BK][LD];
    __shared__ __align__(32) Acc Cs[TC_THREADS / 32][16 * 16];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wm = warp / 4, wn = warp % 4;
    const int row0 = blockIdx.y * TC_BM, col0 = blockIdx.x * TC_BN;
    for (i64 bz = blockIdx.z; bz < batch; bz += gridDim.z) {
        const T* a = A + bz * m * n;
        const T* b = B + bz * n * p;
        uint4 ra[AV], rb[BV];
        auto load = [&](int k0) {   // global -> registers: the A and B tiles at k0, zeros past the edges
#pragma unroll
            for (int q = 0; q < AV; ++q) {
                const int v = tid + q * TC_THREADS, r = v / (TC_BK / VW), kv = (v % (TC_BK / VW)) * VW;
                const int gr = row0 + r, gk = k0 + kv;
                if (VEC && gr < m && gk < n) ra[q] = *reinterpret_cast<const uint4*>(a + (i64)gr * n + gk);
                else {
                    T t[VW];
#pragma unroll
                    for (int e = 0; e < VW; ++e) t[e] = (gr < m && gk + e < n) ? a[(i64)gr * n + gk + e] : zero<T>();
                    memcpy(&ra[q], t, 16);
                }
            }
#pragma unroll
            for (int q = 0; q < BV; ++q) {
                const int v = tid + q * TC_THREADS, k = v / (TC_BN / VW), cv = (v % (TC_BN / VW)) * VW;
                const int gk = k0 + k, gc = col0 + cv;
                if (VEC && gk < n && gc < p) rb[q] = *reinterpret_cast<const uint4*>(b + (i64)gk * p + gc);
                else {
                    T t[VW];
#pragma unroll
                    for (int e = 0; e < VW; ++e) t[e] = (gk < n && gc + e < p) ? b[(i64)gk * p + gc + e] : zero<T>();
                    memcpy(&rb[q], t, 16);
                }
            }
        };
        auto stage = [&]() {   // registers -> shared memory slabs
#pragma unroll
            for (int q = 0; q < AV; ++q) {
                const int v = tid + q * TC_THREADS, r = v / (TC_BK / VW), kv = (v % (TC_BK / VW)) * VW;
                *reinterpret_cast<uint4*>(&As[kv / 16][r][kv % 16]) = ra[q];
            }
#pragma unroll
            for (int q = 0; q < BV; ++q) {
                const int v = tid + q * TC_THREADS, k = v / (TC_BN / VW), cv = (v % (TC_BN / VW)) * VW;
                *reinterpret_cast<uint4*>(&Bs[cv / 16][k][cv % 16]) = rb[q];
            }
        };
        wmma::fragment<wmma::accumulator, 16, 16, 16, Acc> acc[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], Acc(0));
        load(0);
        stage();
        __syncthreads();
        for (int k0 = 0; k0 < n; k0 += TC_BK) {
            const bool more = k0 + TC_BK < n;
            if (more) load(k0 + TC_BK);   // in flight while the tensor cores work on this step
#pragma unroll
            for (int ks = 0; ks < TC_BK / 16; ++ks) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[4];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[2];
#pragma unroll
                for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], &As[ks][wm * 64 + 16 * i][0], LD);
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &Bs[wn * 2 + j][16 * ks][0], LD);
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            }
            __syncthreads();
            if (more) { stage(); __syncthreads(); }
        }
        // each fragment goes through the warp's 16 x 16 scratch, then every lane converts and stores 8 outputs
        TO* c = C + bz * m * p;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                wmma::store_matrix_sync(&Cs[warp][0], acc[i][j], 16, wmma::mem_row_major);
                __syncwarp();
#pragma unroll
                for (int t = 0; t < 8; ++t) {
                    const int e = lane * 8 + t, gr = row0 + wm * 64 + 16 * i + e / 16, gc = col0 + wn * 32 + 16 * j + e % 16;
                    if (gr < m && gc < p) c[(i64)gr * p + gc] = convert<TO>(Cs[warp][e]);
                }
                __syncwarp();
            }
    }
#endif
}

// Tensor cores are there from sm_70, but this library's WMMA kernels need sm_80 (bfloat16): ask the GPU once.
static int g_tc = -1;
static bool tensor_cores() {
    if (g_tc < 0) {
        int dev = 0, major = 0;
        g_tc = cudaGetDevice(&dev) == cudaSuccess &&
               cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 8;
        cudaGetLastError();
    }
    return g_tc == 1;
}
template <class T, class TO>
static int launch_wmma(const T* a, const T* b, TO* c, int m, int n, int p, i64 batch, int dt, const char* name,
                       int minb = 2) {
    if (!tensor_cores()) return fail_msg(name, dt, "the WMMA kernels need a GPU of compute capability 8.0 or later");
    constexpr int VW = 16 / sizeof(T);
    // 16-byte loads need every row of A and B to start on a 16-byte boundary
    const bool vec = n % VW == 0 && p % VW == 0 && ((uintptr_t)a % 16) == 0 && ((uintptr_t)b % 16) == 0;
    dim3 grid(cdiv(p, TC_BN), cdiv(m, TC_BM), zdim(batch));
    if (minb == 1) {
        if (vec) matmul_wmma_kernel<T, TO, true, 1><<<grid, TC_THREADS>>>(a, b, c, m, n, p, batch);
        else matmul_wmma_kernel<T, TO, false, 1><<<grid, TC_THREADS>>>(a, b, c, m, n, p, batch);
    } else {
        if (vec) matmul_wmma_kernel<T, TO, true, 2><<<grid, TC_THREADS>>>(a, b, c, m, n, p, batch);
        else matmul_wmma_kernel<T, TO, false, 2><<<grid, TC_THREADS>>>(a, b, c, m, n, p, batch);
    }
    return check_launch(name, dt);
}

// ==== matmul_host ====
// algo: 0 auto, 1 naive (uncoalesced mapping), 2 naive (coalesced), 3 shared-memory tiles, 4 register-blocked 64x64,
// 5 register-blocked 128x128, 6 tensor cores (WMMA, float16 and bfloat16; 7 the same with one block per SM). Auto takes the tensor cores for the
// 16-bit floats when the GPU has them, else the biggest register-blocked tile that still gives every SM a block.

template <class T, int BM, int BN, int BK, int TM, int TN>
static int launch_reg(const T* a, const T* b, T* c, int m, int n, int p, i64 batch, int dt, bool vec) {
    dim3 grid(cdiv(p, BN), cdiv(m, BM), zdim(batch));
    constexpr int NT = (BM / TM) * (BN / TN);
    if constexpr (std::is_same<T, float>::value) {
        if (vec) { matmul_reg_kernel<T, BM, BN, BK, TM, TN, true><<<grid, NT>>>(a, b, c, m, n, p, batch);
                   return check_launch("matmul_reg_kernel", dt); }
    }
    matmul_reg_kernel<T, BM, BN, BK, TM, TN, false><<<grid, NT>>>(a, b, c, m, n, p, batch);
    return check_launch("matmul_reg_kernel", dt);
}

template <class T>
static int matmul_launch(int algo, const T* a, const T* b, T* c, i64 batch, int m, int n, int p, int dt);

// grid.y (row tiles) is limited to 65535: a single very tall matrix is multiplied in horizontal bands.
template <class T>
static int matmul_t(int algo, const void* A, const void* B, void* C, i64 batch, int m, int n, int p, int dt) {
    const int band = 65535 * 8;   // rows per launch: within the limit for every kernel (the smallest tile is 8 rows)
    if (m <= band) return matmul_launch<T>(algo, (const T*)A, (const T*)B, (T*)C, batch, m, n, p, dt);
    if (batch != 1) return fail_msg("matmul_kernel", dt, "batched matrices with more than 524280 rows are not supported");
    for (int r0 = 0; r0 < m; r0 += band)
        TRY(matmul_launch<T>(algo, (const T*)A + (i64)r0 * n, (const T*)B, (T*)C + (i64)r0 * p, 1,
                             m - r0 < band ? m - r0 : band, n, p, dt));
    return 0;
}

template <class T>
static int matmul_launch(int algo, const T* a, const T* b, T* c, i64 batch, int m, int n, int p, int dt) {
    constexpr bool low = std::is_same<T, f16>::value || std::is_same<T, bf16>::value;
    if (algo == 0 && low && tensor_cores()) algo = 6;
    if (algo == 0) {
        i64 tiles128 = (i64)cdiv(m, 128) * cdiv(p, 128) * batch, tiles64 = (i64)cdiv(m, 64) * cdiv(p, 64) * batch;
        algo = tiles128 >= sm_count() ? 5 : (tiles64 >= sm_count() / 2 ? 4 : 3);
    }
    // float4 loads need rows that start on 16-byte boundaries
    const bool vec = (n % 4 == 0) && (p % 4 == 0);
    switch (algo) {
        case 1: case 2: {
            dim3 block(32, 8);
            if (algo == 2) {
                dim3 grid(cdiv(p, 32), cdiv(m, 8), zdim(batch));
                matmul_naive_kernel<T, true><<<grid, block>>>(a, b, c, m, n, p, batch);
            } else {
                dim3 grid(cdiv(m, 32), cdiv(p, 8), zdim(batch));
                matmul_naive_kernel<T, false><<<grid, block>>>(a, b, c, m, n, p, batch);
            }
            return check_launch("matmul_naive_kernel", dt);
        }
        case 3: {
            dim3 grid(cdiv(p, 32), cdiv(m, 32), zdim(batch)), block(32, 32);
            matmul_smem_kernel<T, 32><<<grid, block>>>(a, b, c, m, n, p, batch);
            return check_launch("matmul_smem_kernel", dt);
        }
        case 4: return launch_reg<T, 64, 64, 16, 4, 4>(a, b, c, m, n, p, batch, dt, vec);
        case 5: return launch_reg<T, 128, 128, 8, 8, 8>(a, b, c, m, n, p, batch, dt, vec);
        case 6: case 7:
            if constexpr (low) return launch_wmma<T, T>(a, b, c, m, n, p, batch, dt, "matmul_wmma_kernel", algo == 7 ? 1 : 2);
            return fail_msg("matmul_wmma_kernel", dt, "the tensor-core matmul takes float16 or bfloat16 "
                                                      "(int8 goes through matmul_int8)");
    }
    return fail_msg("matmul_kernel", dt, "unknown matmul algorithm");
}
extern "C" int mc_matmul(int dt, int algo, const void* a, const void* b, void* out, i64 batch, i64 m, i64 n, i64 p) {
    if (batch <= 0 || m <= 0 || p <= 0) return 0;
    if (m > INT_MAX || n > INT_MAX || p > INT_MAX) return fail_msg("matmul_kernel", dt, "a matrix dimension exceeds 2^31");
    if (n == 0) return mc_fill(dt, out, batch * m * p, 0, 0);
    switch (dt) {
        case DT_F32: return matmul_t<float>(algo, a, b, out, batch, (int)m, (int)n, (int)p, dt);
        case DT_F64: return matmul_t<double>(algo, a, b, out, batch, (int)m, (int)n, (int)p, dt);
        case DT_I64: return matmul_t<i64>(algo, a, b, out, batch, (int)m, (int)n, (int)p, dt);
        case DT_I32: return matmul_t<int32_t>(algo, a, b, out, batch, (int)m, (int)n, (int)p, dt);
        case DT_F16: return matmul_t<f16>(algo, a, b, out, batch, (int)m, (int)n, (int)p, dt);
        case DT_BF16: return matmul_t<bf16>(algo, a, b, out, batch, (int)m, (int)n, (int)p, dt);
    }
    return fail_msg("matmul_kernel", dt, "unsupported dtype (float32, float64, float16, bfloat16, int64 and int32 have "
                                         "one; int8 goes through mc_matmul_int8)");
}

// ==== matmul_int8 ====
// C (m, p) int32 = A (m, n) int8 or uint8 @ B (n, p) int8, all compact: the integer matmul of quantized inference.
// `__dp4a(x, y, c)` multiplies the four signed bytes of x with those of y and adds the four products to c in one
// instruction, so the k axis travels packed four bytes to a 32-bit word:
//   As[r][w] holds A[row0 + r][k0 + 4w .. 4w + 3], Bs[w][c] holds B[k0 + 4w .. 4w + 3][col0 + c].
// A block of 256 threads owns a 64 x 64 tile of C; thread (ty, tx) owns rows ty + 16i and columns tx + 16j
// (i, j < 4), so that a warp reads 16 consecutive words of Bs and two rows of As (no bank conflicts) and writes
// runs of 16 neighbouring outputs. Padding past the matrix edges is the byte 0, which adds nothing.
// A uint8 activation u has no signed-by-signed dp4a: the kernel feeds u - 128 (flip the top bit: u ^ 0x80 is
// u - 128 as a signed byte) and adds 128 * sum_k B[k][c] back, itself a dp4a of B's word with 0x01010101.
// Every product and sum is an exact int32 as long as n * 255 * 128 < 2^31 (the host checks).
#define I8_BM 64
#define I8_BN 64
#define I8_BK 32
template <bool A_U8>
__global__ void __launch_bounds__(256) matmul_int8_kernel(const uint8_t* __restrict__ A, const int8_t* __restrict__ B,
                                                          int32_t* __restrict__ C, int m, int n, int p) {
    __shared__ int As[I8_BM][I8_BK / 4 + 1];   // +1: rows of As start in different banks
    __shared__ int Bs[I8_BK / 4][I8_BN];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int row0 = blockIdx.y * I8_BM, col0 = blockIdx.x * I8_BN;
    int acc[4][4], bsum[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        bsum[i] = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0;
    }
    for (int k0 = 0; k0 < n; k0 += I8_BK) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {   // each thread packs two words of A and two of B
            const int w = tid + q * 256;
            const int r = w / (I8_BK / 4), ka = k0 + (w % (I8_BK / 4)) * 4, gr = row0 + r;
            const int kb = w / I8_BN, c = w % I8_BN, gc = col0 + c;
            unsigned va = 0, vb = 0;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                unsigned x = (gr < m && ka + e < n) ? A[(i64)gr * n + ka + e] : 0u;
                if (A_U8 && gr < m && ka + e < n) x ^= 0x80u;
                va |= x << (8 * e);
                const int gk = k0 + 4 * kb + e;
                vb |= (unsigned)(uint8_t)((gk < n && gc < p) ? B[(i64)gk * p + gc] : 0) << (8 * e);
            }
            As[r][w % (I8_BK / 4)] = (int)va;
            Bs[kb][c] = (int)vb;
        }
        __syncthreads();
#pragma unroll
        for (int kw = 0; kw < I8_BK / 4; ++kw) {
            int ra[4], rb[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) { ra[i] = As[ty + 16 * i][kw]; rb[i] = Bs[kw][tx + 16 * i]; }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = __dp4a(ra[i], rb[j], acc[i][j]);
            if (A_U8) {
#pragma unroll
                for (int j = 0; j < 4; ++j) bsum[j] = __dp4a(0x01010101, rb[j], bsum[j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int gr = row0 + ty + 16 * i;
        if (gr >= m) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int gc = col0 + tx + 16 * j;
            if (gc < p) C[(i64)gr * p + gc] = acc[i][j] + (A_U8 ? 128 * bsum[j] : 0);
        }
    }
}

// algo: 0 auto (tensor cores for int8 A when the GPU has them, else dp4a), 1 dp4a, 2 tensor cores (WMMA, int8 A only:
// the tensor cores multiply signed by signed bytes or unsigned by unsigned, not mixed), 3 the same, one block per SM.
extern "C" int mc_matmul_int8(int algo, int dta, const void* a, const void* b, void* out, i64 m, i64 n, i64 p) {
    if (dta != DT_I8 && dta != DT_U8) return fail_msg("matmul_int8_kernel", dta, "A must be int8 or uint8");
    if (m <= 0 || p <= 0) return 0;
    if (n > 65793) return fail_msg("matmul_int8_kernel", dta, "n > 65793 could overflow the int32 accumulators");
    if (m > INT_MAX || p > INT_MAX) return fail_msg("matmul_int8_kernel", dta, "a matrix dimension exceeds 2^31");
    if (algo == 0) algo = (dta == DT_I8 && tensor_cores()) ? 2 : 1;
    if (algo == 2 || algo == 3) {
        if (dta != DT_I8) return fail_msg("matmul_int8_wmma_kernel", dta, "the tensor-core int8 matmul takes int8 A "
                                                                           "(uint8 goes through the dp4a kernel)");
        if (n == 0) return mc_fill(DT_I32, out, m * p, 0, 0);
        const i64 band = (i64)65535 * TC_BM;
        for (i64 r0 = 0; r0 < m; r0 += band)
            TRY((launch_wmma<int8_t, int32_t>((const int8_t*)a + r0 * n, (const int8_t*)b, (int32_t*)out + r0 * p,
                                             (int)(m - r0 < band ? m - r0 : band), (int)n, (int)p, 1, dta,
                                             "matmul_int8_wmma_kernel", algo == 3 ? 1 : 2)));
        return 0;
    }
    if (algo != 1) return fail_msg("matmul_int8_kernel", dta, "unknown int8 matmul algorithm");
    const i64 band = (i64)65535 * I8_BM;   // grid.y is at most 65535: very tall A goes in bands of rows
    for (i64 r0 = 0; r0 < m; r0 += band) {
        const int rows = (int)(m - r0 < band ? m - r0 : band);
        dim3 grid(cdiv(p, I8_BN), cdiv(rows, I8_BM));
        const uint8_t* ar = (const uint8_t*)a + r0 * n;
        int32_t* cr = (int32_t*)out + r0 * p;
        if (dta == DT_U8) matmul_int8_kernel<true><<<grid, 256>>>(ar, (const int8_t*)b, cr, rows, (int)n, (int)p);
        else matmul_int8_kernel<false><<<grid, 256>>>(ar, (const int8_t*)b, cr, rows, (int)n, (int)p);
        TRY(check_launch("matmul_int8_kernel", dta));
    }
    return 0;
}

// ==== indexing ====
// gather:      out[o, j, i] = a[o, idx[j], i]        one thread per output element
// scatter_add: out[o, idx[j], i] += a[o, j, i]       one thread per input element; repeated indices collide, so
//                                                    the add is an atomicAdd (for bool, "add" is "or": a plain store
//                                                    of true, which every colliding writer agrees on)
template <class T>
__global__ void gather_kernel(const T* __restrict__ a, const i64* __restrict__ idx, T* __restrict__ out,
                              i64 total, i64 axis_len, i64 inner, i64 k) {
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 i = e % inner, j = (e / inner) % k, o = e / (inner * k);
        out[e] = a[(o * axis_len + idx[j]) * inner + i];
    }
}
template <class T> __device__ __forceinline__ void atomic_add(T* p, T v) {
    if constexpr (std::is_same<T, i64>::value)
        atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
    else if constexpr (std::is_same<T, bool>::value) { if (v) *p = true; }
    else atomicAdd(p, v);
}
template <class T>
__global__ void scatter_add_kernel(const T* __restrict__ a, const i64* __restrict__ idx, T* __restrict__ out,
                                   i64 total, i64 axis_len, i64 inner, i64 k) {
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 i = e % inner, j = (e / inner) % k, o = e / (inner * k);
        atomic_add(out + (o * axis_len + idx[j]) * inner + i, a[e]);
    }
}
// scatter_add needs an atomic add of the dtype: CUDA has one for these
template <class T> struct has_atomic_add : std::integral_constant<bool, std::is_same<T, float>::value ||
    std::is_same<T, double>::value || std::is_same<T, i64>::value || std::is_same<T, int32_t>::value ||
    std::is_same<T, bool>::value> {};
template <class T>
static int index_t(bool scatter, const void* a, const void* idx, void* out, i64 outer, i64 axis_len, i64 inner, i64 k, int dt) {
    i64 total = outer * k * inner;
    if (total <= 0) return 0;
    unsigned grid = grid_for(total, 256, 4);
    if (scatter) {
        if constexpr (has_atomic_add<T>::value) {
            scatter_add_kernel<T><<<grid, 256>>>((const T*)a, (const i64*)idx, (T*)out, total, axis_len, inner, k);
            return check_launch("scatter_add_kernel", dt);
        }
        return fail_msg("scatter_add_kernel", dt, "unsupported dtype (float32, float64, int64, int32 and bool have one)");
    }
    gather_kernel<T><<<grid, 256>>>((const T*)a, (const i64*)idx, (T*)out, total, axis_len, inner, k);
    return check_launch("gather_kernel", dt);
}
static int index_entry(bool scatter, int dt, const void* a, const void* idx, void* out, i64 outer, i64 axis_len,
                       i64 inner, i64 k) {
#define X(code, T) case code: return index_t<T>(scatter, a, idx, out, outer, axis_len, inner, k, dt);
    switch (dt) { DT_CASES(X) }
#undef X
    return fail_msg(scatter ? "scatter_add_kernel" : "gather_kernel", dt, "unsupported dtype");
}
extern "C" int mc_gather(int dt, const void* a, const void* idx, void* out, i64 outer, i64 axis_len, i64 inner, i64 k) {
    return index_entry(false, dt, a, idx, out, outer, axis_len, inner, k);
}
extern "C" int mc_scatter_add(int dt, const void* a, const void* idx, void* out, i64 outer, i64 axis_len, i64 inner, i64 k) {
    return index_entry(true, dt, a, idx, out, outer, axis_len, inner, k);
}

// ==== rows ====
// Fused row kernels: softmax, log-softmax, the softmax cross-entropy and layer norm over the last axis of a compact
// (rows, cols) array, each one launch. A row belongs to one warp (cols <= 1024: 8 rows per block of 256 threads)
// or to one block of 512 threads (longer rows). Softmax's first pass is "online": each thread keeps a running max m
// and a running sum s of exp(x - m), rescaling s when m grows, so one read of the row gives both; the pairs of
// the threads then combine the same way. A second read (from L1/L2: the row was just read) writes the result.
// Everything is computed in float32 (16-bit floats are widened on load and rounded once on store).
#define ROW_WARP_MAX 1024
#define ROW_BLOCK 512
struct MS { float m, s; };
__device__ __forceinline__ MS ms_combine(MS a, MS b) {
    if (a.m != a.m || b.m != b.m) return MS{NAN, 0.f};   // a NaN anywhere in the row: the row's result is NaN
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return MS{m, 0.f};
    return MS{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ MS ms_add(MS a, float x) {   // one more element x into the running pair
    if (x > a.m) return MS{x, a.s * expf(a.m - x) + 1.f};
    if (x == -INFINITY || a.m != a.m) return a;            // exp(-inf) adds nothing; a NaN stays
    if (x != x) return MS{x, a.s};
    return MS{a.m, a.s + expf(x - a.m)};
}
// All-reduce over the group that owns a row: a warp (BLOCK == 0) or the whole block. Every thread gets the result.
template <int BLOCK> __device__ __forceinline__ MS group_ms(MS v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) {
        MS o{__shfl_xor_sync(0xffffffffu, v.m, k), __shfl_xor_sync(0xffffffffu, v.s, k)};
        v = ms_combine(v, o);
    }
    if constexpr (BLOCK > 0) {
        __shared__ MS part[BLOCK / 32];
        __syncthreads();   // the previous row's readers are done with `part`
        if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
        __syncthreads();
        v = part[0];
        for (int w = 1; w < BLOCK / 32; ++w) v = ms_combine(v, part[w]);
    }
    return v;
}
template <int BLOCK> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    if constexpr (BLOCK > 0) {
        __shared__ float part[BLOCK / 32];
        __syncthreads();
        if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
        __syncthreads();
        v = 0.f;
        for (int w = 0; w < BLOCK / 32; ++w) v += part[w];
    }
    return v;
}
// The rows of this group and the lane of this thread within it: BLOCK == 0, a warp per row; else a block per row.
#define ROW_LOOP(BLOCK, rows)                                                                                        \
    const int lane_ = BLOCK ? threadIdx.x : (threadIdx.x & 31), nl_ = BLOCK ? BLOCK : 32;                          \
    const i64 g0_ = BLOCK ? blockIdx.x : ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));               \
    const i64 gs_ = BLOCK ? gridDim.x : ((i64)gridDim.x * (blockDim.x >> 5));                                        \
    for (i64 row = g0_; row < rows; row += gs_)

template <class T, int BLOCK>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, i64 rows, i64 cols, bool log) {
    ROW_LOOP(BLOCK, rows) {
        const T* xr = x + row * cols;
        T* yr = y + row * cols;
        MS v{-INFINITY, 0.f};
        for (i64 j = lane_; j < cols; j += nl_) v = ms_add(v, (float)widen(xr[j]));
        v = group_ms<BLOCK>(v);
        if (log) {
            const float sh = v.m + logf(v.s);
            for (i64 j = lane_; j < cols; j += nl_) yr[j] = convert<T>((float)widen(xr[j]) - sh);
        } else {
            const float inv = 1.f / v.s;
            for (i64 j = lane_; j < cols; j += nl_) yr[j] = convert<T>(expf((float)widen(xr[j]) - v.m) * inv);
        }
    }
}
// backward from the output y and the upstream gradient g:
//   softmax:     dx = y * (g - sum(g * y))          log-softmax: dx = g - exp(y) * sum(g)
template <class T, int BLOCK>
__global__ void softmax_rows_bwd_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                        i64 rows, i64 cols, bool log) {
    ROW_LOOP(BLOCK, rows) {
        const T* yr = y + row * cols; const T* gr = g + row * cols;
        T* dr = dx + row * cols;
        float acc = 0.f;
        for (i64 j = lane_; j < cols; j += nl_) acc += log ? (float)widen(gr[j]) : (float)widen(gr[j]) * (float)widen(yr[j]);
        acc = group_sum<BLOCK>(acc);
        for (i64 j = lane_; j < cols; j += nl_) {
            const float yv = widen(yr[j]), gv = widen(gr[j]);
            dr[j] = convert<T>(log ? gv - expf(yv) * acc : yv * (gv - acc));
        }
    }
}
// Softmax cross-entropy of logits z and int64 labels. Forward: loss[row] = log(sum exp(z - m)) + m - z[label], a
// label outside 0..cols-1 gives NaN and counts in *bad. Backward: dx = (softmax(z) - onehot(label)) * g[0] * scale,
// the softmax recomputed from z (one more read of the row instead of a stored (rows, cols) probability array).
template <class T, int BLOCK>
__global__ void xent_rows_kernel(const T* __restrict__ z, const i64* __restrict__ lab, T* __restrict__ loss,
                                 int* __restrict__ bad, i64 rows, i64 cols) {
    ROW_LOOP(BLOCK, rows) {
        const T* zr = z + row * cols;
        MS v{-INFINITY, 0.f};
        for (i64 j = lane_; j < cols; j += nl_) v = ms_add(v, (float)widen(zr[j]));
        v = group_ms<BLOCK>(v);
        if (lane_ == 0) {
            const i64 t = lab[row];
            if (t < 0 || t >= cols) { atomicAdd(bad, 1); loss[row] = convert<T>(NAN); }
            else loss[row] = convert<T>(v.m + logf(v.s) - (float)widen(zr[t]));
        }
    }
}
template <class T, int BLOCK>
__global__ void xent_rows_bwd_kernel(const T* __restrict__ z, const i64* __restrict__ lab, const T* __restrict__ g,
                                     T* __restrict__ dx, i64 rows, i64 cols, float scale) {
    const float gs = (float)widen(g[0]) * scale;
    ROW_LOOP(BLOCK, rows) {
        const T* zr = z + row * cols;
        T* dr = dx + row * cols;
        MS v{-INFINITY, 0.f};
        for (i64 j = lane_; j < cols; j += nl_) v = ms_add(v, (float)widen(zr[j]));
        v = group_ms<BLOCK>(v);
        const float inv = 1.f / v.s;
        const i64 t = lab[row];
        for (i64 j = lane_; j < cols; j += nl_)
            dr[j] = convert<T>((expf((float)widen(zr[j]) - v.m) * inv - (j == t ? 1.f : 0.f)) * gs);
    }
}
// Layer norm: y = (x - mean) * rstd * w + b with rstd = 1 / sqrt(var + eps); mean and rstd (float32) are kept for
// the backward. The variance is a second pass over the row, sum((x - mean)^2): no cancellation, unlike E[x^2]-mean^2.
template <class T, int BLOCK>
__global__ void layer_norm_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                       T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                                       i64 rows, i64 cols, float eps) {
    ROW_LOOP(BLOCK, rows) {
        const T* xr = x + row * cols;
        T* yr = y + row * cols;
        float s = 0.f;
        for (i64 j = lane_; j < cols; j += nl_) s += (float)widen(xr[j]);
        const float mu = group_sum<BLOCK>(s) / (float)cols;
        float q = 0.f;
        for (i64 j = lane_; j < cols; j += nl_) { const float d = (float)widen(xr[j]) - mu; q += d * d; }
        const float r = rsqrtf(group_sum<BLOCK>(q) / (float)cols + eps);
        for (i64 j = lane_; j < cols; j += nl_)
            yr[j] = convert<T>(((float)widen(xr[j]) - mu) * r * (float)widen(w[j]) + (float)widen(b[j]));
        if (lane_ == 0) { mean[row] = mu; rstd[row] = r; }
    }
}
// dx = (gh - mean(gh) - xhat * mean(gh * xhat)) * rstd, with gh = g * w and xhat = (x - mean) * rstd
template <class T, int BLOCK>
__global__ void layer_norm_rows_bwd_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                                           const float* __restrict__ mean, const float* __restrict__ rstd,
                                           T* __restrict__ dx, i64 rows, i64 cols) {
    ROW_LOOP(BLOCK, rows) {
        const T* gr = g + row * cols; const T* xr = x + row * cols;
        T* dr = dx + row * cols;
        const float mu = mean[row], r = rstd[row];
        float a = 0.f, c = 0.f;
        for (i64 j = lane_; j < cols; j += nl_) {
            const float gh = (float)widen(gr[j]) * (float)widen(w[j]);
            a += gh; c += gh * ((float)widen(xr[j]) - mu) * r;
        }
        a = group_sum<BLOCK>(a) / (float)cols;
        c = group_sum<BLOCK>(c) / (float)cols;
        for (i64 j = lane_; j < cols; j += nl_) {
            const float gh = (float)widen(gr[j]) * (float)widen(w[j]);
            dr[j] = convert<T>((gh - a - ((float)widen(xr[j]) - mu) * r * c) * r);
        }
    }
}
// dw = sum over rows of g * xhat, db = sum over rows of g: columns, not rows. A block of 32 x 8 threads owns 32
// columns (a warp reads 32 neighbours of a row: coalesced) and a slice of the rows (grid.y slices); its 8 row
// lanes add up in shared memory. With several slices, each writes float32 partial sums and a second kernel
// adds the slices in order (deterministic: no atomics).
template <class T, bool FINAL>
__global__ void layer_norm_wb_kernel(const T* __restrict__ g, const T* __restrict__ x, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, void* __restrict__ dw, void* __restrict__ db,
                                     i64 rows, i64 cols) {
    __shared__ float sw[8][33], sb[8][33];
    const i64 c = (i64)blockIdx.x * 32 + threadIdx.x;
    float aw = 0.f, ab = 0.f;
    if (c < cols)
        for (i64 r = (i64)blockIdx.y * 8 + threadIdx.y; r < rows; r += (i64)gridDim.y * 8) {
            const float gv = widen(g[r * cols + c]);
            aw += gv * ((float)widen(x[r * cols + c]) - mean[r]) * rstd[r];
            ab += gv;
        }
    sw[threadIdx.y][threadIdx.x] = aw; sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        for (int k = 1; k < 8; ++k) { aw += sw[k][threadIdx.x]; ab += sb[k][threadIdx.x]; }
        if (FINAL) { ((T*)dw)[c] = convert<T>(aw); ((T*)db)[c] = convert<T>(ab); }
        else { ((float*)dw)[blockIdx.y * cols + c] = aw; ((float*)db)[blockIdx.y * cols + c] = ab; }
    }
}
template <class T>
__global__ void layer_norm_wb_sum_kernel(const float* __restrict__ pw, const float* __restrict__ pb, T* __restrict__ dw,
                                         T* __restrict__ db, int splits, i64 cols) {
    for (i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (i64)gridDim.x * blockDim.x) {
        float aw = 0.f, ab = 0.f;
        for (int s = 0; s < splits; ++s) { aw += pw[s * cols + c]; ab += pb[s * cols + c]; }
        dw[c] = convert<T>(aw); db[c] = convert<T>(ab);
    }
}

// host side: pick a warp or a block per row, launch, check
#define ROW_LAUNCH(KERNEL, T, NAME, ...)                                                                             \
    do {                                                                                                             \
        if (cols <= ROW_WARP_MAX) KERNEL<T, 0><<<grid_for(rows * 32, 256, 1), 256>>>(__VA_ARGS__);                   \
        else KERNEL<T, ROW_BLOCK><<<(unsigned)(rows < (i64)sm_count() * 64 ? rows : (i64)sm_count() * 64),          \
                                    ROW_BLOCK>>>(__VA_ARGS__);                                                       \
        return check_launch(NAME, dt);                                                                               \
    } while (0)
#define ROW_DTYPES(X) X(DT_F32, float) X(DT_F16, f16) X(DT_BF16, bf16)
#define ROW_CHECK(NAME)                                                                                              \
    if (rows <= 0) return 0;                                                                                         \
    if (cols <= 0) return fail_msg(NAME, dt, "rows of length 0");

template <class T> static int softmax_rows_t(const void* x, void* y, i64 rows, i64 cols, int log, int dt) {
    ROW_LAUNCH(softmax_rows_kernel, T, "softmax_rows_kernel", (const T*)x, (T*)y, rows, cols, log != 0);
}
extern "C" int mc_softmax_rows(int dt, const void* x, void* y, i64 rows, i64 cols, int log) {
    ROW_CHECK("softmax_rows_kernel")
#define X(code, T) case code: return softmax_rows_t<T>(x, y, rows, cols, log, dt);
    switch (dt) { ROW_DTYPES(X) }
#undef X
    return fail_msg("softmax_rows_kernel", dt, "unsupported dtype (float32, float16 and bfloat16 have one)");
}
template <class T> static int softmax_bwd_t(const void* y, const void* g, void* dx, i64 rows, i64 cols, int log, int dt) {
    ROW_LAUNCH(softmax_rows_bwd_kernel, T, "softmax_rows_bwd_kernel", (const T*)y, (const T*)g, (T*)dx, rows, cols,
               log != 0);
}
extern "C" int mc_softmax_rows_bwd(int dt, const void* y, const void* g, void* dx, i64 rows, i64 cols, int log) {
    ROW_CHECK("softmax_rows_bwd_kernel")
#define X(code, T) case code: return softmax_bwd_t<T>(y, g, dx, rows, cols, log, dt);
    switch (dt) { ROW_DTYPES(X) }
#undef X
    return fail_msg("softmax_rows_bwd_kernel", dt, "unsupported dtype (float32, float16 and bfloat16 have one)");
}
template <class T> static int xent_t(const void* z, const void* lab, void* loss, int* bad, i64 rows, i64 cols, int dt) {
    ROW_LAUNCH(xent_rows_kernel, T, "xent_rows_kernel", (const T*)z, (const i64*)lab, (T*)loss, bad, rows, cols);
}
// *bad (device int32) is set to the number of labels out of range
extern "C" int mc_xent_rows(int dt, const void* z, const void* lab, void* loss, void* bad, i64 rows, i64 cols) {
    CUDA_TRY(cudaMemsetAsync(bad, 0, sizeof(int), 0), "xent_rows_kernel", dt);
    ROW_CHECK("xent_rows_kernel")
#define X(code, T) case code: return xent_t<T>(z, lab, loss, (int*)bad, rows, cols, dt);
    switch (dt) { ROW_DTYPES(X) }
#undef X
    return fail_msg("xent_rows_kernel", dt, "unsupported dtype (float32, float16 and bfloat16 have one)");
}
template <class T> static int xent_bwd_t(const void* z, const void* lab, const void* g, void* dx, i64 rows, i64 cols,
                                         float scale, int dt) {
    ROW_LAUNCH(xent_rows_bwd_kernel, T, "xent_rows_bwd_kernel", (const T*)z, (const i64*)lab, (const T*)g, (T*)dx,
               rows, cols, scale);
}
extern "C" int mc_xent_rows_bwd(int dt, const void* z, const void* lab, const void* g, void* dx, i64 rows, i64 cols,
                                double scale) {
    ROW_CHECK("xent_rows_bwd_kernel")
#define X(code, T) case code: return xent_bwd_t<T>(z, lab, g, dx, rows, cols, (float)scale, dt);
    switch (dt) { ROW_DTYPES(X) }
#undef X
    return fail_msg("xent_rows_bwd_kernel", dt, "unsupported dtype (float32, float16 and bfloat16 have one)");
}
template <class T> static int ln_t(const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                                   i64 rows, i64 cols, float eps, int dt) {
    ROW_LAUNCH(layer_norm_rows_kernel, T, "layer_norm_rows_kernel", (const T*)x, (const T*)w, (const T*)b, (T*)y,
               (float*)mean, (float*)rstd, rows, cols, eps);
}
extern "C" int mc_layer_norm_rows(int dt, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                                  i64 rows, i64 cols, double eps) {
    ROW_CHECK("layer_norm_rows_kernel")
#define X(code, T) case code: return ln_t<T>(x, w, b, y, mean, rstd, rows, cols, (float)eps, dt);
    switch (dt) { ROW_DTYPES(X) }
#undef X
    return fail_msg("layer_norm_rows_kernel", dt, "unsupported dtype (float32, float16 and bfloat16 have one)");
}
template <class T> static int ln_wb_t(const void* g, const void* x, const float* mean, const float* rstd, void* dw,
                                      void* db, i64 rows, i64 cols, int dt) {
    // enough row slices to give every SM a few blocks, each slice at least 64 rows
    const unsigned cb = cdiv(cols, 32);
    i64 splits = ((i64)sm_count() * 4 + cb - 1) / cb, most = (rows + 63) / 64;
    if (splits > most) splits = most;
    if (splits > 65535) splits = 65535;
    if (splits < 1) splits = 1;
    if (splits == 1) {
        layer_norm_wb_kernel<T, true><<<dim3(cb, 1), dim3(32, 8)>>>((const T*)g, (const T*)x, mean, rstd, dw, db, rows, cols);
        return check_launch("layer_norm_wb_kernel", dt);
    }
    float* part = nullptr;
    CUDA_TRY(cudaMallocAsync((void**)&part, sizeof(float) * 2 * splits * cols, 0), "layer_norm_wb_kernel", dt);
    layer_norm_wb_kernel<T, false><<<dim3(cb, (unsigned)splits), dim3(32, 8)>>>((const T*)g, (const T*)x, mean, rstd,
                                                                               part, part + splits * cols, rows, cols);
    int rc = check_launch("layer_norm_wb_kernel", dt);
    if (rc == 0) {
        layer_norm_wb_sum_kernel<T><<<grid_for(cols, 256, 1), 256>>>(part, part + splits * cols, (T*)dw, (T*)db,
                                                                     (int)splits, cols);
        rc = check_launch("layer_norm_wb_sum_kernel", dt);
    }
    cudaFreeAsync(part, 0);
    return rc;
}
template <class T> static int ln_bwd_t(const void* g, const void* x, const void* w, const void* mean, const void* rstd,
                                       void* dx, void* dw, void* db, i64 rows, i64 cols, int dt) {
    auto dx_launch = [&]() -> int {
        ROW_LAUNCH(layer_norm_rows_bwd_kernel, T, "layer_norm_rows_bwd_kernel", (const T*)g, (const T*)x, (const T*)w,
                   (const float*)mean, (const float*)rstd, (T*)dx, rows, cols);
    };
    TRY(dx_launch());
    return ln_wb_t<T>(g, x, (const float*)mean, (const float*)rstd, dw, db, rows, cols, dt);
}
extern "C" int mc_layer_norm_rows_bwd(int dt, const void* g, const void* x, const void* w, const void* mean,
                                      const void* rstd, void* dx, void* dw, void* db, i64 rows, i64 cols) {
    ROW_CHECK("layer_norm_rows_bwd_kernel")
#define X(code, T) case code: return ln_bwd_t<T>(g, x, w, mean, rstd, dx, dw, db, rows, cols, dt);
    switch (dt) { ROW_DTYPES(X) }
#undef X
    return fail_msg("layer_norm_rows_bwd_kernel", dt, "unsupported dtype (float32, float16 and bfloat16 have one)");
}
