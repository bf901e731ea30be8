// The CUDA AdamW kernel: adamw_update's arithmetic, one element per thread in a grid-stride loop.
#include <algorithm>

#include "runtime/optim/adamw_launch.h"

namespace strata::cuda_adamw {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::size_t n, Scalars k,
                             float* nonfinite) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const float gi = g[i];
    const float mi = k.b1 * m[i] + k.one_minus_b1 * gi;
    const float vi = k.b2 * v[i] + k.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * k.shrink - k.step_size * (mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
    p[i] = pi;
    bad |= !isfinite(pi);
  }
  // Every thread that saw one stores the same value: no atomic needed.
  if (bad && nonfinite != nullptr) *nonfinite = 1.0f;
}

}  // namespace

cudaError_t update(float* p, const float* g, float* m, float* v, std::size_t n, Scalars k, float* nonfinite,
                   cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + kThreads - 1) / kThreads, 65535));
  adamw_kernel<<<blocks, kThreads, 0, s>>>(p, g, m, v, n, k, nonfinite);
  return cudaGetLastError();
}

}  // namespace strata::cuda_adamw
