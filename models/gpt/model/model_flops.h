// ModelFlops: the FLOPs a GPT step does by the usual convention, and the peak rate of the device it runs on, for
// model FLOPs utilisation (MFU) in train_gpt's log (docs/gpt-model.md, "Model FLOPs and MFU").
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "models/gpt/model/gpt_model.h"

namespace strata::gpt {

struct ModelFlops {
  std::uint64_t params = 0;       // every weight but the position embeddings (wte counts: it is the LM head)
  std::uint64_t attention = 0;    // per token: 12 * layers * width * seq (QK^T and AV, forward and backward)
  std::uint64_t per_token = 0;    // 6 * params + attention
  // The FLOPs of one token of training at sequence length `seq`: PaLM's (appendix B) and nanoGPT's count. Model
  // FLOPs, not hardware FLOPs: recomputation and the causal mask's skipped half do not change it.
  static ModelFlops of(const GptConfig& cfg, int seq);
};

// A device's dense peak in TFLOP/s for the dtype its matmuls compute in, from its name (CUDA's device name: H100,
// H200, A100); 0 when the name is not known (the CPU, other GPUs: pass --peak-tflops). `what` is set to the row
// used, e.g. "H200 f32 (no tensor cores)".
double known_peak_tflops(const std::string& device_name, DType compute_dtype, std::string* what);

}  // namespace strata::gpt
