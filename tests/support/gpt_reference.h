// The tiny GPT-2 reference run the training tests compare with (tests/data, made by tests/reference/
// gpt2_reference.py): its configuration at this world size, and train_gpt's losses for it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/gpt/gpt_trainer.h"

namespace strata::gpt::test {

// tests/data/ in the source tree.
std::string data_dir();
nlohmann::json load_json(const std::string& path);
// The reference's configuration at `world` ranks: its global rows per step split over the ranks, its init file.
TrainConfig reference_config(const nlohmann::json& ref, int world);
// Losses of `steps` steps of cfg on the reference's tokens, on the test runtime.
std::vector<double> run(const TrainConfig& cfg, int steps);
// max_i |got_i - want_i| / |want_i|
double max_rel(const std::vector<double>& got, const std::vector<double>& want);
// sqrt(mean_i ((got_i - want_i) / want_i)^2)
double rms_rel(const std::vector<double>& got, const std::vector<double>& want);

}  // namespace strata::gpt::test
