// LayerNorm forward and backward on the GPU: one warp per row, row sums in double as on the CPU (kernels/cpu).
#include <cstddef>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int n = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;  // the whole warp leaves together
  const float* x = inp + static_cast<std::size_t>(n) * C;
  double sum = 0;
  for (int c = lane; c < C; c += kWarpSize) sum += x[c];
  const double m = warp_sum(sum) / C;
  double var = 0;
  for (int c = lane; c < C; c += kWarpSize) {
    const double d = x[c] - m;
    var += d * d;
  }
  var = warp_sum(var);
  const float mf = static_cast<float>(m);
  const float s = static_cast<float>(1.0 / sqrt(var / C + 1e-5));
  float* o = out + static_cast<std::size_t>(n) * C;
  for (int c = lane; c < C; c += kWarpSize) o[c] = (x[c] - mf) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[n] = mf;
    rstd[n] = s;
  }
}

// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = weight * dout, xhat = (x - mean) * rstd.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int n = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const std::size_t row = static_cast<std::size_t>(n) * C;
  const float m = mean[n], s = rstd[n];
  double g_sum = 0, gx_sum = 0;
  for (int c = lane; c < C; c += kWarpSize) {
    const float g = weight[c] * dout[row + c];
    g_sum += g;
    gx_sum += static_cast<double>(g) * ((inp[row + c] - m) * s);
  }
  const float g_mean = static_cast<float>(warp_sum(g_sum) / C);
  const float gx_mean = static_cast<float>(warp_sum(gx_sum) / C);
  for (int c = lane; c < C; c += kWarpSize)
    dinp[row + c] += (weight[c] * dout[row + c] - g_mean - (inp[row + c] - m) * s * gx_mean) * s;
}

// dweight[c] += sum over n of dout * xhat, dbias[c] += sum over n of dout: the fixed-order column reduction.
__global__ void layernorm_dparams_kernel(float* dweight, float* dbias, const float* dout, const float* inp,
                                         const float* mean, const float* rstd, int N, int C) {
  __shared__ double scratch[kColumnRowLanes][kWarpSize];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  double dw = 0, db = 0;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRowLanes) {
      const std::size_t i = static_cast<std::size_t>(n) * C + c;
      dw += static_cast<double>(dout[i]) * ((inp[i] - mean[n]) * rstd[n]);
      db += dout[i];
    }
  dw = column_total(dw, scratch);  // every thread takes part (syncs inside)
  db = column_total(db, scratch);
  if (threadIdx.y == 0 && c < C) {
    dweight[c] += static_cast<float>(dw);
    dbias[c] += static_cast<float>(db);
  }
}

}  // namespace

cudaError_t launch_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                     const float* bias, int N, int C, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  const int blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  layernorm_forward_kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(out, mean, rstd, inp, weight, bias, N,
                                                                                C);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                      const float* weight, const float* mean, const float* rstd, int N, int C,
                                      cudaStream_t stream) {
  if (N == 0 || C == 0) return cudaSuccess;
  const int blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  layernorm_dinp_kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  const dim3 block(kWarpSize, kColumnRowLanes);
  layernorm_dparams_kernel<<<(C + kWarpSize - 1) / kWarpSize, block, 0, stream>>>(dweight, dbias, dout, inp, mean,
                                                                                   rstd, N, C);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
