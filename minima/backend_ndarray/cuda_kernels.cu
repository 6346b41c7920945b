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

// ==== matmul_host ====
// algo: 0 auto, 1 naive (uncoalesced mapping), 2 naive (coalesced), 3 shared-memory tiles, 4 register-blocked 64x64,
// 5 register-blocked 128x128. Auto picks the biggest register-blocked tile that still gives every SM a block.
static inline unsigned cdiv(i64 a, i64 b) { return (unsigned)((a + b - 1) / b); }
static inline unsigned zdim(i64 batch) { return (unsigned)(batch < 65535 ? batch : 65535); }

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

extern "C" int mc_matmul_int8(int dta, const void* a, const void* b, void* out, i64 m, i64 n, i64 p) {
    if (dta != DT_I8 && dta != DT_U8) return fail_msg("matmul_int8_kernel", dta, "A must be int8 or uint8");
    if (m <= 0 || p <= 0) return 0;
    if (n > 65793) return fail_msg("matmul_int8_kernel", dta, "n > 65793 could overflow the int32 accumulators");
    if (m > INT_MAX || p > INT_MAX) return fail_msg("matmul_int8_kernel", dta, "a matrix dimension exceeds 2^31");
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
