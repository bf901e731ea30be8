// hf_config_json and hf_tensors: the inverse of hf_config.cc's reading and of HfLlamaWeights.
#include "models/gpt/model/hf_export.h"

#include <memory>

#include "core/error.h"
#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

nlohmann::json hf_config_json(const GptConfig& cfg, DType dtype) {
  const std::string torch_dtype = dtype == DType::kBF16 ? "bfloat16" : "float32";
  if (!cfg.llama())
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_layer", cfg.layers},
            {"n_head", cfg.heads},
            {"n_embd", cfg.embd},
            {"vocab_size", cfg.vocab},
            {"n_positions", cfg.ctx},
            {"n_ctx", cfg.ctx},
            {"n_inner", nullptr},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", 1e-5},
            {"tie_word_embeddings", true},
            {"scale_attn_weights", true},
            {"torch_dtype", torch_dtype},
            {"written_by", "strata"}};
  const bool qwen2 = cfg.qkv_bias;
  nlohmann::json c = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                      {"model_type", qwen2 ? "qwen2" : "llama"},
                      {"num_hidden_layers", cfg.layers},
                      {"hidden_size", cfg.embd},
                      {"intermediate_size", cfg.mlp_width()},
                      {"num_attention_heads", cfg.heads},
                      {"num_key_value_heads", cfg.kv()},
                      {"head_dim", cfg.hd()},
                      {"vocab_size", cfg.vocab},
                      {"max_position_embeddings", cfg.ctx},
                      {"rms_norm_eps", static_cast<double>(cfg.norm_eps)},
                      {"rope_theta", cfg.rope_theta},
                      {"rope_scaling", nullptr},
                      {"hidden_act", "silu"},
                      {"tie_word_embeddings", cfg.tied},
                      {"torch_dtype", torch_dtype},
                      {"written_by", "strata"}};
  if (!qwen2) {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  }
  if (cfg.rope_scaling.kind == cpu::RopeScaling::kLlama3)
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", cfg.rope_scaling.factor},
                         {"low_freq_factor", cfg.rope_scaling.low_freq_factor},
                         {"high_freq_factor", cfg.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", cfg.rope_scaling.original_max_position_embeddings}};
  return c;
}

namespace {

using Shape = std::vector<std::int64_t>;

// The last fused parameter read whole, shared by the readers of its parts.
struct WholeParam {
  std::string name;
  std::vector<float> values;
};

}  // namespace

std::vector<hf::HfTensorOut> hf_tensors(const GptConfig& cfg, const ParamReader& param) {
  std::vector<hf::HfTensorOut> out;
  if (!cfg.llama()) {
    for (const UnitSpec& u : gpt_units(cfg, 1))
      for (const SlotSpec& s : u.slots)
        out.push_back({"transformer." + s.name, s.shape, [param, name = s.name](std::uint64_t b, std::uint64_t n,
                                                                                   float* o) { param(name, b, n, o); }});
    return out;
  }
  const std::int64_t C = cfg.embd, Q = cfg.q_width(), KV = cfg.kv_width(), F = cfg.mlp_width(), V = cfg.vocab;
  auto whole = std::make_shared<WholeParam>();
  auto same = [&](const std::string& hf, const std::string& p, Shape shape) {
    out.push_back({hf, std::move(shape), [param, p](std::uint64_t b, std::uint64_t n, float* o) { param(p, b, n, o); }});
  };
  // Rows [0, cols) of the HF tensor [cols, in] are columns [col, col + cols) of the parameter [in, width].
  auto part = [&](const std::string& hf, const std::string& p, std::int64_t in, std::int64_t width, std::int64_t col,
                  std::int64_t cols) {
    out.push_back({hf, {cols, in}, [param, whole, p, in, width, col](std::uint64_t b, std::uint64_t n, float* o) {
                     if (whole->name != p) {
                       whole->values.assign(static_cast<std::size_t>(in * width), 0.0f);
                       param(p, 0, whole->values.size(), whole->values.data());
                       whole->name = p;
                     }
                     for (std::uint64_t k = 0; k < n; ++k) {
                       const std::uint64_t r = (b + k) / static_cast<std::uint64_t>(in);
                       const std::uint64_t c = (b + k) % static_cast<std::uint64_t>(in);
                       o[k] = whole->values[c * static_cast<std::uint64_t>(width) + static_cast<std::uint64_t>(col) + r];
                     }
                   }});
  };
  auto bias = [&](const std::string& hf, const std::string& p, std::int64_t col, std::int64_t cols) {
    out.push_back({hf, {cols}, [param, p, col](std::uint64_t b, std::uint64_t n, float* o) {
                     param(p, static_cast<std::uint64_t>(col) + b, n, o);
                   }});
  };
  same("model.embed_tokens.weight", "tok_embeddings.weight", {V, C});
  for (int i = 0; i < cfg.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".", h = "model.layers." + std::to_string(i) + ".";
    same(h + "input_layernorm.weight", p + "attention_norm.weight", {C});
    part(h + "self_attn.q_proj.weight", p + "attention.wqkv.weight", C, Q + 2 * KV, 0, Q);
    part(h + "self_attn.k_proj.weight", p + "attention.wqkv.weight", C, Q + 2 * KV, Q, KV);
    part(h + "self_attn.v_proj.weight", p + "attention.wqkv.weight", C, Q + 2 * KV, Q + KV, KV);
    if (cfg.qkv_bias) {
      bias(h + "self_attn.q_proj.bias", p + "attention.wqkv.bias", 0, Q);
      bias(h + "self_attn.k_proj.bias", p + "attention.wqkv.bias", Q, KV);
      bias(h + "self_attn.v_proj.bias", p + "attention.wqkv.bias", Q + KV, KV);
    }
    part(h + "self_attn.o_proj.weight", p + "attention.wo.weight", Q, C, 0, C);
    same(h + "post_attention_layernorm.weight", p + "ffn_norm.weight", {C});
    part(h + "mlp.gate_proj.weight", p + "feed_forward.w13.weight", C, 2 * F, 0, F);
    part(h + "mlp.up_proj.weight", p + "feed_forward.w13.weight", C, 2 * F, F, F);
    part(h + "mlp.down_proj.weight", p + "feed_forward.w2.weight", F, C, 0, C);
  }
  same("model.norm.weight", "norm.weight", {C});
  if (!cfg.tied) same("lm_head.weight", "output.weight", {V, C});
  return out;
}

}  // namespace strata::gpt
