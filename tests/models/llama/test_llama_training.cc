// Llama-style training (CPU backend, np 1, 2 and 4; the same 4 global rows a step) against an independent PyTorch
// implementation of Hugging Face's LlamaForCausalLM (tests/reference/llama_reference.py, held to transformers by
// check_llama_transformers.py): grouped-query and multi-query attention, tied and untied heads, q, k, v biases, llama3
// rope scaling; every ZeRO stage, hybrid sharding, pipelines and context parallelism; recomputation and activation
// offload bitwise; bf16 within the bf16 bar; checkpoints resumed at other layouts; memory as predicted.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt/training/gpt_memory.h"
#include "models/gpt/training/gpt_trainer.h"
#include "tests/support/gpt_memory_checks.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;
using test::expect_reference;
using test::load_json;
using test::llama_reference_config;
using test::max_rel;
using test::reference_trajectory;
using test::trajectory;

const std::string kData = test::data_dir();

struct Variant {
  const char* file;  // tests/data/<file>.json
  const char* what;
};
// Each reference: the tiny shape (4 heads over 2 key-value heads, untied), then one change each.
const Variant kVariants[] = {{"llama_tiny_ref", "GQA 4/2, untied"},
                             {"llama_tiny_tied_ref", "tied"},
                             {"llama_tiny_bias_ref", "q, k, v biases"},
                             {"llama_tiny_mqa_ref", "one key-value head"},
                             {"llama_tiny_rope_ref", "llama3 rope scaling"}};

// Every variant at ZeRO 3 over the world, each at ZeRO 0 and 1 too for the first.
TEST(LlamaTraining, EqualsThePyTorchReference) {
  const int world = runtime().world_size();
  for (const Variant& v : kVariants) {
    auto ref = load_json(kData + v.file + ".json");
    const test::Trajectory want = reference_trajectory(ref);
    for (int stage : {0, 1, 3}) {
      if (stage != 3 && std::string(v.file) != "llama_tiny_ref") continue;
      TrainConfig cfg = llama_reference_config(ref, world);
      cfg.sharding.stage = zero_stage_from_int(stage);
      expect_reference(trajectory(cfg, static_cast<int>(want.losses.size())), want,
                       fmt::format("{}, ZeRO {}, {} ranks", v.what, stage, world));
    }
  }
}

// Hybrid sharding: the state sharded over 2 ranks and replicated across 2 (np 4).
TEST(LlamaTraining, HybridShardingEqualsThePyTorchReference) {
  const int world = runtime().world_size();
  if (world != 4) GTEST_SKIP() << "2 x 2 needs 4 ranks";
  auto ref = load_json(kData + "llama_tiny_ref.json");
  TrainConfig cfg = llama_reference_config(ref, world);
  cfg.dp_replicate = 2;
  const test::Trajectory want = reference_trajectory(ref);
  expect_reference(trajectory(cfg, static_cast<int>(want.losses.size())), want, "hybrid 2 x 2");
}

// Pipelines (pp 2 at np 2 and 4, 1F1B and GPipe): the untied head on the last stage, a tied one across the stages.
TEST(LlamaTraining, PipelineEqualsThePyTorchReference) {
  const int world = runtime().world_size();
  if (world < 2 || world % 2) GTEST_SKIP() << "pp 2";
  for (const char* file : {"llama_tiny_ref", "llama_tiny_tied_ref"}) {
    auto ref = load_json(kData + file + ".json");
    const test::Trajectory want = reference_trajectory(ref);
    for (PipelineScheduleKind kind : {PipelineScheduleKind::kGPipe, PipelineScheduleKind::kOneFOneB}) {
      TrainConfig cfg = llama_reference_config(ref, world / 2);
      cfg.pp = 2;
      cfg.pp_schedule = kind;
      cfg.microbatches = 2;
      expect_reference(trajectory(cfg, static_cast<int>(want.losses.size())), want,
                       fmt::format("{} at pp 2, {} ranks ({})", pipeline_schedule_name(kind), world, file));
    }
  }
}

