// The tiny reference run's helpers (gpt_reference.h).
#include "tests/support/gpt_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "tests/support/test_support.h"

namespace strata::gpt::test {

// The checkout the test was built from; STRATA_SOURCE_DIR in the environment overrides it for a build run elsewhere
// (scripts/gpu/gpu_check.sh's prebuilt fallback).
std::string data_dir() {
  const char* env = std::getenv("STRATA_SOURCE_DIR");
  return std::string(env && *env ? env : STRATA_SOURCE_DIR) + "/tests/data/";
}

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

TrainConfig reference_config(const nlohmann::json& ref, int world) {
  const auto& c = ref["config"];
  TrainConfig t;
  t.model = GptConfig{c["layers"], c["heads"], c["embd"], c["vocab"], c["ctx"]};
  t.seq = c["seq"];
  t.grad_accum = c["grad_accum"];
  int global_rows = c["batch"].get<int>() * c["ranks"].get<int>();
  t.batch = global_rows / world;
  t.adamw = AdamWConfig{c["lr"], c["beta1"], c["beta2"], c["eps"], c["weight_decay"]};
  t.optimizer.grad_clip = c["grad_clip"];
  t.init = data_dir() + "gpt_tiny_init.safetensors";
  return t;
}

std::vector<double> run(const TrainConfig& cfg, int steps) {
  TokenFile data = TokenFile::open(data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  GptTrainer trainer(strata::test::runtime(), cfg, data);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(trainer.step(s).loss);
  return losses;
}

double max_rel(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  return worst;
}

double rms_rel(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  const std::size_t n = std::min(got.size(), want.size());
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += std::pow((got[i] - want[i]) / want[i], 2);
  return n == 0 ? 0.0 : std::sqrt(sum / static_cast<double>(n));
}

}  // namespace strata::gpt::test
