// Recomputation and activation offload on the GPT (runtime/memory/recompute_policy.h): every policy gives losses
// and gradient norms bitwise equal to keeping everything, under data, tensor (with sequence parallelism) and pipeline
// parallelism; what each keeps is the prediction, category by category, on the device and in host memory; and
// --recompute auto picks, under a budget, a policy that fits with no more recomputation than a larger budget's.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/gpt/model/model_flops.h"
#include "models/gpt/training/gpt_memory.h"
#include "models/gpt/training/gpt_trainer.h"
#include "tests/support/gpt_memory_checks.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;
using test::expect_step_as_predicted;

// The policies the tests run, as --recompute (and --recompute-every) would give them, on the 4 blocks of the model.
struct Named {
  const char* text;
  int every;
};
const Named kPolicies[] = {{"mlp", 1},     {"attention", 1}, {"full", 1}, {"offload", 1}, {"full", 2},
                           {"attention,offload,mlp,full", 1}, {"offload,none,offload,attention", 1}};

// Layouts: data parallel over the world, tp 2 with sequence parallelism, pp 2 under 1F1B with 4 micro-batches, and
// pp 2 interleaved (two chunks a rank: the buffers at a chunk position serve both chunks' blocks).
enum class Layout { kData, kTensor, kPipeline, kInterleaved };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kData: return "dp";
    case Layout::kTensor: return "tp 2 (sequence parallel)";
    case Layout::kPipeline: return "pp 2 (1F1B)";
    case Layout::kInterleaved: return "pp 2 (interleaved x 2)";
  }
  return "?";
}

// A 4-block model of the spec's init on 4 global rows; nullopt-like false when the layout does not divide the world.
bool config_for(Layout layout, int world, TrainConfig* out) {
  TrainConfig cfg;
  cfg.model = GptConfig{4, 2, 32, 64, 16};
  cfg.seq = 16;
  cfg.adamw.lr = 1e-2;
  cfg.seed = 7;
  const int model_parallel = layout == Layout::kData ? 1 : 2;
  if (world % model_parallel != 0 || 4 % (world / model_parallel) != 0) return false;
  cfg.batch = 4 / (world / model_parallel);
  if (layout == Layout::kTensor) {
    cfg.tp = 2;
    cfg.sequence_parallel = true;
  }
  if (layout == Layout::kPipeline || layout == Layout::kInterleaved) {
    cfg.pp = 2;
    cfg.batch = 4 / (world / 2);  // the step's rows per data-parallel rank, split into micro-batches
    cfg.microbatches = 2;
    if (cfg.batch % cfg.microbatches != 0) return false;
    if (layout == Layout::kInterleaved) {
      cfg.pp_schedule = PipelineScheduleKind::kInterleaved;
      cfg.pp_virtual = 2;
    }
  }
  *out = cfg;
  return true;
}

TokenFile tokens(int seq) { return TokenFile::from_tokens(synthetic_tokens(4096, 64, 5), seq, 64); }

test::Trajectory train(const TrainConfig& cfg, int steps) {
  const TokenFile data = tokens(cfg.seq);  // the trainer reads it through every step
  GptTrainer trainer(runtime(), cfg, data);
  test::Trajectory t;
  for (int s = 0; s < steps; ++s) {
    const StepRecord r = trainer.step(s);
    t.losses.push_back(r.loss);
    t.grad_norms.push_back(r.grad_norm);
  }
  return t;
}

// --recompute auto for `cfg` with `room` bytes of device budget left to the trainer (collective): the policy it chose,
// after two steps that must stay within the budget.
RecomputePolicy auto_within(const TrainConfig& cfg, std::uint64_t room, const TokenFile& data) {
  Device& dev = runtime().device();
  TrainConfig automatic = cfg;
  automatic.recompute = RecomputePolicy::parse("auto");
  const std::size_t saved = dev.memory_budget();
  dev.set_memory_budget(dev.memory_stats().current_total() + room);
  RecomputePolicy chosen;
  EXPECT_NO_THROW({
    GptTrainer trainer(runtime(), automatic, data);
    chosen = trainer.config().recompute;
    trainer.step(0);
    trainer.step(1);
  }) << "the chosen policy went over the budget";
  dev.set_memory_budget(saved);
  return chosen;
}

