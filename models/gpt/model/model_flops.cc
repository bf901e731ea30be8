// ModelFlops and the peak-rate table behind MFU.
#include "models/gpt/model/model_flops.h"

#include <fmt/format.h>

namespace strata::gpt {

namespace {
// The weights of one block of either family: its norms, q | k | v (and its biases), the attention's output product
// and the MLP (GPT-2: 12C^2 + 13C).
std::uint64_t block_params(const GptConfig& cfg) {
  const std::uint64_t C = static_cast<std::uint64_t>(cfg.embd), Q = static_cast<std::uint64_t>(cfg.q_width());
  const std::uint64_t KV = static_cast<std::uint64_t>(cfg.kv_width()), F = static_cast<std::uint64_t>(cfg.mlp_width());
  const std::uint64_t qkv = C * (Q + 2 * KV);
  if (cfg.llama())  // two RMSNorms, q | k | v (Qwen2's biases), wo, gate | up and down, no other bias
    return 2 * C + qkv + (cfg.qkv_bias ? Q + 2 * KV : 0) + Q * C + 2 * C * F + F * C;
  // two LayerNorms, c_attn, c_proj, c_fc and mlp.c_proj, each with its bias
  return 4 * C + qkv + Q + 2 * KV + Q * C + C + C * F + F + F * C + C;
}
}  // namespace

ModelFlops ModelFlops::of(const GptConfig& cfg, int seq) {
  const std::uint64_t C = static_cast<std::uint64_t>(cfg.embd), L = static_cast<std::uint64_t>(cfg.layers);
  const std::uint64_t V = static_cast<std::uint64_t>(cfg.vocab), Q = static_cast<std::uint64_t>(cfg.q_width());
  // The blocks, the token embeddings (the LM head when tied; an untied head its own V x C) and the final norm
  // (LayerNorm 2C, RMSNorm C).
  ModelFlops f;
  const bool untied = cfg.llama() && !cfg.tied;
  f.params = L * block_params(cfg) + V * C * (untied ? 2 : 1) + (cfg.llama() ? C : 2 * C);
  f.multiplied = f.params - (untied ? V * C : 0);
  f.attention = 12 * L * Q * static_cast<std::uint64_t>(seq);
  f.per_token = 6 * f.multiplied + f.attention;
  return f;
}

std::uint64_t ModelFlops::recompute_per_token(const GptConfig& cfg, int seq, BlockRecompute kind) {
  const std::uint64_t Q = static_cast<std::uint64_t>(cfg.q_width()), s = static_cast<std::uint64_t>(seq);
  switch (kind) {
    case BlockRecompute::kFull: return 2 * block_params(cfg) + 4 * Q * s;
    case BlockRecompute::kAttention: return 4 * Q * s;
    default: return 0;
  }
}

std::uint64_t ModelFlops::recompute_per_token(const GptConfig& cfg, int seq, const RecomputePolicy& policy) {
  std::uint64_t total = 0;
  for (int l = 0; l < cfg.layers; ++l) total += recompute_per_token(cfg, seq, policy.at(l));
  return total;
}

double known_peak_tflops(const std::string& device_name, DType compute_dtype, std::string* what) {
  // Dense (no sparsity) rates from NVIDIA's data sheets, SXM parts: bf16/f16 on tensor cores, and f32 on the CUDA
  // cores (what an f32 GEMM without TF32 runs on).
  struct Row {
    const char* key;
    const char* label;
    double half, f32;
  };
  static const Row rows[] = {
      {"H200", "H200", 989.4, 66.9},
      {"H100 PCIe", "H100 PCIe", 756.0, 51.2},
      {"H100", "H100 SXM", 989.4, 66.9},
      {"A100", "A100", 312.0, 19.5},
  };
  const bool half = compute_dtype == DType::kBF16 || compute_dtype == DType::kF16;
  for (const Row& r : rows) {
    if (device_name.find(r.key) == std::string::npos) continue;
    if (what) *what = fmt::format("{} {}", r.label, half ? dtype_name(compute_dtype) : "f32 (no tensor cores)");
    return half ? r.half : r.f32;
  }
  if (what) what->clear();
  return 0;
}

}  // namespace strata::gpt
