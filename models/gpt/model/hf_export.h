// A model of either family as a Hugging Face model directory's contents: its config.json (GPT2LMHeadModel, or
// LlamaForCausalLM / Qwen2ForCausalLM) and its tensors under Hugging Face's names and layouts, read from the model's
// own parameters (gpt_units' names and layouts), for models/hf/hf_directory_writer.h.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/gpt/model/gpt_model.h"
#include "models/hf/hf_directory_writer.h"

namespace strata::gpt {

// config.json for `cfg`, with torch_dtype naming `dtype`: GPT-2's n_layer, n_head, n_embd, vocab_size, n_positions,
// gelu_new and tied embeddings; the Llama family's sizes, key-value heads, head_dim, rms_norm_eps, rope_theta, the
// llama3 rope_scaling when it has one, tie_word_embeddings (Qwen2ForCausalLM when q, k, v have biases).
nlohmann::json hf_config_json(const GptConfig& cfg, DType dtype);

// Elements [begin, begin + count) (row-major, global) of the model's parameter `name` (gpt_units' names).
using ParamReader = std::function<void(const std::string& name, std::uint64_t begin, std::uint64_t count, float* out)>;

// The Hugging Face tensors of `cfg`, each read through `param`: GPT-2's under "transformer." (Conv1D's [in, out] is
// the parameters' own layout; the tied head is not written, as transformers does not); the Llama family's
// model.* tensors, q | k | v and gate | up split out of the fused parameters and transposed to nn.Linear's [out, in]
// (a fused parameter is read whole once for its parts and kept until the next one), lm_head when untied.
std::vector<hf::HfTensorOut> hf_tensors(const GptConfig& cfg, const ParamReader& param);

}  // namespace strata::gpt