// Context parallelism: each row's 8 positions in mirrored chunks over 2 ranks, each chunk rotated at its own
// positions, key-value heads round the ring.
TEST(LlamaTraining, ContextParallelEqualsThePyTorchReference) {
  const int world = runtime().world_size();
  if (world < 2 || world % 2) GTEST_SKIP() << "cp 2";
  for (const char* file : {"llama_tiny_ref", "llama_tiny_mqa_ref"}) {
    auto ref = load_json(kData + file + ".json");
    const test::Trajectory want = reference_trajectory(ref);
    TrainConfig cfg = llama_reference_config(ref, world / 2);
    cfg.cp = 2;
    expect_reference(trajectory(cfg, static_cast<int>(want.losses.size())), want,
                     fmt::format("cp 2, {} ranks ({})", world, file));
  }
}

// Tensor parallelism (tp 2 at np 2, tp 2 x dp 2 at np 4): q | k | v split in parts of the query heads' and the
// key-value heads' widths, with and without sequence parallelism, tied and untied, with q, k, v biases; and tp 2 x pp 2
// at np 4. Fewer key-value heads than tp ranks: one head shared by tp 2 (with and without sequence parallelism), and at
// np 4 tp 4 over 2 key-value heads, each shared by 2 ranks, with and without q, k, v biases.
TEST(LlamaTraining, TensorParallelEqualsThePyTorchReference) {
  const int world = runtime().world_size();
  if (world < 2 || world % 2) GTEST_SKIP() << "tp 2";
  for (const char* file : {"llama_tiny_ref", "llama_tiny_tied_ref", "llama_tiny_bias_ref"}) {
    auto ref = load_json(kData + file + ".json");
    const test::Trajectory want = reference_trajectory(ref);
    for (bool sp : {false, true}) {
      TrainConfig cfg = llama_reference_config(ref, world / 2);
      cfg.tp = 2;
      cfg.sequence_parallel = sp;
      expect_reference(trajectory(cfg, static_cast<int>(want.losses.size())), want,
                       fmt::format("tp 2{}, {} ranks ({})", sp ? " with sequence parallelism" : "", world, file));
    }
    if (world == 4) {
      TrainConfig cfg = llama_reference_config(ref, 1);
      cfg.tp = 2;
      cfg.pp = 2;
      cfg.microbatches = 2;
      expect_reference(trajectory(cfg, static_cast<int>(want.losses.size())), want,
                       fmt::format("tp 2 x pp 2 ({})", file));
    }
  }
  struct Shared {
    const char* file;
    int tp;
    bool sp;
  };
  for (const Shared& c : {Shared{"llama_tiny_mqa_ref", 2, false}, Shared{"llama_tiny_mqa_ref", 2, true},
                          Shared{"llama_tiny_ref", 4, false}, Shared{"llama_tiny_bias_ref", 4, true}}) {
    if (world % c.tp) continue;
    auto ref = load_json(kData + c.file + ".json");
    const test::Trajectory want = reference_trajectory(ref);
    TrainConfig cfg = llama_reference_config(ref, world / c.tp);
    cfg.tp = c.tp;
    cfg.sequence_parallel = c.sp;
    expect_reference(trajectory(cfg, static_cast<int>(want.losses.size())), want,
                     fmt::format("tp {}{} above the key-value heads, {} ranks ({})", c.tp, c.sp ? " with SP" : "",
                                 world, c.file));
  }
}

// Every recomputation kind and activation offload give the very same bits as keeping everything.
TEST(LlamaTraining, RecomputeAndOffloadAreBitwiseEqual) {
  const int world = runtime().world_size();
  auto ref = load_json(kData + "llama_tiny_bias_ref.json");
  TrainConfig cfg = llama_reference_config(ref, world);
  const test::Trajectory none = trajectory(cfg, 20);
  for (const char* kind : {"full", "attention", "mlp", "offload", "full,none"}) {
    cfg.recompute = RecomputePolicy::parse(kind, 1);
    const test::Trajectory t = trajectory(cfg, 20);
    EXPECT_EQ(t.losses, none.losses) << kind;
    EXPECT_EQ(t.grad_norms, none.grad_norms) << kind;
  }
}

