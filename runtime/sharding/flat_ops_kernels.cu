// CUDA kernels of FlatOps: element-wise conversion, accumulation, scaling, a deterministic sum of squares.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "runtime/sharding/flat_ops_kernels.h"

namespace strata::cuda_flat {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const void* p, Type t, std::size_t i) {
  switch (t) {
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Round to nearest even, as the CPU's f32_to_bf16 / f32_to_f16.
__device__ __forceinline__ void store(void* p, Type t, std::size_t i, float x) {
  switch (t) {
    case kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); break;
    case kF16: static_cast<__half*>(p)[i] = __float2half_rn(x); break;
    default: static_cast<float*>(p)[i] = x; break;
  }
}

__global__ void convert_kernel(const void* src, Type st, void* dst, Type dt, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    store(dst, dt, i, load(src, st, i));
}

__global__ void accumulate_kernel(float* dst, const void* src, Type st, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    dst[i] += load(src, st, i);
}

__global__ void add_into_kernel(void* dst, Type dt, const float* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    store(dst, dt, i, load(dst, dt, i) + src[i]);
}

__global__ void scale_kernel(float* x, std::size_t n, float f) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    x[i] *= f;
}

// Sums of squares in two passes with a grid that depends only on n: each block sums a fixed stride of elements into
// partial[block] (a fixed tree in shared memory), then one block adds the partials in a fixed order. The same
// order every run, so the result does not vary.
__device__ void block_sum_into(double acc, double* dst, bool add) {
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *dst = add ? *dst + partial[0] : partial[0];
}

__global__ void sum_squares_partial_kernel(const float* x, std::size_t n, double* partials) {
  double acc = 0;
  for (std::size_t i = blockIdx.x * std::size_t{kThreads} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * kThreads)
    acc += static_cast<double>(x[i]) * x[i];
  block_sum_into(acc, partials + blockIdx.x, false);
}

__global__ void sum_partials_kernel(const double* partials, unsigned count, double* out) {
  double acc = 0;
  for (unsigned i = threadIdx.x; i < count; i += kThreads) acc += partials[i];
  block_sum_into(acc, out, true);
}

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + kThreads - 1) / kThreads, 65535));
}

}  // namespace

cudaError_t convert(const void* src, Type src_type, void* dst, Type dst_type, std::size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  convert_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, src_type, dst, dst_type, n);
  return cudaGetLastError();
}

cudaError_t accumulate_f32(float* dst, const void* src, Type src_type, std::size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, src_type, n);
  return cudaGetLastError();
}

cudaError_t add_f32_into(void* dst, Type dst_type, const float* src, std::size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  add_into_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, dst_type, src, n);
  return cudaGetLastError();
}

cudaError_t scale_f32(float* x, std::size_t n, float factor, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, factor);
  return cudaGetLastError();
}

cudaError_t add_sum_squares(const float* x, std::size_t n, double* out, double* scratch, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + kThreads - 1) / kThreads, kSumBlocks));
  sum_squares_partial_kernel<<<blocks, kThreads, 0, s>>>(x, n, scratch);
  sum_partials_kernel<<<1, kThreads, 0, s>>>(scratch, blocks, out);
  return cudaGetLastError();
}

}  // namespace strata::cuda_flat
