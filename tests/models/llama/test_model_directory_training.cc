// A fine-tune started from a Hugging Face model directory (sharded safetensors and config.json, written by
// strata-ckpt's and --save-hf's writer from the references' initial weights) equals the PyTorch reference started from
// the same weights, within the loss bar: GPT-2 (tests/data/gpt_tiny_ref.json) and the Llama family
// (llama_tiny_ref.json), at np 1, 2 and 4 (ZeRO 3 over the world).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "collectives/rank_values.h"
#include "core/safetensors.h"
#include "models/gpt/model/hf_export.h"
#include "models/gpt/model/hf_llama_weights.h"
#include "models/gpt/training/gpt_trainer.h"
#include "models/hf/hf_config.h"
#include "models/hf/hf_directory_writer.h"
#include "runtime/tensor/global_elements.h"
#include "tests/support/gpt_reference.h"
#include "tests/support/test_support.h"

namespace strata::gpt {
namespace {

using strata::test::runtime;
namespace fs = std::filesystem;

const std::string kData = test::data_dir();

// Rank 0 writes `model`'s weights from the safetensors file `init` as a model directory in shards of at most 40 KB;
// every rank returns its path once it is there (the ranks share this machine's file system).
std::string write_directory(const GptConfig& model, const std::string& init, const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("strata_" + name + "_" + std::to_string(::getppid()))).string();
  if (runtime().rank() == 0) {
    fs::remove_all(dir);
    const SafetensorsReader file(init);
    std::unique_ptr<HfLlamaWeights> hf;
    if (model.llama()) hf = std::make_unique<HfLlamaWeights>(file, model);
    const ParamReader param = [&](const std::string& p, std::uint64_t begin, std::uint64_t count, float* out) {
      if (hf)
        hf->read(p, begin, count, out);
      else
        file.read_f32(p, begin, count, out);
    };
    hf::write_hf_directory(dir, hf_config_json(model, DType::kF32), hf_tensors(model, param), DType::kF32,
                           40 << 10);
  }
  sum_over_ranks(runtime().world(), 1.0);  // every rank waits for rank 0's directory
  return dir;
}

void expect_directory_fine_tune(const nlohmann::json& ref, TrainConfig cfg, const std::string& name) {
  const std::string dir = write_directory(cfg.model, cfg.init, name);
  // The directory's config.json describes the model the reference trains.
  const hf::HfConfig c = hf::read_hf_config(dir);
  EXPECT_EQ(c.gpt2, !cfg.model.llama());
  EXPECT_EQ(c.parameter_count(), static_cast<std::int64_t>(global_numel(gpt_units(cfg.model, 1))));
  cfg.init = dir + "/model.safetensors.index.json";
  const test::Trajectory want = test::reference_trajectory(ref);
  test::expect_reference(test::trajectory(cfg, static_cast<int>(want.losses.size())), want,
                         fmt::format("{} from a model directory, {} ranks", name, runtime().world_size()));
  sum_over_ranks(runtime().world(), 1.0);
  if (runtime().rank() == 0) fs::remove_all(dir);
}

TEST(ModelDirectoryTraining, Gpt2FineTuneEqualsThePyTorchReference) {
  const nlohmann::json ref = test::load_json(kData + "gpt_tiny_ref.json");
  expect_directory_fine_tune(ref, test::reference_config(ref, runtime().world_size()), "gpt2");
}

TEST(ModelDirectoryTraining, LlamaFineTuneEqualsThePyTorchReference) {
  const nlohmann::json ref = test::load_json(kData + "llama_tiny_ref.json");
  expect_directory_fine_tune(ref, test::llama_reference_config(ref, runtime().world_size()), "llama");
}

}  // namespace
}  // namespace strata::gpt
