// sample_token: softmax over the temperature-scaled logits in double, the top-k and top-p cuts, one counter-based draw.
#include "runtime/inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace strata {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void SamplingOptions::validate() const {
  STRATA_CHECK(std::isfinite(temperature) && temperature >= 0,
               "--temperature {} must be a finite number >= 0 (0: "
               "greedy)",
               temperature);
  STRATA_CHECK(top_k >= 0, "--top-k {} must be >= 0 (0: every token)", top_k);
  STRATA_CHECK(top_p > 0 && top_p <= 1, "--top-p {} must be in (0, 1]", top_p);
}

int sample_token(const float* logits, int V, const SamplingOptions& o, std::uint64_t sequence, std::uint64_t step) {
  if (o.temperature == 0) return static_cast<int>(std::max_element(logits, logits + V) - logits);
  // Tokens by logit, largest first (ties by index, so the order is total).
  std::vector<int> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  std::size_t keep =
      o.top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(o.top_k), order.size()) : order.size();
  const double top = logits[order[0]];
  std::vector<double> p(keep);
  double z = 0;
  for (std::size_t i = 0; i < keep; ++i) z += p[i] = std::exp((logits[order[i]] - top) / o.temperature);
  if (o.top_p < 1) {
    double mass = 0;
    std::size_t i = 0;
    while (i < keep && mass < o.top_p * z) mass += p[i++];
    keep = std::max<std::size_t>(i, 1);
    z = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  // One uniform in [0, 1) from (seed, sequence, step).
  const std::uint64_t bits = splitmix64(o.seed ^ splitmix64(sequence ^ splitmix64(step)));
  const double u = static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0) * z;
  double acc = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace strata
