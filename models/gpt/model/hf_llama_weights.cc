// HfLlamaWeights: Hugging Face's Llama tensors gathered into the fused, [in, out] parameters of gpt_units.
#include "models/gpt/model/hf_llama_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

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

void HfLlamaWeights::read(const std::string& name, const std::vector<GlobalRun>& runs, float* out) const {
  if (auto it = same_.find(name); it != same_.end()) {
    for (const GlobalRun& r : runs) file_.read_f32(it->second, r.global, r.count, out + r.local);
    return;
  }
  if (auto it = biases_.find(name); it != biases_.end()) {
    for (const GlobalRun& r : runs)
      for (const Part& part : it->second) {
        const std::size_t from = std::max(r.global, part.col), to = std::min(r.global + r.count, part.col + part.cols);
        if (from < to) file_.read_f32(part.tensor, from - part.col, to - from, out + r.local + (from - r.global));
      }
    return;
  }
  const auto it = parts_.find(name);
  STRATA_CHECK(it != parts_.end(), "HfLlamaWeights: '{}' is no parameter of {}", name, cfg_.describe());
  read_transposed(it->second, runs, out);
}

void HfLlamaWeights::read_transposed(const std::vector<Part>& parts, const std::vector<GlobalRun>& runs,
                                     float* out) const {
  std::size_t width = 0;  // the parameter's columns: its parts' rows
  for (const Part& part : parts) width += part.cols;
  // Each run as row stretches of one column range: its first row (from its first column), the full rows between, its
  // last row (to its last column).
  struct Stretch {
    std::size_t row_begin, row_end, col_begin, col_end, local;  // local: out index of (row_begin, col_begin)
  };
  std::vector<Stretch> stretches;
  for (const GlobalRun& r : runs) {
    if (r.count == 0) continue;
    const std::size_t first = r.global / width, last = (r.global + r.count - 1) / width;
    const std::size_t c0 = r.global % width, c1 = (r.global + r.count - 1) % width + 1;
    auto local = [&](std::size_t row, std::size_t col) { return r.local + row * width + col - r.global; };
    if (first == last) {
      stretches.push_back({first, first + 1, c0, c1, local(first, c0)});
      continue;
    }
    stretches.push_back({first, first + 1, c0, width, local(first, c0)});
    if (last > first + 1) stretches.push_back({first + 1, last, 0, width, local(first + 1, 0)});
    stretches.push_back({last, last + 1, 0, c1, local(last, 0)});
  }
  for (const Part& part : parts) {
    const std::size_t in = file_.info(part.tensor).numel() / part.cols;  // the file tensor is [cols, in]
    // The rows each of the part's columns is held at, as ranges: one where the runs are one contiguous range of a
    // rank's slice (consecutive rows extend a column's last range), merged where the runs touch or overlap.
    using Rows = std::pair<std::size_t, std::size_t>;
    std::vector<std::vector<Rows>> rows(part.cols);
    for (const Stretch& s : stretches)
      for (std::size_t c = std::max(s.col_begin, part.col); c < std::min(s.col_end, part.col + part.cols); ++c) {
        std::vector<Rows>& r = rows[c - part.col];
        if (!r.empty() && r.back().second == s.row_begin)
          r.back().second = s.row_end;
        else
          r.push_back({s.row_begin, s.row_end});
      }
    std::vector<std::vector<std::size_t>> at(part.cols);  // where each range's rows start in the staging
    std::size_t staged = 0;
    for (std::vector<Rows>& r : rows) {
      std::sort(r.begin(), r.end());
      std::vector<Rows> merged;
      for (const Rows& range : r)
        if (!merged.empty() && range.first <= merged.back().second)
          merged.back().second = std::max(merged.back().second, range.second);
        else
          merged.push_back(range);
      r = std::move(merged);
    }
    for (std::size_t k = 0; k < part.cols; ++k)
      for (const Rows& range : rows[k]) {
        at[k].push_back(staged);
        staged += range.second - range.first;
      }
    if (staged == 0) continue;
    std::vector<float> stage(staged);
    for (std::size_t k = 0; k < part.cols; ++k)
      for (std::size_t i = 0; i < rows[k].size(); ++i)
        file_.read_f32(part.tensor, k * in + rows[k][i].first, rows[k][i].second - rows[k][i].first,
                       stage.data() + at[k][i]);
    for (const Stretch& s : stretches)
      for (std::size_t c = std::max(s.col_begin, part.col); c < std::min(s.col_end, part.col + part.cols); ++c) {
        const std::size_t k = c - part.col;
        // The range holding this stretch's rows of column k: the last one starting at or before them.
        const std::size_t i = static_cast<std::size_t>(
            std::upper_bound(rows[k].begin(), rows[k].end(), Rows{s.row_begin, SIZE_MAX}) - rows[k].begin() - 1);
        const float* from = stage.data() + at[k][i] + (s.row_begin - rows[k][i].first);
        for (std::size_t row = s.row_begin; row < s.row_end; ++row)
          out[s.local + (row - s.row_begin) * width + (c - s.col_begin)] = from[row - s.row_begin];
      }
  }
}

}  // namespace strata::gpt
