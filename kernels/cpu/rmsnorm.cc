// RMSNorm on the CPU: the mean of squares in double, the weight gradient in fixed order.
#include "kernels/cpu/rmsnorm.h"

#include <cmath>
#include <cstddef>

#include "core/error.h"
#include "kernels/cpu/column_sums.h"

namespace strata::cpu {

using detail::add_column_sums;

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  STRATA_CHECK(N >= 0 && C >= 1, "rmsnorm of N = {} rows of C = {} channels (need N >= 0, C >= 1)", N, C);
  STRATA_CHECK(eps >= 0.0f, "rmsnorm eps {} must be >= 0", eps);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    double sum_sq = 0;
    for (int c = 0; c < C; ++c) sum_sq += static_cast<double>(x[c]) * x[c];
    const float s = static_cast<float>(1.0 / std::sqrt(sum_sq / C + eps));
    float* o = out + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];  // (x * rstd) * weight, HF's order
    rstd[n] = s;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C) {
  STRATA_CHECK(N >= 0 && C >= 1, "rmsnorm of N = {} rows of C = {} channels (need N >= 0, C >= 1)", N, C);
  // xhat = x * rstd is rebuilt in f32 exactly as the forward formed it; each row's mean(g * xhat) sums in double.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* dy = dout + static_cast<std::size_t>(n) * C;
    const float s = rstd[n];
    double gx_sum = 0;
    for (int c = 0; c < C; ++c) gx_sum += static_cast<double>(dy[c] * weight[c]) * (x[c] * s);
    const float gx_mean = static_cast<float>(gx_sum / C);
    float* dx = dinp + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) dx[c] += (dy[c] * weight[c] - x[c] * s * gx_mean) * s;
  }
  add_column_sums(dweight, N, C, [&](int n, int c) {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    return static_cast<double>(dout[i]) * (inp[i] * rstd[n]);
  });
}

}  // namespace strata::cpu
