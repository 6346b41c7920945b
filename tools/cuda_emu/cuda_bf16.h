// CPU emulation of CUDA's bfloat16 storage type and its conversions (what minima's kernels use of cuda_bf16.h):
// the top 16 bits of a float32, rounded to nearest even. g++ 12 has no __bf16, so the rounding is done on the bits.
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>
struct __nv_bfloat16 { unsigned short __x; };
inline float __bfloat162float(__nv_bfloat16 h) { uint32_t u = (uint32_t)h.__x << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if (std::isnan(f)) { r.__x = (unsigned short)((u >> 16) | 0x40); return r; }   // stays a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u);   // round to nearest, ties to even
    r.__x = (unsigned short)(u >> 16);
    return r;
}
// double -> bfloat16 in one rounding: round to float32 "to odd" first (an inexact result keeps its last bit set),
// which carries enough information for the second rounding to be the correct one.
inline __nv_bfloat16 __double2bfloat16(double d) {
    float f = (float)d;
    if (std::isfinite(f) && (double)f != d) {
        uint32_t u; std::memcpy(&u, &f, 4);
        if (!(u & 1u)) { f = std::nextafter(f, d > (double)f ? INFINITY : -INFINITY); }
    }
    return __float2bfloat16_rn(f);
}
