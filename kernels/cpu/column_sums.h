// add_column_sums: the fixed-order reduction over rows that every parameter gradient of kernels/cpu uses, and the
// size below which elementwise work stays serial.
#pragma once

#include <algorithm>
#include <cstddef>

namespace strata::cpu::detail {

// Parameter gradients reduce over rows; they are computed per block of this many channels, one block per task,
// summing rows in order in double, so results do not depend on the thread count.
constexpr int kChannelBlock = 64;

// dst[c] += sum over rows n of f(n, c), for every c < C: the fixed-order column reduction, one task per block.
template <typename F>
void add_column_sums(float* dst, int N, int C, F&& f) {
  const int blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    double acc[kChannelBlock] = {};
    for (int n = 0; n < N; ++n)
      for (int c = c0; c < c1; ++c) acc[c - c0] += f(n, c);
    for (int c = c0; c < c1; ++c) dst[c] += static_cast<float>(acc[c - c0]);
  }
}

// Rows of at least this many elements are worth a task each; shorter elementwise work stays serial.
constexpr std::size_t kMinParallelElements = 1 << 14;

}  // namespace strata::cpu::detail