// bf16 compute against PyTorch's autocast (lr 1e-3, as the GPT's bf16 reference): within the GPT's bar of 2e-4, and
// away from the f32 run beyond f32 round-off. Measured at np 1: bf16 1.1e-4 from autocast, autocast 4.0e-5 from the
// f32 run. The two round at different points (Strata's P and dS in the attention, as FlashAttention's bf16 kernels;
// autocast the products' outputs), so unlike the GPT's test this one does not ask Strata's bf16 run to be nearer
// autocast than the f32 run is: on this model it is not.
TEST(LlamaTraining, Bf16ComputeAgreesWithPyTorchAutocast) {
  const int world = runtime().world_size();
  auto ref = load_json(kData + "llama_tiny_ref_bf16.json");
  const std::vector<double> autocast = ref["losses"].get<std::vector<double>>();
  TrainConfig cfg = llama_reference_config(ref, world);
  const std::vector<double> f32 = test::run(cfg, static_cast<int>(autocast.size()));
  cfg.precision.matmul = DType::kBF16;
  const std::vector<double> bf16 = test::run(cfg, static_cast<int>(autocast.size()));
  EXPECT_LE(max_rel(bf16, autocast), 2e-4);
  EXPECT_GT(max_rel(bf16, f32), 1e-5) << "bf16 compute changed nothing beyond f32 round-off";
  if (runtime().rank() == 0)
    std::printf("%d ranks: bf16 vs autocast max %.3g; f32 vs autocast max %.3g; bf16 vs f32 max %.3g\n", world,
                max_rel(bf16, autocast), max_rel(f32, autocast), max_rel(bf16, f32));
}

// `resumed` (a run with --resume on the checkpoint of the reference's first 10 steps) goes on to step 20 as the
// uninterrupted reference run, within the bars.
void expect_resumed_as_reference(const TrainConfig& resumed, const TokenFile& data, const test::Trajectory& want,
                                 const std::string& what) {
  GptTrainer trainer(runtime(), resumed, data);
  ASSERT_EQ(trainer.start_step(), 10) << what;
  test::Trajectory got, tail;
  for (int s = trainer.start_step(); s < 20; ++s) {
    const StepRecord r = trainer.step(s);
    got.losses.push_back(r.loss);
    got.grad_norms.push_back(r.grad_norm);
  }
  tail.losses.assign(want.losses.begin() + 10, want.losses.end());
  tail.grad_norms.assign(want.grad_norms.begin() + 10, want.grad_norms.end());
  expect_reference(got, tail, what);
}

