// The SwiGLU gate on the CPU, vectorized through exp_f32, with a sigmoid that cannot overflow.
#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <cstddef>

#include "core/error.h"
#include "kernels/cpu/column_sums.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu {
namespace {

using detail::kMinParallelElements;

// s = sigmoid(g) and 1 - s, from e = exp(-|g|) in (0, 1]: for g >= 0, s = 1 / (1 + e) and 1 - s = e / (1 + e);
// for g < 0 the two swap. exp never overflows (g = -100 gives s ~ 4e-44, not 1 / inf), and 1 - s keeps its digits
// for large g (1.0f - s would round to 0). Selects, not branches, so the loops can vectorize.
struct Sigmoid {
  float s, one_minus_s;
};
inline Sigmoid sigmoid(float g) {
  const float e = detail::exp_f32(-std::fabs(g));
  const float r = 1.0f / (1.0f + e);
  const float er = e * r;
  return g >= 0.0f ? Sigmoid{r, er} : Sigmoid{er, r};
}

void check_shape(int N, int F) {
  STRATA_CHECK(N >= 0 && F >= 0, "swiglu of N = {} rows of F = {} features (each must be >= 0)", N, F);
}

}  // namespace

void swiglu_forward(float* out, const float* gu, int N, int F) {
  check_shape(N, F);
#pragma omp parallel for schedule(static) if (static_cast <std::size_t>(N) * F >= kMinParallelElements)
  for (int n = 0; n < N; ++n) {
    const float* g = gu + static_cast<std::size_t>(n) * 2 * F;
    const float* u = g + F;
    float* o = out + static_cast<std::size_t>(n) * F;
    for (int f = 0; f < F; ++f) o[f] = g[f] * sigmoid(g[f]).s * u[f];
  }
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F) {
  check_shape(N, F);
#pragma omp parallel for schedule(static) if (static_cast <std::size_t>(N) * F >= kMinParallelElements)
  for (int n = 0; n < N; ++n) {
    const float* g = gu + static_cast<std::size_t>(n) * 2 * F;
    const float* u = g + F;
    const float* dy = dout + static_cast<std::size_t>(n) * F;
    float* dg = dgu + static_cast<std::size_t>(n) * 2 * F;
    float* du = dg + F;
    for (int f = 0; f < F; ++f) {
      const Sigmoid sg = sigmoid(g[f]);
      const float silu = g[f] * sg.s;
      const float dsilu = sg.s * (1.0f + g[f] * sg.one_minus_s);
      dg[f] += dy[f] * u[f] * dsilu;
      du[f] += dy[f] * silu;
    }
  }
}

}  // namespace strata::cpu
