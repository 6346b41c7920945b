// CPU emulation of CUDA's float16 storage type and its conversions (what minima's kernels use of cuda_fp16.h).
// The conversions are the compiler's _Float16 ones: IEEE round to nearest even, subnormals, inf and NaN, exactly
// as the GPU's cvt.rn.f16 instructions. No arithmetic operators: the kernels compute in float32 (`widen`), and an
// operator used by mistake fails to compile here as it would risk differing on the GPU.
#pragma once
#include <cstring>
struct __half { unsigned short __x; };
inline __half emu_half_from(_Float16 h) { __half r; std::memcpy(&r.__x, &h, 2); return r; }
inline float __half2float(__half h) { _Float16 f; std::memcpy(&f, &h.__x, 2); return (float)f; }
inline __half __float2half_rn(float f) { return emu_half_from((_Float16)f); }
inline __half __double2half(double d) { return emu_half_from((_Float16)d); }
