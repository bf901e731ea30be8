// Launchers of the CUDA flat-op kernels (flat_ops_kernels.cu). Plain C++17 with CUDA runtime types only, so that
// nvcc never sees fmt: errors come back as cudaError_t and flat_ops_cuda.cc turns them into strata::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace strata::cuda_flat {

// Float storage types, numbered as strata::DType's first three (kF32, kBF16, kF16).
enum Type : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

cudaError_t convert(const void* src, Type src_type, void* dst, Type dst_type, std::size_t n, cudaStream_t s);
cudaError_t accumulate_f32(float* dst, const void* src, Type src_type, std::size_t n, cudaStream_t s);
cudaError_t add_f32_into(void* dst, Type dst_type, const float* src, std::size_t n, cudaStream_t s);
cudaError_t scale_f32(float* x, std::size_t n, float factor, cudaStream_t s);
// *out += sum of x[i]^2 in double, in an order fixed by n (two passes through `scratch`, kSumBlocks doubles of
// device memory used by one stream at a time), so the result does not vary between runs.
constexpr unsigned kSumBlocks = 1024;
cudaError_t add_sum_squares(const float* x, std::size_t n, double* out, double* scratch, cudaStream_t s);

}  // namespace strata::cuda_flat
