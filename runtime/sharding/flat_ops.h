// Element-wise operations the sharding runtime applies to flat buffers in host memory (the CPU backend):
// dtype conversion, f32 accumulation, sums of squares, scaling.
#pragma once

#include <cstddef>

#include "runtime/core/dtype.h"

namespace strata {

// dst[i] = (dst_dtype) src[i]; float types only. src == dst is allowed when the dtypes are equal (a no-op).
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n);
// dst[i] += (f32) src[i]
void accumulate_f32(float* dst, const void* src, DType src_dtype, std::size_t n);
// dst[i] = (dst_dtype) ((f32) dst[i] + src[i]): adds f32 values into a buffer of any float dtype, rounding once.
void add_f32_into(void* dst, DType dst_dtype, const float* src, std::size_t n);
// sum of x[i]^2 in double (non-finite inputs make it non-finite)
double sum_squares(const float* x, std::size_t n);
void scale_f32(float* x, std::size_t n, float factor);

}  // namespace strata
