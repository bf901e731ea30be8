// The decode path on a CUDA device (label gpu): GptDecoder with the CUDA kernel table against the same decoder on a
// CPU device, its reference. Prefill logits at every position within 1e-4 of the row's largest (cuBLAS and the CUDA
// kernels sum in other orders), the same greedy tokens, and on the GPU every placement (blocks streamed from pinned
// host memory or through the reader, the KV cache in pinned host memory) gives the resident GPU decoder's bits. Skips,
// saying why, without a GPU or when the test runtime is not on the CUDA backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu_device.h"
#include "core/device_registry.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "tests/models/gpt/decode_test_data.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;
using test_data::max_rel_diff;
using test_data::some_tokens;
using test_data::spec_weights;

GptConfig model() { return GptConfig{3, 4, 128, 97, 160}; }

using Outputs = test_data::DecodeOutputs;

Outputs decode(Device& dev, const DecodePlacement& where = {}) {
  const GptConfig cfg = model();
  GptDecoder dec(cfg, dev, 3, spec_weights(cfg, 8), 64, DType::kF32, where);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < 3; ++b) prompts.push_back(some_tokens(4 + 30 * b, cfg.vocab, 60 + static_cast<std::uint64_t>(b)));
  // The first prompt goes through in three chunks of 64 rows.
  return test_data::prefill_then_generate(dec, some_tokens(150, cfg.vocab, 9), prompts, 40);
}

TEST(GptCudaDecode, EqualsTheCpuDecoder) {
  if (cuda_device_count() == 0 || runtime().backend() != DeviceKind::kCuda)
    GTEST_SKIP() << "needs the CUDA backend with a GPU";
  CpuDevice cpu(60.0, "decode-reference");
  const Outputs want = decode(cpu);
  const Outputs got = decode(runtime().device());
  const int V = model().vocab;
  double worst = 0;
  for (std::size_t r = 0; r < want.logits.size() / static_cast<std::size_t>(V); ++r)
    worst = std::max(worst, max_rel_diff(got.logits.data() + r * V, want.logits.data() + r * V, V));
  std::printf("CUDA decode against the CPU: largest logit difference %.3g of the row's largest\n", worst);
  EXPECT_LE(worst, 1e-4);
  EXPECT_EQ(got.tokens, want.tokens);
}

TEST(GptCudaDecode, PlacementsGiveTheResidentBits) {
  if (cuda_device_count() == 0 || runtime().backend() != DeviceKind::kCuda)
    GTEST_SKIP() << "needs the CUDA backend with a GPU";
  const Outputs resident = decode(runtime().device());
  struct Case {
    int resident_layers;
    WeightSource source;
    bool kv_on_host;
  };
  for (const Case& c : {Case{0, WeightSource::kHost, false}, Case{1, WeightSource::kDisk, false},
                        Case{3, WeightSource::kHost, true}, Case{0, WeightSource::kDisk, true}}) {
    DecodePlacement where;
    where.resident_layers = c.resident_layers;
    where.source = c.source;
    where.kv_on_host = c.kv_on_host;
    const Outputs got = decode(runtime().device(), where);
    const std::string what = std::string(weight_source_name(c.source)) + ", " + std::to_string(c.resident_layers) +
                             " resident" + (c.kv_on_host ? ", KV cache in host memory" : "");
    EXPECT_EQ(std::memcmp(got.logits.data(), resident.logits.data(), resident.logits.size() * 4), 0) << what;
    EXPECT_EQ(got.tokens, resident.tokens) << what;
  }
}

}  // namespace
}  // namespace strata::gpt
