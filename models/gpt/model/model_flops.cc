// ModelFlops and the peak-rate table behind MFU.
#include "models/gpt/model/model_flops.h"

#include <fmt/format.h>

namespace strata::gpt {

ModelFlops ModelFlops::of(const GptConfig& cfg, int seq) {
  const std::uint64_t C = static_cast<std::uint64_t>(cfg.embd), L = static_cast<std::uint64_t>(cfg.layers);
  const std::uint64_t V = static_cast<std::uint64_t>(cfg.vocab);
  // Per block: two LayerNorms (2C each), qkv (3C^2 + 3C), attention projection (C^2 + C), MLP (4C^2 + 4C and
  // 4C^2 + C). Then wte (V x C) and ln_f (2C).
  const std::uint64_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
  ModelFlops f;
  f.params = L * block + V * C + 2 * C;
  f.attention = 12 * L * C * static_cast<std::uint64_t>(seq);
  f.per_token = 6 * f.params + f.attention;
  return f;
}

std::uint64_t ModelFlops::recompute_per_token(const GptConfig& cfg, int seq, BlockRecompute kind) {
  const std::uint64_t C = static_cast<std::uint64_t>(cfg.embd), s = static_cast<std::uint64_t>(seq);
  const std::uint64_t block = 12 * C * C + 13 * C;
  switch (kind) {
    case BlockRecompute::kFull: return 2 * block + 4 * C * s;
    case BlockRecompute::kAttention: return 4 * C * s;
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
