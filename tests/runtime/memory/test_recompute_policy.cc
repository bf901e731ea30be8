// RecomputePolicy: --recompute's values and what each block takes, the texts that name a policy (and parse back to
// it), the search behind --recompute auto on made-up costs, and the planner's terms for each kind.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/memory/memory_planner.h"
#include "runtime/memory/recompute_policy.h"

namespace strata {
namespace {

using K = BlockRecompute;

TEST(RecomputePolicy, ParsesEveryKindEveryKthBlockAndAList) {
  for (K k : {K::kNone, K::kMlp, K::kAttention, K::kFull, K::kOffload}) {
    const RecomputePolicy p = RecomputePolicy::parse(block_recompute_name(k));
    for (int l = 0; l < 6; ++l) EXPECT_EQ(p.at(l), k);
    EXPECT_EQ(p.any(), k != K::kNone);
  }
  const RecomputePolicy every = RecomputePolicy::parse("full", 3);  // blocks 3 and 6, counting from 1
  EXPECT_EQ(every.count(K::kFull, 6), 2);
  EXPECT_EQ(every.at(2), K::kFull);
  EXPECT_EQ(every.at(5), K::kFull);
  EXPECT_EQ(every.at(0), K::kNone);
  const RecomputePolicy list = RecomputePolicy::parse("offload,none,attention");
  EXPECT_EQ(list.at(0), K::kOffload);
  EXPECT_EQ(list.at(2), K::kAttention);
  EXPECT_NO_THROW(list.validate(3));
  EXPECT_THROW(list.validate(4), Error);
  EXPECT_TRUE(RecomputePolicy::parse("auto").automatic);
  EXPECT_TRUE(RecomputePolicy::parse("auto").any());
}

TEST(RecomputePolicy, RefusesWhatItCannotRun) {
  for (const char* bad : {"selective", "", "full,", "full,,none", "FULL"})
    EXPECT_THROW(RecomputePolicy::parse(bad), Error) << bad;
  EXPECT_THROW(RecomputePolicy::parse("full", 0), Error);
  EXPECT_THROW(RecomputePolicy::parse("auto", 2), Error);
  EXPECT_THROW(RecomputePolicy::parse("full,none", 2), Error);
  try {
    RecomputePolicy::parse("selective");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--recompute selective: a block's recomputation is none, mlp"),
              std::string::npos) << e.what();
  }
}

// flags() is the command line that gives the policy back; describe() says it in words.
TEST(RecomputePolicy, NamesParseBackToThePolicy) {
  const RecomputePolicy cases[] = {RecomputePolicy::parse("attention"), RecomputePolicy::parse("mlp,full,none,offload"),
                                   RecomputePolicy::full()};
  for (const RecomputePolicy& p : cases) EXPECT_EQ(RecomputePolicy::parse(p.flags(4)), p) << p.flags(4);
  EXPECT_EQ(RecomputePolicy::parse("full", 2).flags(4), "full --recompute-every 2");
  EXPECT_EQ(RecomputePolicy::parse("full", 2).describe(4), "full on every 2nd block");
  EXPECT_EQ(RecomputePolicy::parse("mlp,full,mlp,none").describe(4), "1 x full, 2 x mlp, 1 x none");
  EXPECT_EQ(RecomputePolicy::parse("full,full").flags(2), "full");
  EXPECT_EQ(RecomputePolicy::parse("auto").flags(4), "auto");
}

// Made-up blocks: each keeps 10 bytes, mlp 7, attention 8, full 1, against a budget; FLOPs again: attention 1, full 3
// per block; an mlp block rewrites 1 element. The search keeps the cheapest fitting mix, per stage.
TEST(RecomputePolicy, AutoSearchKeepsTheCheapestMixThatFits) {
  auto bytes = [](K k) {
    return k == K::kNone ? 10.0 : k == K::kMlp ? 7.0 : k == K::kAttention ? 8.0 : k == K::kFull ? 1.0 : 2.0;
  };
  auto flops = [](K k) { return k == K::kAttention ? 1.0 : k == K::kFull ? 3.0 : 0.0; };
  const std::vector<std::vector<int>> stages = {{0, 1, 2, 3}, {4, 5}};
  const std::vector<K> recompute_only = {K::kNone, K::kMlp, K::kAttention, K::kFull};
  for (double budget : {40.0, 34.0, 31.0, 20.0, 4.0, 3.0}) {
    auto trial = [&](const RecomputePolicy& p, int s) -> std::optional<RecomputeCost> {
      RecomputeCost c;
      for (int l : stages[static_cast<std::size_t>(s)]) {
        c.memory += bytes(p.at(l));
        c.flops += flops(p.at(l));
        c.elementwise += p.at(l) == K::kMlp ? 1 : 0;
      }
      if (c.memory > budget) return std::nullopt;
      return c;
    };
    int failed = -2;
    const RecomputePolicy p = choose_recompute(6, stages, recompute_only, trial, &failed);
    SCOPED_TRACE(budget);
    if (budget < 4.0) {  // below four full blocks
      EXPECT_EQ(failed, 0);
      continue;
    }
    ASSERT_EQ(failed, -1);
    ASSERT_EQ(p.per_layer.size(), 6u);
    EXPECT_TRUE(p.automatic);
    // Stage 0 alone: fits, and no cheaper mix of two kinds does.
    std::optional<RecomputeCost> got = trial(p, 0);
    ASSERT_TRUE(got.has_value()) << p.flags(6);
    for (K a : recompute_only)
      for (K b : recompute_only)
        for (int k = 0; k <= 4; ++k) {
          std::vector<K> layers(6, K::kNone);
          for (int l = 0; l < 4; ++l) layers[static_cast<std::size_t>(l)] = l < k ? a : b;
          const std::optional<RecomputeCost> c = trial(RecomputePolicy::of(layers), 0);
          if (c) {
            EXPECT_GE(c->flops, got->flops) << RecomputePolicy::of(layers).flags(6) << " beats " << p.flags(6);
          }
        }
    if (budget >= 40) {
      EXPECT_EQ(p.count(K::kNone, 4), 4) << p.flags(6);
    }
    if (budget == 34.0) {
      EXPECT_EQ(p.count(K::kMlp, 4), 2) << "two mlp blocks: 34 bytes, no FLOPs: " << p.flags(6);
    }
  }
  int failed = -2;
  auto never = [](const RecomputePolicy&, int) -> std::optional<RecomputeCost> { return std::nullopt; };
  EXPECT_TRUE(choose_recompute(6, stages, recompute_only, never, &failed).per_layer.empty());
  EXPECT_EQ(failed, 0);
}

PlanInput gpt2_124m(int seq) {
  PlanInput in;
  in.model = ModelShape{0, 12, 768, 12, 50257, seq};
  in.layout.stage = ZeroStage::kNone;
  in.micro_batch = 8;
  return in;
}

// Korthikanti's terms per kind (16-bit, tiled attention: no score term): all 34 s b h; mlp drops the GELU's output
// 8 s b h; attention the core's output 2 s b h (and without tiling the scores 5 a s^2 b too); full keeps 2 s b h.
TEST(RecomputePolicy, PlannerTermsForEachKind) {
  PlanInput in = gpt2_124m(1024);
  const double s = 1024, b = 8, h = 768, a = 12;
  EXPECT_DOUBLE_EQ(activation_bytes_of(in, K::kNone), 34 * s * b * h);
  EXPECT_DOUBLE_EQ(activation_bytes_of(in, K::kMlp), 26 * s * b * h);
  EXPECT_DOUBLE_EQ(activation_bytes_of(in, K::kAttention), 32 * s * b * h);
  EXPECT_DOUBLE_EQ(activation_bytes_of(in, K::kFull), 2 * s * b * h);
  in.tiled_attention = false;
  EXPECT_DOUBLE_EQ(activation_bytes_of(in, K::kAttention), 32 * s * b * h);
  EXPECT_DOUBLE_EQ(activation_bytes_of(in, K::kNone), s * b * h * (34 + 5 * a * s / h));
  in.tiled_attention = true;
  // Per layer, averaged over a policy; the FLOPs each kind runs again.
  in.recompute = RecomputePolicy::parse("full", 2);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), (34 + 2) / 2.0 * s * b * h);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(in, K::kFull), 2 * (12 * h * h + 13 * h) + 4 * h * s);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(in, K::kAttention), 4 * h * s);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(in, K::kMlp), 0);
  EXPECT_DOUBLE_EQ(recompute_forward_fraction(in), 0.5);
  // Offload: the layers' activations in host memory, two layers' staging on the device.
  in.recompute = RecomputePolicy::parse("offload");
  const MemoryPlan p = plan_memory(in);
  in.recompute = RecomputePolicy{};
  const MemoryPlan q = plan_memory(in);
  EXPECT_DOUBLE_EQ(p.host, 12 * 34 * s * b * h);
  EXPECT_DOUBLE_EQ(p.activations, q.activations - 12 * 34 * s * b * h + 2 * 34 * s * b * h);
}

