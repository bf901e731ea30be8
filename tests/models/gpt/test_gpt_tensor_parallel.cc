// Tensor parallelism in the GPT trainer (CPU backend, np 1, 2 and 4): replicated parameters stay bitwise equal across
// the tp ranks after every step; tp layouts train to the PyTorch reference's losses; the tensor-parallel data flow at
// tp 1 equals the plain one. tp_runs.cmake holds every layout against the 1-rank run through train_gpt.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>

#include "collectives/rank_values.h"
#include "models/gpt/training/gpt_trainer.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;
using test::load_json;
using test::max_rel;
using test::reference_config;
using test::run;

const std::string kData = test::data_dir();

struct Layout {
  int tp;
  bool sp;
  ZeroStage stage;
  DType param_dtype;
  std::string describe() const {
    return fmt::format("tp {}{} ZeRO {} {}", tp, sp ? " sp" : "", static_cast<int>(stage), dtype_name(param_dtype));
  }
};

// The layouts this world size can hold: tp dividing the world and the heads (each tp rank takes whole heads).
std::vector<Layout> layouts(int world, int heads) {
  std::vector<Layout> out;
  for (int tp : {2, 4})
    if (tp <= world && world % tp == 0 && heads % tp == 0)
      for (bool sp : {false, true})
        for (ZeroStage stage : {ZeroStage::kOptimizerState, ZeroStage::kParameters})
          out.push_back({tp, sp, stage, stage == ZeroStage::kParameters && sp ? DType::kBF16 : DType::kF32});
  return out;
}

TrainConfig tp_config(const Layout& l, int world) {
  auto ref = load_json(kData + "gpt_tiny_ref.json");
  TrainConfig cfg = reference_config(ref, world / l.tp);  // the same global rows over the data-parallel ranks
  cfg.tp = l.tp;
  cfg.sequence_parallel = l.sp;
  cfg.sharding.stage = l.stage;
  cfg.sharding.mixed_precision.param_dtype = l.param_dtype;
  return cfg;
}

// This rank's owned values of every replicated slot (master weights), hashed: (hash, element count).
std::pair<std::uint64_t, std::uint64_t> replicated_hash(GptTrainer& trainer) {
  ShardedParameters& params = trainer.model().parameters();
  params.stream().synchronize();
  std::uint64_t h = 1469598103934665603ULL, n = 0;
  for (int u = 0; u < params.num_units(); ++u) {
    const UnitShard shard = params.unit(u);
    for (const ShardSegment& seg : params.owned_segments(u)) {
      if (!shard.layout->slots()[seg.slot].tp.replicated()) continue;
      const unsigned char* p = reinterpret_cast<const unsigned char*>(shard.master + seg.shard_begin);
      for (std::size_t i = 0; i < seg.length * 4; ++i) h = (h ^ p[i]) * 1099511628211ULL;
      n += seg.length;
    }
  }
  return {h, n};
}

TEST(GptTensorParallel, ReplicatedParametersAreBitwiseEqualAcrossTpRanksAfterEveryStep) {
  const int world = runtime().world_size();
  const auto cases = layouts(world, 4);
  if (cases.empty()) GTEST_SKIP() << "tensor parallelism needs 2 or more ranks";
  for (const Layout& l : cases) {
    TrainConfig cfg = tp_config(l, world);
    cfg.model.heads = 4;  // 4 heads of 8 channels: tp 4 holds one head per rank
    TokenFile data = TokenFile::open(kData + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
    GptTrainer trainer(runtime(), cfg, data);
    Communicator& tp = trainer.mesh().tp();
    for (int step = 0; step < 8; ++step) {
      trainer.step(step);
      const auto [hash, count] = replicated_hash(trainer);
      // Two 32-bit halves, exact in a double.
      const std::vector<double> lo = all_gather_values(tp, static_cast<double>(hash & 0xffffffffULL));
      const std::vector<double> hi = all_gather_values(tp, static_cast<double>(hash >> 32));
      const std::vector<double> counts = all_gather_values(tp, static_cast<double>(count));
      ASSERT_GT(count, 0u) << l.describe() << ": this rank owns no replicated element; the check would be empty";
      for (int r = 0; r < tp.size(); ++r) {
        EXPECT_EQ(counts[static_cast<std::size_t>(r)], static_cast<double>(count)) << l.describe();
        EXPECT_TRUE(lo[static_cast<std::size_t>(r)] == lo[0] && hi[static_cast<std::size_t>(r)] == hi[0])
            << l.describe() << ", step " << step << ": tp rank " << r
            << " holds other replicated parameters (LayerNorms, biases of the row-parallel layers, wpe) than tp rank 0";
      }
    }
  }
}

TEST(GptTensorParallel, LossesEqualThePyTorchReference) {
  const int world = runtime().world_size();
  auto ref = load_json(kData + "gpt_tiny_ref.json");
  const test::Trajectory want = test::reference_trajectory(ref);
  const auto cases = layouts(world, ref["config"]["heads"].get<int>());
  if (cases.empty()) GTEST_SKIP() << "tensor parallelism needs 2 or more ranks and heads dividing by tp";
  for (const Layout& l : cases) {
    if (l.param_dtype != DType::kF32) continue;  // the reference is f32
    test::expect_reference(test::trajectory(tp_config(l, world), static_cast<int>(want.losses.size())), want,
                           fmt::format("{}, {} ranks", l.describe(), world));
  }
}

TEST(GptTensorParallel, TensorParallelDataFlowAtTpOneEqualsThePlainPath) {
  // tp 1 through the vocabulary-parallel loss, the bias added after the (empty) reduction and, with sequence
  // parallelism, the sequence gather / scatter: the same values as the plain kernels up to round-off.
  auto ref = load_json(kData + "gpt_tiny_ref.json");
  TrainConfig cfg = reference_config(ref, runtime().world_size());
  const std::vector<double> plain = run(cfg, 10);
  for (bool sp : {false, true}) {
    cfg.tp_kernels = true;
    cfg.sequence_parallel = sp;
    const double err = max_rel(run(cfg, 10), plain);
    EXPECT_LE(err, 1e-6) << (sp ? "with" : "without") << " sequence parallelism";
  }
}

}  // namespace
}  // namespace strata::gpt
