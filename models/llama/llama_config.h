// LlamaConfig: the shape of a Llama-family model (Hugging Face's LlamaConfig; Mistral and Qwen2 read as the same
// block), its presets, its exact parameter count, its planner shape, and the reader of a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/rope.h"
#include "runtime/memory/memory_planner.h"

namespace strata::llama {

// A decoder of `layers` blocks: x += o(attention(rope(q(n1(x))), rope(k(n1(x))), v(n1(x)))), then
// x += down(silu(gate(n2(x))) * up(n2(x))), with RMSNorms n1, n2 (one weight vector each, no bias); a token embedding,
// a final RMSNorm and an LM head (the embedding itself when tied). Field comments name config.json's keys.
struct LlamaConfig {
  std::string name;      // the preset's name, or the architecture a config.json named
  int layers = 0;        // num_hidden_layers
  int hidden = 0;        // hidden_size (h)
  int intermediate = 0;  // intermediate_size (I): gate and up are [I, h], down [h, I]
  int heads = 0;         // num_attention_heads (NH)
  int kv_heads = 0;      // num_key_value_heads (KVH, dividing NH: grouped-query attention)
  int head_dim = 0;      // head_dim (D; Hugging Face's default is h / NH). Even: RoPE rotates channel pairs
  int vocab = 0;         // vocab_size (V)
  int ctx = 0;           // max_position_embeddings: the longest sequence
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000;
  cpu::RopeScaling rope_scaling;  // kNone, or Llama 3.1's "llama3" frequency scaling
  bool tied = false;              // tie_word_embeddings: the LM head is the token embedding
  bool attention_bias = false;    // Llama's attention_bias: q, k, v and o have biases
  bool qkv_bias = false;          // q, k and v have biases, o none (Qwen2)

  // What is wrong with this configuration ("" when nothing): a size below 1 (each named with its value), heads not a
  // multiple of kv_heads, an odd head_dim, a non-positive or non-finite rms_norm_eps or rope_theta, llama3 scaling
  // with factor < 1, low_freq_factor >= high_freq_factor or original_max_position_embeddings < 1.
  std::string problem() const;
  // kInvalidArgument with problem(), when there is one.
  void validate() const;
  // kInvalidArgument naming the values when the model cannot be split over `tp` ranks (Megatron-LM's split): tp < 1,
  // tp not dividing heads or intermediate, or a tp that neither divides the key-value heads nor is divided by them
  // (each rank holds kv_heads / tp of them, or one shared by tp / kv_heads ranks).
  void validate_tp(int tp) const;
  // Exactly: per layer 2 h (norms) + h NH D + 2 h KVH D + NH D h (+ NH D + 2 KVH D with q, k, v biases, + h with o's)
  // + 3 h I; then V h, V h again untied, and h (the final norm). kInvalidArgument when it overflows 64 bits.
  std::int64_t parameter_count() const;
  // One line: the name, the sizes, RoPE, and the parameter count with thousands separators.
  std::string describe() const;
  // The planner's shape (runtime/memory/memory_planner.h) of this model at sequence length `seq` (0: ctx).
  ModelShape model_shape(int seq = 0) const;
};

// The presets, in the order `--help` lists them: llama-tiny (the tests' model), llama3-8b (Llama 3.1 8B's shape and
// its llama3 RoPE scaling), llama2-70b.
const std::vector<LlamaConfig>& llama_presets();
// The preset named `name`; kInvalidArgument listing the names when there is none.
const LlamaConfig& find_llama_preset(const std::string& name);

// A Hugging Face config.json as transformers 4.x and 5.x write it, for LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM (model_type llama, mistral, qwen2; Qwen2 has q, k, v biases): rope_theta at the top level or in
// 5.x's rope_parameters, RoPE scaling in rope_scaling (4.x) or rope_parameters, as "default" or "llama3" under
// rope_type (or the older "type"). kInvalidArgument naming the file and the field, with its value, for: another
// architecture or model_type; a mixture of experts (num_local_experts or num_experts above 1); a sliding window
// (Mistral's non-null sliding_window, Qwen2's with use_sliding_window) shorter than `seq`, or than
// max_position_embeddings when `seq` is 0; a RoPE scaling type other than those two; hidden_act other than silu;
// mlp_bias true; a missing required field (the sizes, max_position_embeddings) or one of the wrong type; and
// whatever validate() refuses.
LlamaConfig from_hf_config_json(const std::string& path, int seq = 0);
// The same for a config.json already parsed (`path` names it in the messages).
LlamaConfig from_hf_config(const nlohmann::json& config, const std::string& path, int seq = 0);

}  // namespace strata::llama
