// HfLlamaWeights: Hugging Face's Llama tensors gathered into the fused, [in, out] parameters of gpt_units.
#include "models/gpt/model/hf_llama_weights.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/shape_string.h"
#include "models/gpt/model/weight_names.h"

namespace strata::gpt {
namespace {

const std::string kModelPrefix = "model.";

}  // namespace

bool has_hf_llama_names(const SafetensorsReader& file) {
  return file.contains("model.embed_tokens.weight") || file.contains("embed_tokens.weight");
}

HfLlamaWeights::HfLlamaWeights(const SafetensorsReader& file, const GptConfig& cfg) : file_(file), cfg_(cfg) {
  STRATA_CHECK(cfg.llama(), "HfLlamaWeights: {} is not a Llama-style model", cfg.describe());
  // Files written by LlamaModel alone (no causal-LM wrapper) drop the "model." prefix; lm_head keeps its name.
  const bool prefixed = file.contains("model.embed_tokens.weight");
  auto hf = [&](const std::string& n) { return (prefixed ? kModelPrefix : std::string()) + n; };
  const std::size_t C = static_cast<std::size_t>(cfg.embd), Q = static_cast<std::size_t>(cfg.q_width());
  const std::size_t KV = static_cast<std::size_t>(cfg.kv_width()), F = static_cast<std::size_t>(cfg.mlp_width());
  const std::size_t V = static_cast<std::size_t>(cfg.vocab);
  std::map<std::string, std::vector<std::int64_t>> shapes;  // the file's tensor -> the shape the config gives it
  auto same = [&](const std::string& param, const std::string& tensor, std::vector<std::int64_t> shape) {
    same_[param] = tensor;
    shapes[tensor] = std::move(shape);
  };
  auto fused = [&](std::map<std::string, std::vector<Part>>& into, const std::string& param,
                   std::vector<std::pair<std::string, std::size_t>> tensors, bool bias) {
    std::size_t col = 0;
    for (auto& [tensor, rows] : tensors) {
      into[param].push_back(Part{tensor, col, rows});
      shapes[tensor] = bias ? std::vector<std::int64_t>{static_cast<std::int64_t>(rows)}
                            : std::vector<std::int64_t>{static_cast<std::int64_t>(rows), -1};
      col += rows;
    }
  };
  same("tok_embeddings.weight", hf("embed_tokens.weight"), {static_cast<std::int64_t>(V), static_cast<std::int64_t>(C)});
  for (int i = 0; i < cfg.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".", h = hf("layers." + std::to_string(i) + ".");
    same(p + "attention_norm.weight", h + "input_layernorm.weight", {static_cast<std::int64_t>(C)});
    same(p + "ffn_norm.weight", h + "post_attention_layernorm.weight", {static_cast<std::int64_t>(C)});
    fused(parts_, p + "attention.wqkv.weight",
          {{h + "self_attn.q_proj.weight", Q}, {h + "self_attn.k_proj.weight", KV}, {h + "self_attn.v_proj.weight", KV}},
          false);
    if (cfg.qkv_bias)
      fused(biases_, p + "attention.wqkv.bias",
            {{h + "self_attn.q_proj.bias", Q}, {h + "self_attn.k_proj.bias", KV}, {h + "self_attn.v_proj.bias", KV}},
            true);
    fused(parts_, p + "attention.wo.weight", {{h + "self_attn.o_proj.weight", C}}, false);
    fused(parts_, p + "feed_forward.w13.weight", {{h + "mlp.gate_proj.weight", F}, {h + "mlp.up_proj.weight", F}},
          false);
    fused(parts_, p + "feed_forward.w2.weight", {{h + "mlp.down_proj.weight", C}}, false);
  }
  same("norm.weight", hf("norm.weight"), {static_cast<std::int64_t>(C)});
  if (!cfg.tied) same("output.weight", "lm_head.weight", {static_cast<std::int64_t>(V), static_cast<std::int64_t>(C)});
  // The in-dimension of each transposed part: what the parameter's rows are.
  for (auto& [param, parts] : parts_) {
    const std::int64_t in = param.find("wo.") != std::string::npos ? static_cast<std::int64_t>(Q)
                            : param.find("w2.") != std::string::npos ? static_cast<std::int64_t>(F)
                                                                     : static_cast<std::int64_t>(C);
    for (const Part& part : parts) shapes[part.tensor][1] = in;
  }
  for (const auto& [tensor, shape] : shapes) names_.push_back(tensor);
  // Strict: the file holds exactly these (a tied file may still carry lm_head.weight equal to the embeddings: refused
  // here, since a tied Llama's checkpoints do not write it), each of the config's shape.
  check_weight_names(file, names_, "Hugging Face Llama weights");
  for (const auto& [tensor, shape] : shapes) {
    const std::vector<std::int64_t>& got = file.info(tensor).shape;
    STRATA_CHECK_CODE(ErrorCode::kMismatch, got == shape,
                      "{}: tensor '{}' has shape {}, but the config ({}) gives it {}", file.path(), tensor,
                      shape_string(got), cfg.describe(), shape_string(shape));
  }
}

const std::vector<float>& HfLlamaWeights::whole(const std::string& tensor) {
  auto it = cache_.find(tensor);
  if (it == cache_.end()) it = cache_.emplace(tensor, file_.read_f32(tensor)).first;
  return it->second;
}

void HfLlamaWeights::read(const std::string& name, std::size_t begin, std::size_t count, float* out) {
  if (auto it = same_.find(name); it != same_.end()) {
    file_.read_f32(it->second, begin, count, out);
    return;
  }
  if (auto it = biases_.find(name); it != biases_.end()) {
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t j = begin + k;
      for (const Part& part : it->second)
        if (j >= part.col && j < part.col + part.cols) out[k] = whole(part.tensor)[j - part.col];
    }
    return;
  }
  const auto it = parts_.find(name);
  STRATA_CHECK(it != parts_.end(), "HfLlamaWeights: '{}' is no parameter of {}", name, cfg_.describe());
  std::size_t width = 0;  // the parameter's columns: its parts' rows
  for (const Part& part : it->second) width += part.cols;
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t row = (begin + k) / width, col = (begin + k) % width;
    for (const Part& part : it->second) {
      if (col < part.col || col >= part.col + part.cols) continue;
      const std::vector<float>& t = whole(part.tensor);  // [cols, rows of the parameter]
      out[k] = t[(col - part.col) * (t.size() / part.cols) + row];
    }
  }
}

}  // namespace strata::gpt
