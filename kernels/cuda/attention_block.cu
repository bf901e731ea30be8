// One block of queries against one block of keys (runtime/context/attention_kernels.h), for the decode path's
// attention over the KV cache: rows anywhere in memory (Rows' strides), causal by global position. Grouped-query
// attention: query head h reads kv head h / (heads / kv_heads) of k and v.
//
// One warp per (batch, head, query row): per visible key the lanes split the head's D columns for the dot product
// (a warp butterfly gives every lane the score), keep the online softmax's running max and sum, and each lane
// accumulates its own columns of the output (d = lane, lane + 32, ...: up to kMaxPerLane of them, so D <= 256).
// Then out = O / l and lse = m + log l; a query that sees no key gets out 0 and lse -inf. A decode step has one
// query row per sequence and a few hundred to a few thousand keys, so the warp walks them in order; the weights, not
// this loop, bound the step.
#include <cmath>
#include <cstddef>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 4;

__global__ __launch_bounds__(kWarpsPerBlock* kWarpSize) void attention_block_forward_kernel(AttentionBlockArgs a,
                                                                                            float scale) {
  const int warp = static_cast<int>(blockIdx.x) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (warp >= a.batch * a.heads * a.q_rows) return;  // the whole warp leaves together
  const int i = warp % a.q_rows, h = (warp / a.q_rows) % a.heads, b = warp / (a.q_rows * a.heads);
  const int D = a.width / a.heads;
  const std::size_t kv_col = static_cast<std::size_t>(h / (a.heads / a.kv_heads)) * D;
  const int per_lane = (D + kWarpSize - 1) / kWarpSize;
  const int visible = min(a.kv_rows, a.q_pos + i - a.kv_pos + 1);
  const float* q = a.q + b * a.q_bs + static_cast<std::size_t>(i) * a.q_rs + static_cast<std::size_t>(h) * D;
  float qv[kMaxPerLane], acc[kMaxPerLane];
  for (int t = 0; t < kMaxPerLane; ++t) {
    const int d = lane + t * kWarpSize;
    qv[t] = t < per_lane && d < D ? q[d] : 0.0f;
    acc[t] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j < visible; ++j) {
    const std::size_t row = static_cast<std::size_t>(j);
    const float* k = a.k + b * a.k_bs + row * a.k_rs + kv_col;
    const float* v = a.v + b * a.v_bs + row * a.v_rs + kv_col;
    float partial = 0.0f;
    for (int t = 0; t < per_lane; ++t) {
      const int d = lane + t * kWarpSize;
      if (d < D) partial += qv[t] * k[d];
    }
    const float s = warp_sum(partial) * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), p = expf(s - m_new);
    l = l * correction + p;
    for (int t = 0; t < per_lane; ++t) {
      const int d = lane + t * kWarpSize;
      acc[t] = acc[t] * correction + (d < D ? p * v[d] : 0.0f);
    }
    m = m_new;
  }
  float* out = a.out + b * a.out_bs + static_cast<std::size_t>(i) * a.out_rs + static_cast<std::size_t>(h) * D;
  for (int t = 0; t < per_lane; ++t) {
    const int d = lane + t * kWarpSize;
    if (d < D) out[d] = visible > 0 ? acc[t] / l : 0.0f;
  }
  if (lane == 0)
    a.lse[b * a.lse_bs + static_cast<std::size_t>(h) * a.lse_hs + i] = visible > 0 ? m + logf(l) : -INFINITY;
}

// dst (+)= src over `columns` floats of each of batch x rows rows, one thread an element.
__global__ void copy_rows_kernel(float* dst, std::size_t dst_rs, std::size_t dst_bs, const float* src,
                                 std::size_t src_rs, std::size_t src_bs, int rows, int columns, std::size_t n,
                                 bool add) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t c = e % static_cast<std::size_t>(columns), r = e / static_cast<std::size_t>(columns);
    const std::size_t i = r % static_cast<std::size_t>(rows), b = r / static_cast<std::size_t>(rows);
    const float x = src[b * src_bs + i * src_rs + c];
    float* d = dst + b * dst_bs + i * dst_rs + c;
    *d = add ? *d + x : x;
  }
}

}  // namespace

cudaError_t launch_attention_block_forward(const AttentionBlockArgs& a, cudaStream_t stream) {
  const int warps = a.batch * a.heads * a.q_rows;
  if (warps == 0) return cudaSuccess;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.width / a.heads));
  const unsigned blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  attention_block_forward_kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(a, scale);
  return cudaGetLastError();
}

cudaError_t launch_copy_rows(float* dst, std::size_t dst_rs, std::size_t dst_bs, const float* src, std::size_t src_rs,
                             std::size_t src_bs, int batch, int rows, int columns, bool add, cudaStream_t stream) {
  const std::size_t n =
      static_cast<std::size_t>(batch) * static_cast<std::size_t>(rows) * static_cast<std::size_t>(columns);
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  copy_rows_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, dst_rs, dst_bs, src, src_rs, src_bs, rows,
                                                                   columns, n, add);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
