// The GPT-2 embedding on the CPU: a row lookup forward, fixed-order sums backward.
#include "kernels/cpu/encoder.h"

#include <cstddef>

#include "kernels/cpu/column_sums.h"

namespace strata::cpu {

using detail::kChannelBlock;

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* w = wte + static_cast<std::size_t>(tokens[b * T + t]) * C;
      const float* p = wpe + static_cast<std::size_t>(t) * C;
      float* o = out + (static_cast<std::size_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
  // dwpe: each position's row is owned by one task; rows of dwte are shared by repeated tokens, so each task owns
  // a block of channels and walks every row in order (no atomics, fixed summation order).
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; ++t) {
      float* dp = dwpe + static_cast<std::size_t>(t) * C;
      for (int b = 0; b < B; ++b) {
        const float* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
        for (int c = 0; c < C; ++c) dp[c] += d[c];
      }
    }
    const int blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
      for (int i = 0; i < B * T; ++i) {
        float* dw = dwte + static_cast<std::size_t>(tokens[i]) * C;
        const float* d = dout + static_cast<std::size_t>(i) * C;
        for (int c = c0; c < c1; ++c) dw[c] += d[c];
      }
    }
  }
}

}  // namespace strata::cpu
