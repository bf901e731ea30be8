// Tensor-parallel decode (GptDecoder with a tp group) at np 2 and 4: tp 2 and tp 4 (as many as the job holds) against
// the same model decoded by one rank alone, on a vocabulary that does not divide by tp. Every prompt position's logits
// agree within 1e-5 of the row's largest and the greedy tokens are the same; blocks streamed from disk under tp give
// the resident tp decoder's bits; the bytes a step reads and the memory by category are strata-plan --inference's at
// that tp degree, to the byte; the same for a Llama-style model (grouped-query attention, q | k | v in parts of
// unequal width), and one of fewer key-value heads than tp ranks refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "core/error.h"
#include "models/gpt/inference/gpt_decoder.h"
#include "kernels/cpu/threads.h"
#include "runtime/inference/generator.h"
#include "runtime/memory/inference_planner.h"
#include "tests/models/gpt/decode_test_data.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using test_data::f32_plan_input;
using test_data::max_rel_diff;
using test_data::some_tokens;
using test_data::spec_weights;

// Four heads (tp 2 and 4 hold whole ones), a vocabulary of 97 (padded to 98 and 100), attention over several tiles.
GptConfig model() { return GptConfig{3, 4, 64, 97, 96}; }

// The Llama-style family on the same vocabulary: 8 query heads on 4 key-value heads (tp 2 and 4 hold whole ones, q | k
// | v split in parts of unequal width), q | k | v biases, an untied head split by vocabulary rows.
GptConfig llama() { return test_data::llama_config(3, 8, 4, 8, 48, 96, 97, 96); }

// The tp degrees this job can form: 2, and the world size when it is 4.
std::vector<int> degrees() {
  const int world = strata::test::runtime().world_size();
  std::vector<int> out;
  for (int tp : {2, 4})
    if (tp <= world && world % tp == 0) out.push_back(tp);
  return out;
}

// The node's cores shared among its ranks, as GptTrainer shares them: more OpenMP threads than cores make every
// parallel region wait out the others' time slices.
void share_cores() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu::set_num_threads(std::max(1, cores / strata::test::runtime().local_size()));
}

// The world cut into groups of `tp` consecutive ranks.
std::unique_ptr<Communicator> tp_group(int tp) {
  Communicator& world = strata::test::runtime().world();
  return world.split(world.rank() / tp, world.rank(), "tp" + std::to_string(tp));
}

using Outputs = test_data::DecodeOutputs;

Outputs decode(const GptConfig& cfg, Communicator* tp, const DecodePlacement& where = {}) {
  share_cores();
  const WeightReader read = cfg.llama() ? test_data::spec_weights_with_biases(cfg, 8) : spec_weights(cfg, 8);
  GptDecoder dec(cfg, strata::test::runtime().device(), 3, read, 32, DType::kF32, where, tp);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < 3; ++b) prompts.push_back(some_tokens(4 + 11 * b, cfg.vocab, 60 + static_cast<std::uint64_t>(b)));
  // The first prompt goes through in two chunks of 32 rows.
  return test_data::prefill_then_generate(dec, some_tokens(50, cfg.vocab, 9), prompts, 20);
}

// `cfg` at each tp degree against one rank alone, resident and streamed from the reader.
void expect_one_rank_alone(const GptConfig& cfg) {
  const Outputs alone = decode(cfg, nullptr);
  for (int tp : degrees()) {
    const std::string what = cfg.describe() + ", tp " + std::to_string(tp);
    const std::unique_ptr<Communicator> group = tp_group(tp);
    const Outputs split = decode(cfg, group.get());
    double worst = 0;
    for (std::size_t r = 0; r < alone.logits.size() / static_cast<std::size_t>(cfg.vocab); ++r)
      worst = std::max(worst, max_rel_diff(split.logits.data() + r * static_cast<std::size_t>(cfg.vocab),
                                           alone.logits.data() + r * static_cast<std::size_t>(cfg.vocab), cfg.vocab));
    std::printf("%s, tp %d against one rank: largest logit difference %.3g of the row's largest\n",
                cfg.describe().c_str(), tp, worst);
    EXPECT_LE(worst, 1e-5) << what;
    EXPECT_EQ(split.tokens, alone.tokens) << what;
    // Blocks streamed from the reader under tp: the resident tp decoder's bits.
    DecodePlacement where;
    where.resident_layers = 1;
    where.source = WeightSource::kDisk;
    const Outputs streamed = decode(cfg, group.get(), where);
    EXPECT_EQ(std::memcmp(streamed.logits.data(), split.logits.data(), split.logits.size() * 4), 0) << what;
    EXPECT_EQ(streamed.tokens, split.tokens) << what;
  }
}

TEST(GptDecodeTp, EqualsOneRankAlone) {
  if (degrees().empty()) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const GptConfig& cfg : {model(), llama()}) expect_one_rank_alone(cfg);
}

// A decode of `cfg` at each tp degree: its bytes by kind against strata-plan --inference's.
void expect_planners_bytes(const GptConfig& cfg) {
  const int P = 20, G = cfg.ctx - P, B = 2;
  for (int tp : degrees()) {
    const std::string what = cfg.describe() + ", tp " + std::to_string(tp);
    const std::unique_ptr<Communicator> group = tp_group(tp);
    DecodePlacement where;
    where.resident_layers = 1;
    share_cores();
    GptDecoder dec(cfg, strata::test::runtime().device(), B, spec_weights(cfg, 8), 128, DType::kF32, where,
                   group.get());
    std::vector<std::vector<std::int32_t>> prompts;
    for (int b = 0; b < B; ++b) prompts.push_back(some_tokens(P, cfg.vocab, 70 + static_cast<std::uint64_t>(b)));
    GenerateOptions o;
    o.max_new_tokens = G;
    const Generation g = generate(dec, prompts, o);
    ASSERT_EQ(g.decode_steps, static_cast<std::uint64_t>(G - 1));
    const InferenceInput in = f32_plan_input(cfg, P, tp);
    const InferencePlan plan = plan_inference_at(in, B, 1, true);
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.resident_weight_bytes()), plan.resident_weights) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.stream_slot_bytes()), plan.stream_buffers) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.cache_bytes()), plan.kv_cache) << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(dec.device_bytes()), plan.total) << what;  // the workspace and table too
    const double steps = G - 1;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_weight_bytes + g.decode_cache_bytes) / steps, plan.device_bytes)
        << what;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.decode_streamed_bytes) / steps, plan.link_bytes) << what;
  }
}

TEST(GptDecodeTp, BytesAreThePlannersAtThatDegree) {
  if (degrees().empty()) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const GptConfig& cfg : {model(), llama()}) expect_planners_bytes(cfg);
}

// Fewer key-value heads than tp ranks (one, under tp 2 and 4): each rank holds the head its query heads attend to,
// shared with the other ranks of that group, and caches its keys and values whole. The same tokens as one rank alone,
// and the planner's bytes.
TEST(GptDecodeTp, LlamaAboveItsKeyValueHeadsEqualsOneRankAlone) {
  if (degrees().empty()) GTEST_SKIP() << "needs 2 or 4 ranks";
  GptConfig cfg = llama();
  cfg.kv_heads = 1;
  expect_one_rank_alone(cfg);
  expect_planners_bytes(cfg);
}

}  // namespace
}  // namespace strata::gpt