// A checkpoint saved at one layout resumes at another and goes on as the uninterrupted run (within the bars).
TEST(LlamaTraining, CheckpointResumesAtAnotherLayout) {
  const int world = runtime().world_size();
  if (world != 2) GTEST_SKIP() << "saved at dp 2, resumed at pp 2 on the same ranks";
  auto ref = load_json(kData + "llama_tiny_ref.json");
  const test::Trajectory want = reference_trajectory(ref);
  strata::test::SharedScratchDir root("llama_ckpt");
  const std::string dir = root.dir("resume");
  TrainConfig cfg = llama_reference_config(ref, world);
  cfg.checkpoint.dir = dir;
  const TokenFile data = TokenFile::open(kData + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);  // the trainers'
  {
    GptTrainer first(runtime(), cfg, data);
    for (int s = 0; s < 10; ++s) first.step(s);
    first.finish();
  }
  TrainConfig piped = llama_reference_config(ref, 1);
  piped.pp = 2;
  piped.microbatches = 2;
  piped.checkpoint.dir = dir;
  piped.resume = true;
  expect_resumed_as_reference(piped, data, want, "saved at dp 2, resumed at pp 2");
  // A GPT-2 run refuses the Llama checkpoint, naming both families.
  TrainConfig gpt = test::reference_config(load_json(kData + "gpt_tiny_ref.json"), world);
  gpt.checkpoint.dir = dir;
  gpt.resume = true;
  EXPECT_THROW(
      {
        try {
          GptTrainer third(runtime(), gpt, data);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("holds a llama model, this run trains a gpt2 one"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

// One key-value head shared by tp 2: its rank 0 saves it once, and the checkpoint resumes at dp 2, where each rank
// holds it whole, as the uninterrupted run.
TEST(LlamaTraining, CheckpointOfASharedKeyValueHeadResumesAtDp2) {
  const int world = runtime().world_size();
  if (world != 2) GTEST_SKIP() << "saved at tp 2, resumed at dp 2 on the same ranks";
  auto ref = load_json(kData + "llama_tiny_mqa_ref.json");
  const test::Trajectory want = reference_trajectory(ref);
  strata::test::SharedScratchDir root("llama_mqa_ckpt");
  TrainConfig cfg = llama_reference_config(ref, 1);
  cfg.tp = 2;
  cfg.checkpoint.dir = root.dir("resume");
  const TokenFile data = TokenFile::open(kData + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  {
    GptTrainer first(runtime(), cfg, data);
    for (int s = 0; s < 10; ++s) first.step(s);
    first.finish();
  }
  TrainConfig dp = llama_reference_config(ref, world);
  dp.checkpoint.dir = cfg.checkpoint.dir;
  dp.resume = true;
  expect_resumed_as_reference(dp, data, want, "one key-value head saved at tp 2, resumed at dp 2");
}

// Memory: predicted = measured in every category (untied and tied, with recomputation, at each ZeRO stage).
TEST(LlamaMemory, PredictedEqualsMeasuredInEveryCategory) {
  const int world = runtime().world_size();
  for (const char* file : {"llama_tiny_ref", "llama_tiny_tied_ref", "llama_tiny_bias_ref"}) {
    for (int stage : {0, 3}) {
      for (bool recompute : {false, true}) {
        TrainConfig cfg = llama_reference_config(load_json(kData + file + ".json"), world);
        cfg.sharding.stage = zero_stage_from_int(stage);
        if (recompute) cfg.recompute = RecomputePolicy::full();
        SCOPED_TRACE(fmt::format("{} ZeRO {} recompute {}", file, stage, recompute));
        const TokenFile data = TokenFile::open(kData + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
        test::expect_step_as_predicted(cfg, data);
      }
    }
  }
}

// The same under tensor, pipeline and context parallelism (np 2 and 4): a tp rank's slices (its query and key-value
// heads, or one key-value head shared with the other tp rank and the staging that sums its gradient), each pp rank's
// stage (the untied head on the last), the ring's key-value blocks of the key-value heads' width.
TEST(LlamaMemory, PredictedEqualsMeasuredUnderTensorPipelineAndContextParallelism) {
  const int world = runtime().world_size();
  if (world < 2 || world % 2) GTEST_SKIP() << "tp 2, pp 2, cp 2";
  // At np 2 the tp group is the runtime's world communicator, whose staging outlives each trainer: grown once here
  // beyond what a case needs, as the GPT's test does, and expected outside each case's peak.
  std::uint64_t world_lane = 0;
  if (world == 2)
    for (const char* file : {"llama_tiny_ref", "llama_tiny_tied_ref", "llama_tiny_mqa_ref"})
      for (bool sp : {false, true}) {
        TrainConfig cfg = llama_reference_config(load_json(kData + file + ".json"), 1);
        cfg.tp = 2;
        cfg.sequence_parallel = sp;
        world_lane = std::max(world_lane, predict_tp_staging(cfg).compute);
      }
  test::grow_world_lane(world_lane);
  for (const char* file : {"llama_tiny_ref", "llama_tiny_tied_ref", "llama_tiny_mqa_ref"}) {
    for (const char* layout : {"tp 2", "tp 2 sp", "pp 2", "cp 2"}) {
      TrainConfig cfg = llama_reference_config(load_json(kData + file + ".json"), world / 2);
      const std::string how = layout;
      if (how == "pp 2") {
        cfg.pp = 2;
        cfg.microbatches = 2;
      } else if (how == "cp 2") {
        cfg.cp = 2;
      } else {
        cfg.tp = 2;
        cfg.sequence_parallel = how == "tp 2 sp";
      }
      SCOPED_TRACE(fmt::format("{} {}", file, layout));
      const TokenFile data = TokenFile::open(kData + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
      test::expect_step_as_predicted(cfg, data, cfg.tp == world ? predict_tp_staging(cfg).compute : 0);
    }
  }
}

}  // namespace
}  // namespace strata::gpt