// Recomputation reruns the same kernels on the same inputs, and offload copies bytes: nothing may change by a bit.
TEST(GptRecompute, EveryPolicyIsBitwiseEqualToKeepingEverything) {
  const int world = runtime().world_size();
  int ran = 0;
  for (Layout layout : {Layout::kData, Layout::kTensor, Layout::kPipeline, Layout::kInterleaved}) {
    TrainConfig cfg;
    if (!config_for(layout, world, &cfg)) continue;
    const test::Trajectory plain = train(cfg, 3);
    for (const Named& p : kPolicies) {
      cfg.recompute = RecomputePolicy::parse(p.text, p.every);
      SCOPED_TRACE(fmt::format("{} at np {}, --recompute {}", layout_name(layout), world,
                               cfg.recompute.flags(cfg.model.layers)));
      const test::Trajectory got = train(cfg, 3);
      EXPECT_EQ(got.losses, plain.losses);
      EXPECT_EQ(got.grad_norms, plain.grad_norms);
      ++ran;
    }
  }
  EXPECT_GE(ran, 7);
}

// The same with everything else that changes the step: ZeRO 2, hybrid sharding (2 replicas at np 4), bf16 products,
// gradient accumulation, and the optimizer in host memory.
TEST(GptRecompute, PoliciesComposeWithShardingPrecisionAndOffload) {
  const int world = runtime().world_size();
  TrainConfig cfg;
  ASSERT_TRUE(config_for(Layout::kData, world, &cfg));
  cfg.sharding.stage = ZeroStage::kGradients;
  if (world == 4) cfg.dp_replicate = 2;
  cfg.precision.matmul = DType::kBF16;
  cfg.grad_accum = 2;
  cfg.sharding.offload = OffloadPolicy::kOptimizer;
  const test::Trajectory plain = train(cfg, 3);
  for (const char* policy : {"offload,full,attention,mlp", "full"}) {
    cfg.recompute = RecomputePolicy::parse(policy);
    SCOPED_TRACE(fmt::format("np {}, --recompute {}", world, policy));
    const test::Trajectory got = train(cfg, 3);
    EXPECT_EQ(got.losses, plain.losses);
    EXPECT_EQ(got.grad_norms, plain.grad_norms);
  }
}

// Every policy's step memory against the ledgers: the blocks' kept activations, what recomputation rebuilds (one set
// for all blocks), offload's two staging sets on the device and its host sets, within 2% per category.
TEST(GptRecompute, MemoryIsAsPredictedForEveryPolicy) {
  const int world = runtime().world_size();
  int ran = 0;
  for (Layout layout : {Layout::kData, Layout::kTensor, Layout::kPipeline, Layout::kInterleaved}) {
    TrainConfig cfg;
    if (!config_for(layout, world, &cfg)) continue;
    const std::uint64_t in_place = world > 1 && cfg.tp == world ? predict_tp_staging(cfg).compute : 0;
    test::grow_world_lane(in_place);
    for (const Named& p : kPolicies) {
      cfg.recompute = RecomputePolicy::parse(p.text, p.every);
      SCOPED_TRACE(fmt::format("{} at np {}, --recompute {}", layout_name(layout), world,
                               cfg.recompute.flags(cfg.model.layers)));
      expect_step_as_predicted(cfg, tokens(cfg.seq), in_place);
      ++ran;
    }
  }
  // With ZeRO-3, bf16 parameters and the optimizer and parameters offloaded as well.
  TrainConfig cfg;
  ASSERT_TRUE(config_for(Layout::kData, world, &cfg));
  cfg.sharding.mixed_precision.param_dtype = DType::kBF16;
  cfg.sharding.offload = OffloadPolicy::kOptimizerAndParams;
  cfg.recompute = RecomputePolicy::parse("offload,attention,full,mlp");
  expect_step_as_predicted(cfg, tokens(cfg.seq));
  EXPECT_GE(ran, 7);
}

