// Token choice from a row of logits: greedy, or seeded temperature / top-k / top-p sampling whose draw depends only
// on (seed, sequence, step), so a sequence samples the same tokens whatever else shares its batch.
#pragma once

#include <cstdint>

namespace strata {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (the first largest logit)
  int top_k = 0;           // keep the k most likely tokens (0: all)
  double top_p = 1;        // then the fewest most likely whose probabilities reach top_p (1: all)
  std::uint64_t seed = 0;
  // kInvalidArgument naming the flag: temperature < 0 or not finite, top_k < 0, top_p outside (0, 1].
  void validate() const;
};

// The token for step `step` of sequence `sequence` from `logits` (V floats, host memory).
int sample_token(const float* logits, int V, const SamplingOptions& o, std::uint64_t sequence, std::uint64_t step);

}  // namespace strata
