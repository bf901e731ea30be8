// RMSNorm forward and backward on the GPU: one warp per row, row sums in double as on the CPU (kernels/cpu/rmsnorm.h).
#include <cstddef>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                       float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int n = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;  // the whole warp leaves together
  const float* x = inp + static_cast<std::size_t>(n) * C;
  double sum_sq = 0;  // each square is exact in double, as on the CPU
  for (int c = lane; c < C; c += kWarpSize) sum_sq += static_cast<double>(x[c]) * x[c];
  sum_sq = warp_sum(sum_sq);
  const float s = static_cast<float>(1.0 / sqrt(sum_sq / C + eps));
  float* o = out + static_cast<std::size_t>(n) * C;
  for (int c = lane; c < C; c += kWarpSize) o[c] = x[c] * s * weight[c];  // (x * rstd) * weight, the CPU's order
  if (lane == 0) rstd[n] = s;
}

// dinp += rstd * (g - xhat * mean(g * xhat)), g = dout * weight, xhat = x * rstd (rebuilt in f32 as the forward's).
__global__ void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int n = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const std::size_t row = static_cast<std::size_t>(n) * C;
  const float s = rstd[n];
  double gx_sum = 0;
  for (int c = lane; c < C; c += kWarpSize)
    gx_sum += static_cast<double>(dout[row + c] * weight[c]) * (inp[row + c] * s);
  const float gx_mean = static_cast<float>(warp_sum(gx_sum) / C);
  for (int c = lane; c < C; c += kWarpSize)
    dinp[row + c] += (dout[row + c] * weight[c] - inp[row + c] * s * gx_mean) * s;
}

// dweight[c] += sum over n of dout * xhat: the fixed-order column reduction of layernorm's dweight.
__global__ void rmsnorm_dweight_kernel(float* dweight, const float* dout, const float* inp, const float* rstd, int N,
                                       int C) {
  __shared__ double scratch[kColumnRowLanes][kWarpSize];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  double dw = 0;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRowLanes) {
      const std::size_t i = static_cast<std::size_t>(n) * C + c;
      dw += static_cast<double>(dout[i]) * (inp[i] * rstd[n]);
    }
  dw = column_total(dw, scratch);  // every thread takes part (syncs inside)
  if (threadIdx.y == 0 && c < C) dweight[c] += static_cast<float>(dw);
}

}  // namespace

cudaError_t launch_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                   float eps, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  const int blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  rmsnorm_forward_kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(out, rstd, inp, weight, N, C, eps);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                    const float* weight, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return cudaSuccess;
  const int blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  rmsnorm_dinp_kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
  if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  const dim3 block(kWarpSize, kColumnRowLanes);
  rmsnorm_dweight_kernel<<<(C + kWarpSize - 1) / kWarpSize, block, 0, stream>>>(dweight, dout, inp, rstd, N, C);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
