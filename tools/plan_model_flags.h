// PlanModelFlags: the model flags both of strata-plan's modes read (--preset, the GPT-2 dimensions and the Llama
// family's), resolved into the planner's ModelShape, and the model line they print.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtime/memory/memory_planner.h"

class PlanModelFlags {
 public:
  // Adds --preset, --config, --params, --layers, --hidden, --heads, --kv-heads, --head-dim, --ffn, --swiglu,
  // --rms-norm,
  // --rotary, --untied, --qkv-bias, --attention-bias, --vocab and --seq to `app`; --seq as `seq_help` says, at least
  // `min_seq`.
  void add(CLI::App& app, const std::string& seq_help, int min_seq);
  // The preset's shape, or the config.json's (when --preset or --config is given; --seq defaults to its context),
  // then every flag given over it. kInvalidArgument for an unknown preset (listing the names), a config.json
  // models/hf refuses, or, without either, naming the missing dimensions.
  strata::ModelShape shape() const;

 private:
  std::string preset_, config_;
  strata::ModelShape given_;
  std::vector<std::pair<CLI::Option*, int strata::ModelShape::*>> ints_;
  std::vector<std::pair<CLI::Option*, bool strata::ModelShape::*>> switches_;
  bool untied_ = false;
  CLI::Option* params_ = nullptr;
  CLI::Option* seq_ = nullptr;
  CLI::Option* untied_flag_ = nullptr;
};

// The presets --preset names, in --help's order: GPT-2 124M and 350M (the tokenizer's 50257 tokens, tied, context
// 1024), then models/llama's (llama-tiny, llama3-8b, llama2-70b), each at its context length.
const std::vector<std::string>& plan_preset_names();
strata::ModelShape plan_preset(const std::string& name);

// "124,439,808 parameters (0.12B), 12 layers, hidden 768, 12 heads" and, where the shape is not GPT-2's, the key-value
// heads and head width, the MLP, the norms, the positions and the head.
std::string plan_model_text(const strata::ModelShape& m);
