// GPT resume tests (CPU backend, np 1, 2 and 4; the tiny reference model): 10 steps, a checkpoint, a new trainer
// that resumes from it, 10 more steps: the 20 losses and gradient norms equal an uninterrupted run's bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "models/gpt/training/gpt_trainer.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;

constexpr int kSteps = 20, kStop = 10;

struct Variant {
  std::string name;
  TrainConfig cfg;
};

// ZeRO 0-3 in f32, and one stage each for the variants (not the cross product, to keep np 4 on two cores short):
// gradient accumulation at ZeRO 2, bf16 parameters at ZeRO 3, the optimizer offloaded at ZeRO 1 and at ZeRO 3 with
// the parameters, warmup 3 + cosine over the 20 steps at ZeRO 3, and an asynchronous save every 5 steps at ZeRO 3.
std::vector<Variant> variants(int world) {
  const TrainConfig base = test::reference_config(test::load_json(test::data_dir() + "gpt_tiny_ref.json"), world);
  std::vector<Variant> out;
  for (int stage = 0; stage <= 3; ++stage) {
    Variant v{fmt::format("ZeRO {}", stage), base};
    v.cfg.sharding.stage = zero_stage_from_int(stage);
    out.push_back(v);
  }
  Variant accum{"ZeRO 2, grad_accum 2", base};
  accum.cfg.sharding.stage = ZeroStage::kGradients;
  accum.cfg.grad_accum = 2;
  out.push_back(accum);
  Variant bf16{"ZeRO 3, bf16 parameters", base};
  bf16.cfg.sharding.mixed_precision.param_dtype = DType::kBF16;
  out.push_back(bf16);
  Variant offload{"ZeRO 1, offload optimizer", base};
  offload.cfg.sharding.stage = ZeroStage::kOptimizerState;
  offload.cfg.sharding.offload = OffloadPolicy::kOptimizer;
  out.push_back(offload);
  Variant offload3{"ZeRO 3, offload optimizer+params", base};
  offload3.cfg.sharding.offload = OffloadPolicy::kOptimizerAndParams;
  out.push_back(offload3);
  Variant schedule{"ZeRO 3, warmup 3 + cosine 20", base};
  schedule.cfg.warmup_steps = 3;
  schedule.cfg.lr_decay = LrDecay::kCosine;
  schedule.cfg.decay_steps = kSteps;
  out.push_back(schedule);
  Variant async{"ZeRO 3, asynchronous save every 5 steps", base};
  async.cfg.checkpoint.async = true;
  async.cfg.checkpoint_every = 5;
  out.push_back(async);
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(GptCheckpoint, ResumeAtTheSameLayoutIsBitwise) {
  strata::test::SharedScratchDir root("gpt_ckpt");
  const int world = runtime().world_size();
  int n = 0;
  for (const Variant& v : variants(world)) {
    SCOPED_TRACE(v.name);
    TokenFile data = TokenFile::open(test::data_dir() + "gpt_tiny_tokens.bin", v.cfg.seq, v.cfg.model.vocab);
    std::vector<StepRecord> straight, stopped;
    {
      TrainConfig plain = v.cfg;
      plain.checkpoint = CheckpointOptions{};
      plain.checkpoint_every = 0;
      GptTrainer t(runtime(), plain, data);
      for (int s = 0; s < kSteps; ++s) straight.push_back(t.step(s));
    }
    TrainConfig cfg = v.cfg;
    cfg.checkpoint.dir = root.dir(fmt::format("variant_{}", n++));
    {
      GptTrainer t(runtime(), cfg, data);
      EXPECT_EQ(t.start_step(), 0);
      EXPECT_EQ(t.resumed_from(), -1);
      for (int s = 0; s < kStop; ++s) stopped.push_back(t.step(s));
      t.finish();
      ASSERT_NE(t.checkpointer(), nullptr);
      EXPECT_EQ(t.checkpointer()->latest_step(), kStop);
    }
    cfg.resume = true;
    GptTrainer resumed(runtime(), cfg, data);
    EXPECT_EQ(resumed.start_step(), kStop);
    EXPECT_EQ(resumed.resumed_from(), kStop);
    EXPECT_EQ(resumed.optimizer().steps_taken(), kStop);
    for (int s = resumed.start_step(); s < kSteps; ++s) stopped.push_back(resumed.step(s));
    resumed.finish();
    EXPECT_EQ(resumed.checkpointer()->latest_step(), kSteps);
    ASSERT_EQ(stopped.size(), straight.size());
    for (std::size_t s = 0; s < straight.size(); ++s) {
      EXPECT_TRUE(same_bits(stopped[s].loss, straight[s].loss))
          << v.name << " step " << s << ": loss " << fmt::format("{} vs {}", stopped[s].loss, straight[s].loss);
      EXPECT_TRUE(same_bits(stopped[s].grad_norm, straight[s].grad_norm))
          << v.name << " step " << s << ": grad_norm "
          << fmt::format("{} vs {}", stopped[s].grad_norm, straight[s].grad_norm);
    }
    if (runtime().rank() == 0)
      std::printf("%s, %d ranks: stopped at step %d, resumed, final loss %.9f (uninterrupted %.9f)\n", v.name.c_str(),
                  world, kStop, stopped.back().loss, straight.back().loss);
  }
}

// resumed_from() is the step of the checkpoint a resume loaded (its directory's number: the trainer's step count),
// not the optimizer's step count, which leaves out skipped steps: with f16 parameters and dynamic loss scaling the
// first steps overflow and are skipped.
TEST(GptCheckpoint, ResumedFromIsTheCheckpointStepWhenStepsWereSkipped) {
  strata::test::SharedScratchDir root("gpt_ckpt");
  TrainConfig cfg =
      test::reference_config(test::load_json(test::data_dir() + "gpt_tiny_ref.json"), runtime().world_size());
  cfg.sharding.mixed_precision.param_dtype = DType::kF16;
  cfg.optimizer.dynamic_loss_scale = true;     // as train_gpt sets it for f16
  cfg.optimizer.initial_loss_scale = 1 << 22;  // overflows f16 for the first few steps, as a larger model would
  cfg.checkpoint.dir = root.dir("f16");
  TokenFile data = TokenFile::open(test::data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  int skipped = 0;
  {
    GptTrainer t(runtime(), cfg, data);
    for (int s = 0; s < kStop; ++s) skipped += t.step(s).skipped ? 1 : 0;
    t.finish();
  }
  EXPECT_GT(skipped, 0) << "the premise: the initial loss scale overflows f16 at first";
  EXPECT_LT(skipped, kStop) << "the premise: the loss scale comes down and steps are taken";
  cfg.resume = true;
  GptTrainer resumed(runtime(), cfg, data);
  EXPECT_EQ(resumed.start_step(), kStop);
  EXPECT_EQ(resumed.checkpointer()->latest_step(), kStop);
  EXPECT_EQ(resumed.resumed_from(), kStop) << "the optimizer took " << resumed.optimizer().steps_taken() << " steps of "
                                           << kStop << " (" << skipped << " skipped)";
}

// finish() after a resume that ran no step (train_gpt --resume with --stop-at or --steps at or below the checkpoint)
// saves nothing: the trainer stands at the step it loaded, so the state is never committed under another step's name.
TEST(GptCheckpoint, FinishAfterAResumeDoesNotMislabelTheState) {
  strata::test::SharedScratchDir root("gpt_ckpt");
  TrainConfig cfg =
      test::reference_config(test::load_json(test::data_dir() + "gpt_tiny_ref.json"), runtime().world_size());
  cfg.checkpoint.dir = root.dir("finish");
  TokenFile data = TokenFile::open(test::data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  {
    GptTrainer t(runtime(), cfg, data);
    for (int s = 0; s < kStop; ++s) t.step(s);
    t.finish();
  }
  cfg.resume = true;
  {
    GptTrainer resumed(runtime(), cfg, data);
    EXPECT_EQ(resumed.start_step(), kStop);
    resumed.finish();  // stands at the step it loaded: nothing new to save
    EXPECT_EQ(resumed.checkpointer()->latest_step(), kStop) << "the step-10 state was committed as step 5";
  }
  GptTrainer again(runtime(), cfg, data);
  EXPECT_EQ(again.start_step(), kStop) << "a resume goes back to step " << again.start_step()
                                       << " with the weights of step " << again.optimizer().steps_taken();
}

}  // namespace
}  // namespace strata::gpt
