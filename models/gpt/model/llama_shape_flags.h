// add_llama_shape_flags: the command-line flags of a Llama-style GptConfig's shape (--kv-heads, --head-dim, --ffn,
// --rope-theta, --norm-eps, --untied, --qkv-bias), one definition for the tools that take them (train_gpt,
// strata-generate).
#pragma once

#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)

#include <CLI/CLI.hpp>

#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

// Binds the flags to `model`'s fields; a flag not given leaves its field as it was (GptConfig's defaults: 0 for the
// widths, meaning --heads key-value heads, --embd / --heads channels a head).
inline void add_llama_shape_flags(CLI::App& app, GptConfig& model) {
  auto width = [&](const char* flag, int GptConfig::*field, const char* help) {
    app.add_option(flag, model.*field, help)->check(flags::positive_integer());
  };
  width("--kv-heads", &GptConfig::kv_heads, "--family llama: key-value heads, a divisor of --heads (default: --heads)");
  width("--head-dim", &GptConfig::head_dim, "--family llama: channels of a head (default: --embd / --heads)");
  width("--ffn", &GptConfig::ffn, "--family llama: the SwiGLU MLP's width (intermediate_size)");
  app.add_option("--rope-theta", model.rope_theta, "--family llama: the rotary embedding's base")
      ->check(flags::positive_real());
  app.add_option("--norm-eps", model.norm_eps, "--family llama: RMSNorm's eps")->check(flags::positive_real());
  app.add_flag_callback("--untied", [&model] { model.tied = false; },
                        "--family llama: an LM head of its own (output.weight) instead of the token embeddings");
  app.add_flag("--qkv-bias", model.qkv_bias, "--family llama: biases on q, k and v (Qwen2)");
}

}  // namespace strata::gpt