// Each kind gives up what block_activations.h says, and no more: against keeping everything, the activations fall
// by exactly the dropped buffers of every block (full and offload: all of them; the rebuilt set is workspace).
TEST(GptRecompute, EachKindKeepsLessThanTheOneBefore) {
  TrainConfig cfg;
  ASSERT_TRUE(config_for(Layout::kData, runtime().world_size(), &cfg));
  auto acts = [&](const char* policy) {
    cfg.recompute = RecomputePolicy::parse(policy);
    return predict_step_memory(cfg, runtime().world_size())[static_cast<std::size_t>(MemCategory::kActivations)];
  };
  const std::uint64_t none = acts("none"), mlp = acts("mlp"), attention = acts("attention"), full = acts("full"),
                      offload = acts("offload");
  const std::uint64_t N = static_cast<std::uint64_t>(cfg.batch) * cfg.seq, C = 32, L = 4;
  EXPECT_EQ(none - mlp, L * 4 * (4 * N * C)) << "the GELU's output, [N, 4C] per block";
  EXPECT_EQ(none - attention, L * 4 * (N * C + N * 2)) << "the attention output [N, C] and lse [N, heads]";
  EXPECT_EQ(full, offload) << "neither keeps more than the block inputs on the device";
  EXPECT_LT(full, attention);
}

// --recompute auto under three budgets: 2% above the plain run's memory (nothing recomputed; auto keeps 1% free),
// halfway to full recomputation's, and 2% above full recomputation's. Each choice fits 99% of its budget (predicted,
// and the steps run within it), and a smaller budget never recomputes less. Below the smallest policy (full
// recomputation) it is an error with the cheapest change.
TEST(GptRecompute, AutoFitsThreeBudgetsAndRefusesOneBelowAll) {
  Device& dev = runtime().device();
  const int world = runtime().world_size();
  TrainConfig cfg;
  ASSERT_TRUE(config_for(Layout::kData, world, &cfg));
  cfg.seq = 16;
  cfg.sharding.stage = ZeroStage::kNone;
  TrainConfig fixed = cfg;
  fixed.recompute = RecomputePolicy::full();
  const std::uint64_t plain = total(predict_step_memory(cfg, world)), full = total(predict_step_memory(fixed, world));
  ASSERT_LT(full, plain);
  const std::size_t saved = dev.memory_budget();
  TrainConfig automatic = cfg;
  automatic.recompute = RecomputePolicy::parse("auto");
  const TokenFile data = tokens(cfg.seq);
  double last_flops = -1;
  for (std::uint64_t room : {plain + plain / 50, (plain + full) / 2, full + full / 50}) {
    SCOPED_TRACE(fmt::format("budget {} bytes (plain {}, full recomputation {})", room, plain, full));
    const RecomputePolicy chosen = auto_within(cfg, room, data);
    ASSERT_EQ(chosen.per_layer.size(), 4u);
    EXPECT_TRUE(chosen.automatic);
    TrainConfig c = cfg;
    c.recompute = chosen;
    EXPECT_LE(total(predict_step_memory(c, world)), room - room / 100) << chosen.flags(4);
    const double flops = static_cast<double>(ModelFlops::recompute_per_token(cfg.model, cfg.seq, chosen));
    EXPECT_GE(flops, last_flops) << "a smaller budget recomputes at least as much: " << chosen.flags(4);
    if (room > plain) {
      EXPECT_EQ(chosen.count(BlockRecompute::kNone, 4), 4) << chosen.flags(4);
    } else {
      EXPECT_TRUE(chosen.any()) << chosen.flags(4);
    }
    last_flops = flops;
    if (runtime().rank() == 0)
      std::printf("budget %llu bytes: --recompute auto chose %s (%s)\n", static_cast<unsigned long long>(room),
                  chosen.flags(4).c_str(), chosen.describe(4).c_str());
  }
  // Below every policy (full recomputation, the least device memory of all).
  dev.set_memory_budget(dev.memory_stats().current_total() + full);
  std::string message;
  ErrorCode code = ErrorCode::kInternal;
  try {
    GptTrainer trainer(runtime(), automatic, data);
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  }
  dev.set_memory_budget(saved);
  EXPECT_EQ(code, ErrorCode::kOutOfMemory) << message;
  EXPECT_NE(message.find("--recompute auto: no recomputation or activation offload"), std::string::npos) << message;
  EXPECT_NE(message.find("the cheapest change that fits: "), std::string::npos) << message;
}