// strata-plan --recompute auto: the choice fits the device memory, a smaller memory recomputes at least as much, and
// one that nothing fits falls back to full recomputation (the advice then names the next change).
TEST(RecomputePolicy, PlannerAutoFitsAndRecomputesMoreUnderLessMemory) {
  double last = -1;
  for (double gb : {40.0, 20.0, 16.0, 14.0}) {
    PlanInput in = gpt2_124m(4096);
    in.hardware.device_memory = gb * 1e9;
    in.recompute = RecomputePolicy::parse("auto");
    in.recompute = choose_plan_recompute(in);
    const MemoryPlan p = plan_memory(in);
    EXPECT_TRUE(p.fits) << gb << " GB: " << in.recompute.flags(12);
    EXPECT_GE(p.recompute_flops, last) << gb << " GB";
    last = p.recompute_flops;
  }
  PlanInput in = gpt2_124m(4096);
  in.hardware.device_memory = 10e9;
  EXPECT_EQ(choose_plan_recompute(in).count(K::kFull, 12), 12);
  // The planner's fit advice tries the GELU first: no matrix product again.
  in.hardware.device_memory = 21e9;
  const MemoryPlan p = plan_memory(in);
  EXPECT_NE(p.advice.find("--recompute mlp"), std::string::npos) << p.advice;
}

}  // namespace
}  // namespace strata
