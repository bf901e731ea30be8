// Rotary position embeddings on the GPU: the rotation of kernels/cpu/rope.h, in place, one thread per channel pair.
#include <cstddef>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kThreads = 256;

// Pair (b, t, h, i), i < D/2, of n = B * T * heads * D/2 pairs: x'[i] = x[i] c - x[i + D/2] s and
// x'[i + D/2] = x[i + D/2] c + x[i] s with (c, s) from table row pos0 + t; the inverse negates s (exactly).
__global__ void rope_kernel(float* x, const float* cos, const float* sin, int T, int heads, int half, int pos0,
                            std::size_t row_stride, std::size_t batch_stride, std::size_t n, bool inverse) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t i = e % static_cast<std::size_t>(half);
    std::size_t r = e / static_cast<std::size_t>(half);
    const std::size_t h = r % static_cast<std::size_t>(heads);
    r /= static_cast<std::size_t>(heads);
    const std::size_t t = r % static_cast<std::size_t>(T), b = r / static_cast<std::size_t>(T);
    const std::size_t k = (static_cast<std::size_t>(pos0) + t) * half + i;
    const float c = cos[k], s = inverse ? -sin[k] : sin[k];
    float* lo = x + b * batch_stride + t * row_stride + h * 2 * half + i;
    float* hi = lo + half;
    const float x0 = *lo, x1 = *hi;
    *lo = x0 * c - x1 * s;
    *hi = x1 * c + x0 * s;
  }
}

}  // namespace

cudaError_t launch_rope(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                        std::size_t row_stride, std::size_t batch_stride, bool inverse, cudaStream_t stream) {
  const int half = D / 2;
  const std::size_t n = static_cast<std::size_t>(B) * static_cast<std::size_t>(T) * static_cast<std::size_t>(heads) *
                        static_cast<std::size_t>(half);
  if (n == 0) return cudaSuccess;
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, cos, sin, T, heads, half, pos0, row_stride,
                                                              batch_stride, n, inverse);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
