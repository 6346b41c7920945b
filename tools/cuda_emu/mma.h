// CPU emulation of the warp-level matrix multiply (WMMA, nvcuda::wmma) that minima's tensor-core kernels use.
// On a GPU a fragment is spread over the 32 lanes of a warp in an unspecified way. Here every thread's fragment
// holds the whole tile, and load/mma/store act on all of it: the 32 lanes of a warp compute identical fragments,
// so their (redundant) stores agree. Products are widened (float for the 16-bit floats, int for int8) and summed
// over k in order into the accumulator's type, as the tensor cores accumulate in float32 / int32.
#pragma once
#include "cuda_fp16.h"
#include "cuda_bf16.h"
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
inline float emu_wide(__half x) { return __half2float(x); }
inline float emu_wide(__nv_bfloat16 x) { return __bfloat162float(x); }
inline int emu_wide(signed char x) { return x; }
inline int emu_wide(unsigned char x) { return x; }
inline float emu_wide(float x) { return x; }
inline int emu_wide(int x) { return x; }
template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { static constexpr int R = M, C = K; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { static constexpr int R = K, C = N; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { static constexpr int R = M, C = N; };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static constexpr int R = dims<Use, M, N, K>::R, C = dims<Use, M, N, K>::C, num_elements = R * C;
    T x[R * C];
};
template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, T v) { for (auto& e : f.x) e = v; }
template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
    typedef fragment<Use, M, N, K, T, L> F;
    for (int r = 0; r < F::R; ++r)
        for (int c = 0; c < F::C; ++c)
            f.x[r * F::C + c] = std::is_same<L, col_major>::value ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t l) {
    for (int r = 0; r < M; ++r)
        for (int c = 0; c < N; ++c) f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t l) {
    for (int r = 0; r < M; ++r)
        for (int c = 0; c < N; ++c) (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
}
template <int M, int N, int K, class Ta, class Tb, class La, class Lb, class Acc>
inline void mma_sync(fragment<accumulator, M, N, K, Acc>& d, const fragment<matrix_a, M, N, K, Ta, La>& a,
                     const fragment<matrix_b, M, N, K, Tb, Lb>& b, const fragment<accumulator, M, N, K, Acc>& c) {
    typedef decltype(emu_wide(a.x[0])) W;   // widen each element once (a float16 conversion is a libgcc call)
    W wa[M * K], wb[K * N];
    for (int e = 0; e < M * K; ++e) wa[e] = emu_wide(a.x[e]);
    for (int e = 0; e < K * N; ++e) wb[e] = emu_wide(b.x[e]);
    Acc out[M * N];
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            Acc s = c.x[i * N + j];
            for (int k = 0; k < K; ++k) s += (Acc)(wa[i * K + k] * wb[k * N + j]);
            out[i * N + j] = s;
        }
    for (int e = 0; e < M * N; ++e) d.x[e] = out[e];
}
} }  // namespace nvcuda::wmma
