// Model FLOPs, the peak-rate table behind MFU, and the named GPT-2 shapes.
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/gpt/training/gpt_presets.h"
#include "models/gpt/model/model_flops.h"
#include "models/llama/llama_config.h"
#include "runtime/tensor/global_elements.h"

namespace strata::gpt {
namespace {

TEST(GptFlops, Gpt2SmallHasItsPublishedParameterCount) {
  const GptPreset& p = find_gpt_preset("gpt2-124m");
  ModelFlops f = ModelFlops::of(p.model, p.seq);
  // llm.c's GPT-2 124M with the vocabulary padded to 50304: 124,475,904 parameters, of which wpe is 1024 x 768.
  EXPECT_EQ(f.params + 1024u * 768u, 124475904u);
  EXPECT_EQ(f.attention, 12u * 12u * 768u * 1024u);
  EXPECT_EQ(f.per_token, 6u * f.params + f.attention);
  const GptPreset& m = find_gpt_preset("gpt2-350m");
  EXPECT_EQ(ModelFlops::of(m.model, m.seq).params + 1024u * 1024u, 354871296u);
  EXPECT_EQ(m.model.vocab % 128, 0);
  EXPECT_EQ(m.vocab_tokens, 50257);
}

TEST(GptFlops, CountsEveryWeightOfASmallModel) {
  GptConfig c;  // L=2, C=32, V=64
  // Per block 12C^2 + 13C = 12288 + 416; wte 64 x 32; ln_f 64.
  EXPECT_EQ(ModelFlops::of(c, 8).params, 2u * (12288u + 416u) + 2048u + 64u);
  EXPECT_EQ(ModelFlops::of(c, 8).attention, 12u * 2u * 32u * 8u);
}

// A Llama-style model's parameters are its units' (it has no position embeddings): Llama-2-70B's published count,
// the benchmark's shape untied and tied, one key-value head with q, k, v biases; its FLOPs count the head but not an
// untied token table (for the benchmark's shape, scripts/bench_llama.py's 82,575,360 a token, which leaves out the
// norms, and 6 x their 4,992 weights). Its attention runs over the query heads' width.
TEST(GptFlops, CountsEveryWeightOfALlamaStyleModel) {
  const GptConfig big = llama_model(llama::find_llama_preset("llama2-70b"));
  EXPECT_EQ(ModelFlops::of(big, 4096).params, 68976648192u);
  GptConfig bench = GptConfig{6, 6, 384, 8192, 256};
  bench.family = Family::kLlama;
  bench.kv_heads = 2;
  bench.ffn = 1024;
  for (bool tied : {false, true}) {
    for (int kv : {2, 1}) {
      GptConfig c = bench;
      c.tied = tied;
      c.kv_heads = kv;
      c.qkv_bias = kv == 1;
      SCOPED_TRACE(c.describe());
      const ModelFlops f = ModelFlops::of(c, 256);
      EXPECT_EQ(f.params, global_numel(gpt_units(c, 1)));
      // An untied token table is looked up, not multiplied: the head is the one V x C product either way.
      EXPECT_EQ(f.multiplied, f.params - (tied ? 0u : 8192u * 384u));
      EXPECT_EQ(f.attention, 12u * 6u * 384u * 256u);
      EXPECT_EQ(f.per_token, 6u * f.multiplied + f.attention);
      if (kv == 2) {
        EXPECT_EQ(f.per_token, 82575360u + 6u * 4992u);
      }
    }
  }
}

TEST(GptFlops, KnowsThePeaksOfTheGpusItNames) {
  std::string what;
  EXPECT_EQ(known_peak_tflops("NVIDIA H200", DType::kBF16, &what), 989.4);
  EXPECT_EQ(what, "H200 bf16");
  EXPECT_EQ(known_peak_tflops("NVIDIA H200", DType::kF32, &what), 66.9);
  EXPECT_EQ(what, "H200 f32 (no tensor cores)");
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 80GB HBM3", DType::kBF16, &what), 989.4);
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 PCIe", DType::kBF16, &what), 756.0);
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", DType::kF16, &what), 312.0);
  EXPECT_EQ(known_peak_tflops("", DType::kF32, &what), 0.0);
  EXPECT_TRUE(what.empty());
  EXPECT_EQ(known_peak_tflops("NVIDIA GeForce RTX 4090", DType::kBF16, &what), 0.0);
}

TEST(GptFlops, AnUnknownModelNameListsTheKnownOnes) {
  try {
    find_gpt_preset("gpt2-xl");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'gpt2-xl' is not a known model (known: gpt2-124m, gpt2-350m, llama-tiny, llama3-8b, llama2-70b)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata::gpt
