// The validation loss (GptTrainer::evaluate, train_gpt --val-data) against the PyTorch reference's
// (tests/data/gpt_tiny_eval_ref.json: 2 batches of the held-out gpt_tiny_val_tokens.bin after every 5 steps), at every
// layout the ranks allow, with the training losses around it unchanged.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "models/gpt/training/gpt_trainer.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;
using test::data_dir;
using test::load_json;

// cfg's run of the reference's steps with an evaluation after every --eval-every steps: the training trajectory and
// the validation losses, each against the reference's within the loss bar.
void expect_eval_as_reference(TrainConfig cfg, const std::string& what) {
  const nlohmann::json ref = load_json(data_dir() + "gpt_tiny_eval_ref.json");
  const nlohmann::json& c = ref.at("config");
  const int every = c.at("eval_every").get<int>(), batches = c.at("eval_steps").get<int>();
  const test::Trajectory want = test::reference_trajectory(ref);
  std::vector<double> want_val, got_val;
  for (const auto& pair : ref.at("val_losses")) want_val.push_back(pair.at(1).get<double>());
  const TokenFile data = TokenFile::open(data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  const TokenFile val = TokenFile::open(data_dir() + "gpt_tiny_val_tokens.bin", cfg.seq, cfg.model.vocab);
  GptTrainer trainer(runtime(), cfg, data);
  test::Trajectory got;
  for (int s = 0; s < static_cast<int>(want.losses.size()); ++s) {
    const StepRecord r = trainer.step(s);
    got.losses.push_back(r.loss);
    got.grad_norms.push_back(r.grad_norm);
    if ((s + 1) % every == 0) {
      got_val.push_back(trainer.evaluate(val, batches));
      EXPECT_EQ(trainer.evaluate(val, batches), got_val.back()) << what << ": the same windows each time";
    }
  }
  test::expect_reference(got, want, what + ", training around the evaluations");
  ASSERT_EQ(got_val.size(), want_val.size()) << what;
  const double worst = test::max_rel(got_val, want_val);
  if (runtime().rank() == 0)
    std::printf("%s: validation loss max relative error vs PyTorch %.3g (bar %g)\n", what.c_str(), worst,
                test::kLossBar);
  EXPECT_LE(worst, test::kLossBar) << what;
}

TEST(GptEval, EqualsThePyTorchReferenceAtEveryLayout) {
  const int world = runtime().world_size();
  const nlohmann::json ref = load_json(data_dir() + "gpt_tiny_eval_ref.json");
  expect_eval_as_reference(test::reference_config(ref, world), fmt::format("dp {} (ZeRO 3)", world));
  if (world % 2) return;
  TrainConfig tp = test::reference_config(ref, world / 2);
  tp.tp = 2;
  expect_eval_as_reference(tp, "tp 2");
  tp.sequence_parallel = true;
  expect_eval_as_reference(tp, "tp 2 with sequence parallelism");
  TrainConfig pp = test::reference_config(ref, world / 2);
  pp.pp = 2;
  pp.microbatches = 2;
  expect_eval_as_reference(pp, "pp 2 (1F1B)");
  TrainConfig cp = test::reference_config(ref, world / 2);
  cp.cp = 2;
  expect_eval_as_reference(cp, "cp 2");
  if (world == 4) {
    TrainConfig both = test::reference_config(ref, 1);
    both.tp = 2;
    both.pp = 2;
    both.microbatches = 2;
    expect_eval_as_reference(both, "tp 2 x pp 2");
  }
}

// A validation file shorter than one window is refused naming it; evaluate asks for at least one batch.
TEST(GptEval, RefusesTooLittleData) {
  const nlohmann::json ref = load_json(data_dir() + "gpt_tiny_eval_ref.json");
  const TrainConfig cfg = test::reference_config(ref, runtime().world_size());
  try {
    TokenFile::from_tokens(std::vector<std::uint16_t>(static_cast<std::size_t>(cfg.seq), 1), cfg.seq, cfg.model.vocab,
                           "short_val.bin");
    ADD_FAILURE() << "a validation file of --seq tokens was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short_val.bin"), std::string::npos) << e.what();
  }
  const TokenFile data = TokenFile::open(data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  GptTrainer trainer(runtime(), cfg, data);
  EXPECT_THROW(trainer.evaluate(data, 0), Error);
}

}  // namespace
}  // namespace strata::gpt
