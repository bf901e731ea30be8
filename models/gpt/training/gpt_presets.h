// GptPreset: named model shapes for `train_gpt --model NAME` (GPT-2 small and medium, the Llama-style presets).
#pragma once

#include <string>
#include <vector>

#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

struct GptPreset {
  std::string name;      // "gpt2-124m"
  GptConfig model;       // layers, heads, width, vocabulary (padded), positions
  int seq = 0;           // the sequence length the preset trains at
  int vocab_tokens = 0;  // the tokenizer's vocabulary (GPT-2's 50257) before padding
};

// Every preset, in the order `--help` lists them.
const std::vector<GptPreset>& gpt_presets();
// The preset named `name`; kInvalidArgument listing the names when there is none.
const GptPreset& find_gpt_preset(const std::string& name);

}  // namespace strata::gpt
