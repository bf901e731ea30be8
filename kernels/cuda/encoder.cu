// Token + position embedding forward and backward on the GPU (see kernels/cuda/ops.h).
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kThreads = 256;

__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe, int T,
                                       int C, std::size_t total) {
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t row = idx / C;  // b * T + t
    const int c = static_cast<int>(idx % C);
    const int t = static_cast<int>(row % T);
    out[idx] = wte[static_cast<std::size_t>(tokens[row]) * C + c] + wpe[static_cast<std::size_t>(t) * C + c];
  }
}

// dwpe[t, c] += dout[0, t, c] + dout[1, t, c] + ...: one thread per (t, c), batch rows in order (as the CPU).
__global__ void encoder_dwpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const std::size_t total = static_cast<std::size_t>(T) * C;
  const std::size_t batch_stride = total;
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float acc = dwpe[idx];
    for (int b = 0; b < B; ++b) acc += dout[b * batch_stride + idx];
    dwpe[idx] = acc;
  }
}

// dwte rows are shared by repeated tokens. Without atomics: thread (c, g) owns column c of every token v with
// v % kTokenGroups == g and walks all rows in order, so each dwte element has one writer and sums its rows in
// the CPU's order. Every thread reads every token id (a broadcast load); only its own group's rows cost more.
constexpr int kTokenGroups = 64;
constexpr int kGroupsPerBlock = 8;

__global__ void encoder_dwte_kernel(float* dwte, const float* dout, const int32_t* tokens, int N, int C) {
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  const int g = blockIdx.y * kGroupsPerBlock + threadIdx.y;
  if (c >= C) return;
  for (int i = 0; i < N; ++i) {
    const int32_t tok = tokens[i];
    if (tok % kTokenGroups != g) continue;  // uniform across the warp: its lanes share g and tok
    dwte[static_cast<std::size_t>(tok) * C + c] += dout[static_cast<std::size_t>(i) * C + c];
  }
}

}  // namespace

cudaError_t launch_encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                                   int T, int C, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(B) * T * C;
  if (total == 0) return cudaSuccess;
  encoder_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(out, tokens, wte, wpe, T, C, total);
  return cudaGetLastError();
}

cudaError_t launch_encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                                    int C, cudaStream_t stream) {
  if (B == 0 || T == 0 || C == 0) return cudaSuccess;
  const std::size_t positions = static_cast<std::size_t>(T) * C;
  encoder_dwpe_kernel<<<grid_for(positions, kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
  if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  const dim3 block(kWarpSize, kGroupsPerBlock);
  const dim3 grid((C + kWarpSize - 1) / kWarpSize, kTokenGroups / kGroupsPerBlock);
  encoder_dwte_kernel<<<grid, block, 0, stream>>>(dwte, dout, tokens, B * T, C);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
