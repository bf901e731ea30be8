// HfConfig: a Hugging Face config.json of either family Strata trains: GPT-2 (GPT2LMHeadModel, model_type gpt2) or
// the Llama family (models/llama/llama_config.h: Llama, Mistral, Qwen2). The shape and the family come from it; the
// planner's ModelShape and the exact parameter count follow.
#pragma once

#include <cstdint>
#include <string>

#include "models/llama/llama_config.h"
#include "runtime/memory/memory_planner.h"

namespace strata::hf {

// GPT-2 as transformers' GPT2Config describes it, in the field names of config.json.
struct Gpt2Config {
  int layers = 0;  // n_layer
  int hidden = 0;  // n_embd
  int heads = 0;   // n_head
  int vocab = 0;   // vocab_size (50257 for the published GPT-2)
  int ctx = 0;     // n_positions: the position table's rows
};

struct HfConfig {
  std::string path;          // the config.json read
  std::string architecture;  // "GPT2LMHeadModel", "LlamaForCausalLM", ... (or the model_type when no architectures)
  bool gpt2 = false;         // GPT-2; else the Llama family in `llama`
  Gpt2Config gpt;
  llama::LlamaConfig llama;

  // The planner's shape at sequence length `seq` (0: the context), and the exact parameter count: GPT-2's
  // 12 h^2 + 13 h a layer, V h + P h + 2 h around them (tied); the Llama family's as llama_config.h counts it.
  ModelShape model_shape(int seq = 0) const;
  std::int64_t parameter_count() const;
};

// `path`'s config.json when `path` is a directory, else `path`.
std::string config_json_path(const std::string& path);

// Reads config.json (a file, or a model directory's). GPT-2: n_layer, n_embd, n_head, vocab_size, n_positions (or
// n_ctx) required; refused, naming the file and the field with its value, when it is not the block Strata trains:
// layer_norm_epsilon other than 1e-5, activation_function other than gelu_new (GPT-2's tanh GELU), n_inner other than
// null or 4 n_embd, untied embeddings, scale_attn_weights false, scale_attn_by_inverse_layer_idx or
// reorder_and_upcast_attn true, cross attention. The Llama family as llama::from_hf_config_json reads it (`seq` as it
// takes it). Any other architecture or model_type is kInvalidArgument naming it and the supported ones.
HfConfig read_hf_config(const std::string& path, int seq = 0);

}  // namespace strata::hf
