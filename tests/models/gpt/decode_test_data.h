// Test data shared by the decode suites: weights from the spec's init and synthetic prompts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt/data/token_data.h"
#include "models/gpt/inference/gpt_decoder.h"

namespace strata::gpt::test_data {

// Weights from the spec's init (spec_init), as train_gpt draws them.
inline WeightReader spec_weights(const GptConfig& cfg, std::uint64_t seed) {
  return [cfg, seed](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    ParamSlot slot;
    slot.name = name;
    spec_init(cfg, slot, begin, count, out, seed);
  };
}

inline std::vector<std::int32_t> some_tokens(int n, int vocab, std::uint64_t seed) {
  std::vector<std::int32_t> t;
  for (std::uint16_t v : synthetic_tokens(static_cast<std::uint64_t>(n), vocab, seed)) t.push_back(v);
  return t;
}

}  // namespace strata::gpt::test_data
