// GptPreset: GPT-2 124M and 350M as OpenAI released them, with the vocabulary padded for the kernels, and the
// Llama-style presets of models/llama.
#include "models/gpt/training/gpt_presets.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace strata::gpt {
namespace {

// 50257 tokens padded up to 50304 (a multiple of 128), as nanoGPT and llm.c do, so the LM head's GEMM has a
// vocabulary dimension the tensor cores tile without a ragged edge. The 47 extra rows are ordinary rows of the
// softmax that no target ever names: training drives their logits down (nanoGPT's choice; llm.c masks them instead).
constexpr int kGpt2Tokens = 50257;
constexpr int kGpt2PaddedVocab = 50304;

GptPreset preset(const char* name, int layers, int heads, int embd) {
  GptPreset p;
  p.name = name;
  p.model.layers = layers;
  p.model.heads = heads;
  p.model.embd = embd;
  p.model.vocab = kGpt2PaddedVocab;
  p.model.ctx = 1024;
  p.seq = 1024;
  p.vocab_tokens = kGpt2Tokens;
  return p;
}

// The Llama-style presets of models/llama (llama-tiny, llama3-8b, llama2-70b), trained at their context or 4096
// positions, whichever is fewer (Llama 3's vocabulary of 128256 reads uint32 shards).
std::vector<GptPreset> llama_shapes() {
  std::vector<GptPreset> out;
  for (const llama::LlamaConfig& c : llama::llama_presets()) {
    GptPreset p;
    p.name = c.name;
    p.model = llama_model(c);
    p.seq = std::min(c.ctx, 4096);
    p.vocab_tokens = c.vocab;
    out.push_back(p);
  }
  return out;
}

}  // namespace

const std::vector<GptPreset>& gpt_presets() {
  static const std::vector<GptPreset> presets = [] {
    std::vector<GptPreset> all = {preset("gpt2-124m", 12, 12, 768), preset("gpt2-350m", 24, 16, 1024)};
    for (GptPreset& p : llama_shapes()) all.push_back(p);
    return all;
  }();
  return presets;
}

const GptPreset& find_gpt_preset(const std::string& name) {
  std::string names;
  for (const GptPreset& p : gpt_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "--model '{}' is not a known model (known: {})", name, names);
}

}  // namespace strata::gpt
