// The tiny GPT-2 reference run the training tests compare with (tests/data, made by tests/reference/
// gpt2_reference.py): its configuration at this world size, and train_gpt's losses for it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/gpt/training/gpt_trainer.h"
#include "tests/support/compare.h"

namespace strata::gpt::test {

// tests/data/ in the source tree.
std::string data_dir();
nlohmann::json load_json(const std::string& path);
// The reference's configuration at `world` ranks: its global rows per step split over the ranks, its init file.
TrainConfig reference_config(const nlohmann::json& ref, int world);
// The same for a Llama-style reference (tests/reference/llama_reference.py: its config names Hugging Face's fields and
// its init file).
TrainConfig llama_reference_config(const nlohmann::json& ref, int world);
// The model alone of a Llama-style reference's config (also --generate's, which has no run fields).
GptConfig llama_reference_model(const nlohmann::json& config);
// A run step by step: its losses and its global gradient norms before clipping.
struct Trajectory {
  std::vector<double> losses, grad_norms;
};
// `steps` steps of cfg on the reference's tokens, on the test runtime.
Trajectory trajectory(const TrainConfig& cfg, int steps);
// Only the losses of trajectory(cfg, steps).
std::vector<double> run(const TrainConfig& cfg, int steps);
// A reference file's trajectory ("losses" and "grad_norms").
Trajectory reference_trajectory(const nlohmann::json& ref);

// The bars against the f32 PyTorch reference, relative, at every step. Losses: 1e-5 (float32 round-off gives about
// 1e-7; measured at most 3.8e-7). Gradient norms: 4e-4. Round-off moves the norms further than the losses (AdamW's
// m / sqrt(v) amplifies it on near-zero gradient components): the reference's own float32 runs at W = 1, 2 and 4
// differ by up to 4.3e-5, float32 from float64 by up to 7.4e-5 (without clipping), and Strata from PyTorch by at
// most 4.8e-5 at np 1-4 in every layout these tests run (dp at each ZeRO stage, accumulation, pp, tp with and
// without sequence parallelism). 4e-4 is five times the largest of these; a gradient scaled by 2 (a missing 1/world,
// a doubled reduction) is 1.0 away, where the losses move by under 5e-7 while clipping is active on every step.
// On CUDA (cuBLAS sums in other orders, not measured yet) the tests take ten times both bars.
constexpr double kLossBar = 1e-5;
constexpr double kGradNormBar = 4e-4;
// Expects `got` within the bars of `want` at every step (EXPECT_LE: every rank runs on); rank 0 prints the worst of
// each under `what`.
void expect_reference(const Trajectory& got, const Trajectory& want, const std::string& what,
                      double loss_bar = kLossBar, double norm_bar = kGradNormBar);
// The distances the tests compare with (max_rel, rms_rel: infinite on any non-finite value).
using strata::test::max_rel;
using strata::test::rms_rel;

}  // namespace strata::gpt::test
