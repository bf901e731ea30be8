// The model a weight file or a checkpoint holds: a GPT-2's dimensions from its tensors' shapes (heads are in no
// tensor), a Llama-style run's whole shape from its checkpoint's record (TrainConfig::to_json's config.model).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

// A tensor's shape by parameter name (gpt_units' names); null when absent.
using ShapeOf = std::function<const std::vector<std::int64_t>*(const std::string&)>;

// Every parameter of the model `cfg`, with its shape: a file of another model is refused (kIo), naming the tensor.
void check_shapes(const GptConfig& cfg, const ShapeOf& shape, const std::string& source);
// Shapes -> the GPT's dimensions: layers (h.{i}.ln_1.weight), embd and vocab (wte), ctx (wpe), with `heads`
// (refused when 0: no tensor counts them); then check_shapes.
GptConfig config_from_shapes(const ShapeOf& shape, int heads, const std::string& source);
// A Llama-style model's shape from a checkpoint's record of its training run; kIo naming `source` and the field
// when one is missing or of the wrong type.
GptConfig llama_config_from_record(const nlohmann::json& model, const std::string& source);

}  // namespace strata::gpt
