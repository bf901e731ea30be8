// The matmuls' helper kernels (the products themselves are cuBLAS calls in blas_cuda.cc): bias rows for the
// forward (f32 rows from a bf16 bias for the bf16 forward), the fixed-order column sum for dbias.
#include <cstddef>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kThreads = 256;

__device__ inline float convert(float x, float*) { return x; }
__device__ inline float convert(__nv_bfloat16 x, float*) { return __bfloat162float(x); }
__device__ inline __nv_bfloat16 convert(__nv_bfloat16 x, __nv_bfloat16*) { return x; }

template <typename Out, typename In>
__global__ void fill_rows_kernel(Out* out, const In* row, int C, std::size_t total) {
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[idx] = convert(row[idx % C], out);
}

// out[n, c] = row[c] converted, for N rows of C.
template <typename Out, typename In>
cudaError_t fill_rows(Out* out, const In* row, int N, int C, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(N) * C;
  if (total == 0) return cudaSuccess;
  fill_rows_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(out, row, C, total);
  return cudaGetLastError();
}

__global__ void add_column_sums_kernel(float* dst, const float* src, int N, int C) {
  __shared__ double scratch[kColumnRowLanes][kWarpSize];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  double acc = 0;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRowLanes) acc += src[static_cast<std::size_t>(n) * C + c];
  acc = column_total(acc, scratch);  // every thread takes part (syncs inside)
  if (threadIdx.y == 0 && c < C) dst[c] += static_cast<float>(acc);
}

}  // namespace

cudaError_t launch_fill_rows(float* out, const float* row, int N, int C, cudaStream_t stream) {
  return fill_rows(out, row, N, C, stream);
}

cudaError_t launch_fill_rows(__nv_bfloat16* out, const __nv_bfloat16* row, int N, int C, cudaStream_t stream) {
  return fill_rows(out, row, N, C, stream);
}

cudaError_t launch_fill_rows(float* out, const __nv_bfloat16* row, int N, int C, cudaStream_t stream) {
  return fill_rows(out, row, N, C, stream);
}

cudaError_t launch_add_column_sums(float* dst, const float* src, int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return cudaSuccess;
  const dim3 block(kWarpSize, kColumnRowLanes);
  add_column_sums_kernel<<<(C + kWarpSize - 1) / kWarpSize, block, 0, stream>>>(dst, src, N, C);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
