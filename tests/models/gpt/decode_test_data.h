// What the decode suites share: weights from the spec's init, synthetic prompts, the relative difference of two rows
// of logits, the check against PyTorch's greedy generation, and strata-plan --inference's input for a decoder's model.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "models/gpt/data/token_data.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "runtime/inference/generator.h"
#include "runtime/memory/inference_planner.h"

namespace strata::gpt::test_data {

// A Llama-style model with every weight the family has: grouped-query attention (`heads` query heads on `kv_heads`
// key-value heads of `head_dim` channels), a SwiGLU MLP of `ffn`, q | k | v biases, an untied head.
inline GptConfig llama_config(int layers, int heads, int kv_heads, int head_dim, int embd, int ffn, int vocab,
                              int ctx) {
  GptConfig c{layers, heads, embd, vocab, ctx};
  c.family = Family::kLlama;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.ffn = ffn;
  c.qkv_bias = true;
  c.tied = false;
  return c;
}

// Weights from the spec's init (spec_init), as train_gpt draws them.
inline WeightReader spec_weights(const GptConfig& cfg, std::uint64_t seed) {
  return [cfg, seed](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    ParamSlot slot;
    slot.name = name;
    spec_init(cfg, slot, begin, count, out, seed);
  };
}

// spec_weights with biases that are not zero (the spec draws them zero), so that a forward depends on them (a
// Llama-style model's q | k | v biases, and their slices under tp).
inline WeightReader spec_weights_with_biases(const GptConfig& cfg, std::uint64_t seed) {
  const WeightReader spec = spec_weights(cfg, seed);
  return [spec](const std::string& name, std::size_t begin, std::size_t count, float* out) {
    spec(name, begin, count, out);
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
      for (std::size_t k = 0; k < count; ++k) out[k] = 0.05f * std::sin(0.7f * static_cast<float>(begin + k));
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

// PyTorch's greedy generation on the decoder's weights (`ref`: a *_gen_ref.json of tests/reference, 64 tokens after its
// "prompt", each step a full forward over the whole sequence, and each step's "logits"): the decoder, from its state
// with nothing cached, gives the same 64 tokens, every step's logits within 1e-5 of the row's largest; generate()
// after it on the same decoder gives them too.
inline void expect_greedy_reference(Decoder& dec, const nlohmann::json& ref) {
  const int V = dec.vocab();
  const std::vector<std::int32_t> prompt = ref["prompt"].get<std::vector<std::int32_t>>();
  const std::vector<std::int32_t> want = ref["tokens"].get<std::vector<std::int32_t>>();
  const std::vector<std::vector<float>> want_logits = ref["logits"].get<std::vector<std::vector<float>>>();
  ASSERT_EQ(want.size(), 64u);
  ASSERT_EQ(want_logits.size(), want.size());
  const float* logits = dec.prefill(0, prompt.data(), static_cast<int>(prompt.size()));
  std::vector<std::int32_t> got;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (i > 0) logits = dec.decode({0}, {got.back()});
    ASSERT_EQ(want_logits[i].size(), static_cast<std::size_t>(V));
    worst = std::max(worst, max_rel_diff(logits, want_logits[i].data(), V));
    got.push_back(static_cast<std::int32_t>(std::max_element(logits, logits + V) - logits));
  }
  std::printf("64 greedy tokens against PyTorch's: %s; largest logit difference %.3g of the row's largest "
              "(PyTorch's smallest top-2 margin %.3g)\n",
              got == want ? "equal" : "DIFFERENT", worst, ref["min_margin"].get<double>());
  EXPECT_EQ(got, want);
  EXPECT_LE(worst, 1e-5);
  GenerateOptions o;
  o.max_new_tokens = 64;
  EXPECT_EQ(generate(dec, {prompt}, o).tokens[0], want);
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
// `prefetch_depth` blocks streamed ahead. A Llama-style model's shape as strata-plan's Llama flags give it.
inline InferenceInput f32_plan_input(const GptConfig& cfg, int prompt, int tp = 1, int prefetch_depth = 1) {
  InferenceInput in;
  in.model = ModelShape{0, cfg.layers, cfg.embd, cfg.heads, cfg.vocab, cfg.ctx};
  if (cfg.llama()) {
    in.model.kv_heads = cfg.kv();
    in.model.head_dim = cfg.hd();
    in.model.ffn = cfg.mlp_width();
    in.model.gated = in.model.rms_norm = in.model.rotary = true;
    in.model.qkv_bias = cfg.qkv_bias;
    in.model.tied = cfg.tied;
  }
  in.prompt = prompt;
  in.tp = tp;
  in.prefetch_depth = prefetch_depth;
  in.weight_dtype = DType::kF32;
  in.kv_dtype = DType::kF32;
  in.validate();
  return in;
}

}  // namespace strata::gpt::test_data
