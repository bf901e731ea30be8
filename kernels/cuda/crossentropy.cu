// Fused softmax + cross-entropy on the GPU: one block per row, the row's sum of exponentials in double.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;

__global__ __launch_bounds__(kThreads) void crossentropy_softmax_kernel(float* losses, float* dlogits,
                                                                        const float* logits, const int32_t* targets,
                                                                        int V, float dscale) {
  __shared__ float max_scratch[kWarps];
  __shared__ double sum_scratch[kWarps];
  const std::size_t n = blockIdx.x;
  const float* x = logits + n * V;
  float* d = dlogits == nullptr ? nullptr : dlogits + n * V;
  const int32_t target = targets[n];
  if (target < 0 || target >= V) {  // the same for the whole block: no thread reaches a barrier
    for (int v = threadIdx.x; v < V; v += kThreads)
      if (d != nullptr) d[v] = NAN;
    if (threadIdx.x == 0) losses[n] = NAN;
    return;
  }
  const float x_target = x[target];  // read before an in-place dlogits overwrites it (after the barriers below)

  float local_max = -INFINITY;
  for (int v = threadIdx.x; v < V; v += kThreads) local_max = fmaxf(local_max, x[v]);
  const float maxv = block_max<kWarps>(local_max, max_scratch);

  double local_sum = 0;
  for (int v = threadIdx.x; v < V; v += kThreads) local_sum += expf(x[v] - maxv);
  const double sum = block_sum<kWarps>(local_sum, sum_scratch);  // its barriers end every thread's reads of x

  if (d != nullptr) {
    // exp(x[v] - max) is recomputed rather than stored, so x[v] is read by the thread that then overwrites it.
    const float inv = static_cast<float>(1.0 / sum);
    for (int v = threadIdx.x; v < V; v += kThreads) {
      const float p = expf(x[v] - maxv) * inv;
      d[v] = (v == target ? p - 1.0f : p) * dscale;
    }
  }
  if (threadIdx.x == 0) losses[n] = static_cast<float>(log(sum) - (static_cast<double>(x_target) - maxv));
}

}  // namespace

cudaError_t launch_crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                        int N, int V, float dscale, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  crossentropy_softmax_kernel<<<N, kThreads, 0, stream>>>(losses, dlogits, logits, targets, V, dscale);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
