// ModelFlops: the FLOPs a step of either family does by the usual convention, and the peak rate of the device it runs on, for
// model FLOPs utilisation (MFU) in train_gpt's log (docs/gpt-model.md, "Model FLOPs and MFU").
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

struct ModelFlops {
  std::uint64_t params = 0;       // every weight but the position embeddings (wte counts: it is the LM head)
  // The weights a token is multiplied by: params less an untied model's token table, which is only looked up (its
  // head is multiplied instead).
  std::uint64_t multiplied = 0;
  std::uint64_t attention = 0;    // per token: 12 * layers * q width * seq (QK^T and AV, forward and backward)
  std::uint64_t per_token = 0;    // 6 * multiplied + attention
  // The FLOPs of one token of training at sequence length `seq`: PaLM's (appendix B) and nanoGPT's count. Model
  // FLOPs, not hardware FLOPs: recomputation and the causal mask's skipped half do not change it.
  static ModelFlops of(const GptConfig& cfg, int seq);
  // The matrix-product FLOPs per token that recomputation runs again in the backward, counted the same way (the whole
  // model's, not one tp rank's): a full block its forward (2 x its parameters + 4 x q width x seq), an attention block
  // its core (4 x q width x seq); the GELU or SwiGLU (mlp) and offload none. Hardware FLOPs beside the model's, never in MFU.
  static std::uint64_t recompute_per_token(const GptConfig& cfg, int seq, const RecomputePolicy& policy);
  static std::uint64_t recompute_per_token(const GptConfig& cfg, int seq, BlockRecompute kind);
};

// A device's dense peak in TFLOP/s for the dtype its matmuls compute in, from its name (CUDA's device name: H100,
// H200, A100); 0 when the name is not known (the CPU, other GPUs: pass --peak-tflops). `what` is set to the row
// used, e.g. "H200 f32 (no tensor cores)".
double known_peak_tflops(const std::string& device_name, DType compute_dtype, std::string* what);

}  // namespace strata::gpt
