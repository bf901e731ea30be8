// Kernels: everything a model does to the memory of its device (the kernels of kernels/cpu, zeroing, dtype
// conversion of gathered parameters, the token upload and the loss sum), with a CPU and a CUDA implementation.
//
// Contract, for every method:
//   - Pointers are the device's memory (host memory for a CPU device), except upload_tokens' host_src.
//   - Work is ordered on the device's compute stream (Device::compute_stream()): on the CPU it runs inline on the
//     calling thread, on CUDA it is enqueued and the call returns without waiting. Only sum() waits, and only as
//     long as the device timeout allows.
//   - The kernels have the signatures and semantics of kernels/cpu (the reference): forward kernels overwrite their
//     outputs, backward kernels add (+=) into every gradient.
// The CPU implementation calls exactly what GptModel called before this seam existed (kernels/cpu, std::memset,
// flat_ops.h's free functions), so CPU results are bitwise unchanged. This is the models' kernel table, as
// ggml_backend_i is ggml's: one virtual per operation, hence more methods than the style's guide of ~15.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/dtype.h"
#include "runtime/context/attention_kernels.h"
#include "runtime/tensor/tp_kernels.h"

namespace strata {

// The products, the bias, zeroing (LinearKernels) and the vocabulary-parallel kernels (VocabKernels) are the tensor-
// parallel library's interfaces (runtime/tensor/tp_kernels.h), so ColumnParallelLinear and its kin run on this table;
// the attention blocks (AttentionKernels) are the context-parallel library's (runtime/context/attention_kernels.h), for
// RingAttention: on the CPU (f32, or bf16 products as attention_*'s); the CUDA table has the forward block (f32) and
// copy_rows, what the decode path needs, and refuses the merge and the backward (kUnsupported). The linear kernels over
// bf16 activations (the bf16 overloads of ColumnParallelLinear and RowParallelLinear) are the CPU table's; the CUDA
// table refuses them (kUnsupported) for now; the same for the vocabulary-parallel kernels and the attention blocks
// over bf16 activations.
class Kernels : public LinearKernels, public VocabKernels, public AttentionKernels {
 public:
  virtual ~Kernels() = default;

  virtual void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B,
                               int T, int C) = 0;
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                                int C) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int N, int C) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, int N, int C) = 0;
  virtual void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V) = 0;
  virtual void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte,
                                int N, int C, int V) = 0;
  // qkv rows [q: C | k: KVH D | v: KVH D] (D = C / NH; KVH key / value heads, dividing NH: kernels/cpu/attention.h).
  virtual void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse,
                                  const float* qkv, int B, int T, int C, int NH, int KVH) = 0;
  virtual void gelu_forward(float* out, const float* inp, std::size_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) = 0;
  virtual void residual_forward(float* out, const float* a, const float* b, std::size_t n) = 0;
  virtual void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const std::int32_t* targets,
                                    int N, int V, float dscale) = 0;

  // The Llama-style family's RMSNorm, rotary embeddings and SwiGLU gate (kernels/cpu/rmsnorm.h, rope.h and swiglu.h
  // have the semantics). rope's cos and sin are a rope_table in the device's memory.
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                               float eps) = 0;
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                const float* rstd, int N, int C) = 0;
  virtual void rope_forward(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                            std::size_t row_stride, std::size_t batch_stride) = 0;
  virtual void rope_backward(float* dx, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                             std::size_t row_stride, std::size_t batch_stride) = 0;
  virtual void swiglu_forward(float* out, const float* gu, int N, int F) = 0;
  virtual void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F) = 0;

  // Tensor parallelism beyond the library's (kernels/cpu/tp_ops.h has the semantics; docs/tensor-parallel.md the data
  // flow):
  // the position embedding of this rank's positions under sequence parallelism.
  virtual void position_forward(float* out, const float* wpe, int B, int T, int t0, int C) = 0;
  virtual void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C) = 0;

  // dst[i] = (f32) src[i] for n elements of `dtype` (gathered bf16 / f16 parameters).
  virtual void to_f32(const void* src, DType dtype, float* dst, std::size_t n) = 0;
  // dst[i] = (dtype) ((f32) dst[i] + src[i]), rounding once (gradients back into bf16 / f16 views).
  virtual void add_f32_into(void* dst, DType dtype, const float* src, std::size_t n) = 0;
  // Copies n tokens from host memory to device_dst. host_src may be reused as soon as this returns.
  virtual void upload_tokens(std::int32_t* device_dst, const std::int32_t* host_src, std::size_t n) = 0;
  // Waits for the work enqueued so far and returns the sum of n floats of device memory, accumulated on the host
  // in double from i = 0 to n - 1 (so it equals the CPU's sum of the same values).
  virtual double sum(const float* device_values, std::size_t n) = 0;
};

// The kernels for `device`: the CPU ones for a CPU device, the CUDA ones (kernels/cuda) for a CUDA device when
// this build has them; otherwise throws strata::Error kUnsupported.
//
// `matmul_dtype` kBF16 is bf16 mixed-precision compute: every operand of matmul_*, lm_head_* and attention_* (inp,
// weight, dout, wte, dlogits, q, k, v, and attention's P and dS) is rounded to the nearest bf16 and the products
// accumulate in f32 into f32 outputs; bias gradients sum the f32 dout. Everything else stays f32 (LayerNorm, GELU,
// softmax statistics, the loss). On CUDA the products are bf16 tensor-core GEMMs on bf16 copies of the operands;
// on the CPU, oneDNN's bf16 matmul (blas_bf16.cc; rounded operands through the f32 sgemm where it has none: a
// product of two bf16 values is exact in f32, so the sums are the same up to their order). kF32 is exact f32.
// matmul_dtype is kF32 or kBF16; anything else throws kInvalidArgument naming it.
std::unique_ptr<Kernels> make_kernels(Device& device, DType matmul_dtype = DType::kF32);

}  // namespace strata
