// The tiny reference run's helpers (gpt_reference.h).
#include "tests/support/gpt_reference.h"

#include <gtest/gtest.h>

#include <cstdio>
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

namespace {

// What every reference's configuration says of the run beside its model: rows, steps' rows over `world` ranks, AdamW,
// clipping.
TrainConfig run_fields(const nlohmann::json& c, int world) {
  TrainConfig t;
  t.seq = c["seq"];
  t.grad_accum = c["grad_accum"];
  int global_rows = c["batch"].get<int>() * c["ranks"].get<int>();
  t.batch = global_rows / world;
  t.adamw = AdamWConfig{c["lr"], c["beta1"], c["beta2"], c["eps"], c["weight_decay"]};
  t.optimizer.grad_clip = c["grad_clip"];
  return t;
}

}  // namespace

TrainConfig reference_config(const nlohmann::json& ref, int world) {
  const auto& c = ref["config"];
  TrainConfig t = run_fields(c, world);
  t.model = GptConfig{c["layers"], c["heads"], c["embd"], c["vocab"], c["ctx"]};
  t.init = data_dir() + "gpt_tiny_init.safetensors";
  return t;
}

GptConfig llama_reference_model(const nlohmann::json& c) {
  GptConfig m{c["layers"], c["heads"], c["hidden"], c["vocab"], c["ctx"]};
  m.family = Family::kLlama;
  m.kv_heads = c["kv_heads"];
  m.head_dim = c["head_dim"];
  m.ffn = c["intermediate"];
  m.rope_theta = c["rope_theta"];
  m.norm_eps = c["rms_eps"];
  m.tied = c["tie"];
  m.qkv_bias = c["qkv_bias"];
  if (c["rope_scaling"].is_object()) {
    const auto& r = c["rope_scaling"];
    m.rope_scaling.kind = cpu::RopeScaling::kLlama3;
    m.rope_scaling.factor = r["factor"];
    m.rope_scaling.low_freq_factor = r["low_freq_factor"];
    m.rope_scaling.high_freq_factor = r["high_freq_factor"];
    m.rope_scaling.original_max_position_embeddings = r["original_max_position_embeddings"];
  }
  return m;
}

TrainConfig llama_reference_config(const nlohmann::json& ref, int world) {
  const auto& c = ref["config"];
  TrainConfig t = run_fields(c, world);
  t.model = llama_reference_model(c);
  const std::string init = c["init"];
  t.init = data_dir() + init.substr(init.rfind('/') + 1);
  return t;
}

Trajectory trajectory(const TrainConfig& cfg, int steps) {
  TokenFile data = TokenFile::open(data_dir() + "gpt_tiny_tokens.bin", cfg.seq, cfg.model.vocab);
  GptTrainer trainer(strata::test::runtime(), cfg, data);
  Trajectory t;
  for (int s = 0; s < steps; ++s) {
    const StepRecord r = trainer.step(s);
    t.losses.push_back(r.loss);
    t.grad_norms.push_back(r.grad_norm);
  }
  return t;
}

std::vector<double> run(const TrainConfig& cfg, int steps) { return trajectory(cfg, steps).losses; }

Trajectory reference_trajectory(const nlohmann::json& ref) {
  return Trajectory{ref.at("losses").get<std::vector<double>>(), ref.at("grad_norms").get<std::vector<double>>()};
}

void expect_reference(const Trajectory& got, const Trajectory& want, const std::string& what, double loss_bar,
                      double norm_bar) {
  const double loss = max_rel(got.losses, want.losses), norm = max_rel(got.grad_norms, want.grad_norms);
  EXPECT_LE(loss, loss_bar) << what << ": losses";
  EXPECT_LE(norm, norm_bar) << what << ": gradient norms";
  if (strata::test::runtime().rank() == 0)
    std::printf("%s: max relative error vs PyTorch: loss %.3g (bar %g), gradient norm %.3g (bar %g)\n", what.c_str(),
                loss, loss_bar, norm, norm_bar);
}

}  // namespace strata::gpt::test
