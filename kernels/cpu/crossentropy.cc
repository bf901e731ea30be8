// Softmax with cross-entropy on the CPU: eight lanes in a fixed order, sums in double.
#include "kernels/cpu/crossentropy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu {

namespace {

// Eight independent lanes, combined in a fixed order: the loops vectorize and the result does not depend on how
// the caller is threaded.
constexpr int kLanes = 8;

float row_max(const float* x, int n) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, x[0]);
  int v = 0;
  for (; v + kLanes <= n; v += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = lane[j] < x[v + j] ? x[v + j] : lane[j];
  float m = lane[0];
  for (int j = 1; j < kLanes; ++j) m = std::max(m, lane[j]);
  for (; v < n; ++v) m = std::max(m, x[v]);
  return m;
}

// sum over v of exp(x[v] - shift), accumulated in double; e[v] = exp(x[v] - shift) when e is non-null (e may be x).
double sum_exp(const float* x, int n, float shift, float* e) {
  double lane[kLanes] = {};
  float tmp[kLanes];
  int v = 0;
  for (; v + kLanes <= n; v += kLanes) {
    for (int j = 0; j < kLanes; ++j) tmp[j] = detail::exp_f32(x[v + j] - shift);
    for (int j = 0; j < kLanes; ++j) lane[j] += tmp[j];
    if (e != nullptr) std::copy(tmp, tmp + kLanes, e + v);
  }
  double sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  for (; v < n; ++v) {
    const float t = detail::exp_f32(x[v] - shift);
    sum += t;
    if (e != nullptr) e[v] = t;
  }
  return sum;
}

}  // namespace

void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                          float dscale) {
  for (int n = 0; n < N; ++n)
    STRATA_CHECK(targets[n] >= 0 && targets[n] < V, "target {} of row {} is outside the vocabulary [0, {})", targets[n],
                 n, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<std::size_t>(n) * V;
    const int target = targets[n];
    const float maxv = row_max(x, V);
    const float x_target = x[target];  // read before an in-place dlogits overwrites it
    float* d = dlogits == nullptr ? nullptr : dlogits + static_cast<std::size_t>(n) * V;
    const double sum = sum_exp(x, V, maxv, d);  // d[v] = exp(x[v] - max), written after x[v] is read
    if (d != nullptr) {
      const float inv = static_cast<float>(1.0 / sum);
      const float e_target = d[target];
      for (int v = 0; v < V; ++v) d[v] = d[v] * inv * dscale;
      d[target] = (e_target * inv - 1.0f) * dscale;
    }
    losses[n] = static_cast<float>(std::log(sum) - (static_cast<double>(x_target) - maxv));
  }
}

}  // namespace strata::cpu
