// LayerNorm on the CPU: statistics in double, parameter gradients in fixed order.
#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <cstddef>

#include "kernels/cpu/column_sums.h"

namespace strata::cpu {

using detail::add_column_sums;

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    double sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double m = sum / C;
    double var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float mf = static_cast<float>(m);
    const float s = static_cast<float>(1.0 / std::sqrt(var / C + 1e-5));
    float* o = out + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - mf) * s * weight[c] + bias[c];
    mean[n] = mf;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  // dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = weight * dout, xhat = (x - mean) * rstd.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* dy = dout + static_cast<std::size_t>(n) * C;
    const float m = mean[n], s = rstd[n];
    double g_sum = 0, gx_sum = 0;
    for (int c = 0; c < C; ++c) {
      const float g = weight[c] * dy[c];
      g_sum += g;
      gx_sum += static_cast<double>(g) * ((x[c] - m) * s);
    }
    const float g_mean = static_cast<float>(g_sum / C), gx_mean = static_cast<float>(gx_sum / C);
    float* dx = dinp + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) dx[c] += (weight[c] * dy[c] - g_mean - (x[c] - m) * s * gx_mean) * s;
  }
  add_column_sums(dweight, N, C, [&](int n, int c) {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    return static_cast<double>(dout[i]) * ((inp[i] - mean[n]) * rstd[n]);
  });
  add_column_sums(dbias, N, C,
                  [&](int n, int c) { return static_cast<double>(dout[static_cast<std::size_t>(n) * C + c]); });
}

}  // namespace strata::cpu