// Under a pipeline each stage chooses for its own blocks: with one budget for all ranks, 2% above what the lighter
// stage needs keeping everything, that stage keeps everything and the heavier one (1F1B keeps 2 micro-batches on the
// first stage) recomputes or offloads; every rank's choice fits and trains.
TEST(GptRecompute, AutoChoosesPerPipelineStage) {
  const int world = runtime().world_size();
  TrainConfig cfg;
  if (!config_for(Layout::kPipeline, world, &cfg)) GTEST_SKIP() << "pp 2 needs an even world";
  cfg.seq = 32;
  cfg.model.ctx = 32;
  const std::uint64_t need0 = total(predict_step_memory(cfg, world, 0));
  const std::uint64_t need1 = total(predict_step_memory(cfg, world, 1));
  const int light = need0 < need1 ? 0 : 1;
  const std::uint64_t room = std::min(need0, need1) * 102 / 100;
  ASSERT_GT(std::max(need0, need1), room) << "the test's premise: the stages differ by more than 2%";
  const RecomputePolicy chosen = auto_within(cfg, room, tokens(cfg.seq));
  ASSERT_EQ(chosen.per_layer.size(), 4u);
  const int first_of_light = light == 0 ? 0 : 2;
  for (int l = first_of_light; l < first_of_light + 2; ++l)
    EXPECT_EQ(chosen.at(l), BlockRecompute::kNone) << "the lighter stage " << light << ": " << chosen.flags(4);
  const int first_of_heavy = light == 0 ? 2 : 0;
  EXPECT_TRUE(chosen.at(first_of_heavy) != BlockRecompute::kNone ||
              chosen.at(first_of_heavy + 1) != BlockRecompute::kNone)
      << "the heavier stage " << 1 - light << ": " << chosen.flags(4);
  TrainConfig c = cfg;
  c.recompute = chosen;
  for (int r = 0; r < 2; ++r) EXPECT_LE(total(predict_step_memory(c, world, r)), room - room / 100) << "stage " << r;
}

// Recomputed FLOPs: a full block reruns its forward (2 x its parameters + 4 C T per token), the attention core
// 4 C T, the GELU and offload none; 8 / 6 of the model's matrix products under full recomputation, attention aside.
TEST(GptRecompute, RecomputedFlopsAreCountedBesideTheModels) {
  const GptConfig m{4, 2, 32, 64, 16};
  const std::uint64_t C = 32, T = 16, block = 12 * C * C + 13 * C;
  EXPECT_EQ(ModelFlops::recompute_per_token(m, 16, RecomputePolicy::full()), 4 * (2 * block + 4 * C * T));
  EXPECT_EQ(ModelFlops::recompute_per_token(m, 16, RecomputePolicy::parse("attention")), 4 * (4 * C * T));
  EXPECT_EQ(ModelFlops::recompute_per_token(m, 16, RecomputePolicy::parse("mlp")), 0u);
  EXPECT_EQ(ModelFlops::recompute_per_token(m, 16, RecomputePolicy::parse("offload")), 0u);
  EXPECT_EQ(ModelFlops::recompute_per_token(m, 16, RecomputePolicy::parse("full", 2)), 2 * (2 * block + 4 * C * T));
}

}  // namespace
}  // namespace strata::gpt
