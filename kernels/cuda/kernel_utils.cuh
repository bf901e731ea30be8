// Device helpers shared by the GPT-2 CUDA kernels: grid sizing, warp reductions and the fixed-order column sum.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace strata::cuda::detail {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks for a grid-stride loop over n elements with `threads` per block: enough to fill the GPU, never 0 for
// n > 0, and far below the 2^31 - 1 limit of gridDim.x.
inline unsigned grid_for(std::size_t n, int threads) {
  const std::size_t blocks = (n + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  return static_cast<unsigned>(std::min<std::size_t>(blocks, std::size_t{1} << 16));
}

// Butterfly reductions: every lane gets the result. All 32 lanes must call them (no divergent callers).
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Block-wide max and sum over kWarps warps: warp butterflies, then every thread combines the warps' results in warp
// order, so all threads get the same value. Every thread of the block must call them; scratch (kWarps values) is
// reusable when they return.
template <int kWarps>
__device__ inline float block_max(float v, float* scratch) {
  v = warp_max(v);
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, scratch[w]);
  __syncthreads();
  return r;
}

template <int kWarps>
__device__ inline double block_sum(double v, double* scratch) {
  v = warp_sum(v);
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  double r = 0;
  for (int w = 0; w < kWarps; ++w) r += scratch[w];
  __syncthreads();
  return r;
}

// Column reductions run in blocks of (kWarpSize columns) x (kColumnRowLanes row lanes): lane ty of column c sums
// rows ty, ty + kColumnRowLanes, ... in double, then column_total adds the lanes' partials in lane order. The
// partition depends only on these constants, so results are the same on every run (no atomics).
constexpr int kColumnRowLanes = 16;

// The column's total on threadIdx.y == 0 (0 elsewhere). Every thread of the block must call it; scratch is
// reusable when it returns.
__device__ inline double column_total(double partial, double (*scratch)[kWarpSize]) {
  scratch[threadIdx.y][threadIdx.x] = partial;
  __syncthreads();
  double total = 0;
  if (threadIdx.y == 0)
    for (int k = 0; k < kColumnRowLanes; ++k) total += scratch[k][threadIdx.x];
  __syncthreads();
  return total;
}

}  // namespace strata::cuda::detail
