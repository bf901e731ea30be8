// What the decode suites share: weights from the spec's init, synthetic prompts, the relative difference of two rows
// of logits, and strata-plan --inference's input for a decoder's model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt/data/token_data.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "runtime/inference/generator.h"
#include "runtime/memory/inference_planner.h"

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

// The largest |a - b| over a row, relative to the row's largest |b|.
inline double max_rel_diff(const float* a, const float* b, int n) {
  double diff = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// What a decoder gives for one prompt's prefill and a batch's generation.
struct DecodeOutputs {
  std::vector<float> logits;  // every position of the prefilled prompt
  std::vector<std::vector<std::int32_t>> tokens;
};

// `prompt` prefilled into sequence 0 with every position's logits, then generate() greedy over `prompts`
// (`max_new_tokens` each).
inline DecodeOutputs prefill_then_generate(Decoder& dec, const std::vector<std::int32_t>& prompt,
                                           const std::vector<std::vector<std::int32_t>>& prompts, int max_new_tokens) {
  DecodeOutputs out;
  out.logits.resize(prompt.size() * static_cast<std::size_t>(dec.vocab()));
  dec.prefill(0, prompt.data(), static_cast<int>(prompt.size()), out.logits.data());
  GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  out.tokens = generate(dec, prompts, o).tokens;
  return out;
}

// The planner's input for `cfg` as the decoder runs it (f32 weights and cache): prompts of `prompt` tokens at tp `tp`,
// `prefetch_depth` blocks streamed ahead.
inline InferenceInput f32_plan_input(const GptConfig& cfg, int prompt, int tp = 1, int prefetch_depth = 1) {
  InferenceInput in;
  in.model = ModelShape{0, cfg.layers, cfg.embd, cfg.heads, cfg.vocab, cfg.ctx};
  in.prompt = prompt;
  in.tp = tp;
  in.prefetch_depth = prefetch_depth;
  in.weight_dtype = DType::kF32;
  in.kv_dtype = DType::kF32;
  in.validate();
  return in;
}

}  // namespace strata::gpt::test_data
