// What the tensor-parallel layers (parallel_linear.h, vocab_parallel.h) ask of a trainer's kernels. Strata holds the
// parallel data flow (which collective, where, on which rows); the arithmetic is the trainer's, on its device, as
// Megatron-Core's layers call the GEMM of the build. The GPT's kernel table implements both interfaces on the CPU
// (oneDNN) and on CUDA (cuBLAS's cublasGemmEx); examples/custom_trainer's MLP implements LinearKernels with host loops.
//
// Contract, for every method: pointers are the device's memory; work is ordered on the device's compute stream
// (the CPU runs it inline); forward kernels overwrite their outputs, backward kernels add (+=) into gradients. N rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace strata {

class LinearKernels {
 public:
  virtual ~LinearKernels() = default;
  // out[N, OC] = inp[N, IC] @ weight[IC, OC] (+ bias[OC] when bias is not null). The product's dtype (f32, or bf16
  // operands with f32 sums) is the implementation's.
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                              int OC) = 0;
  // dinp += dout @ weight^T (skipped when dinp is null), dweight += inp^T @ dout, dbias += the column sums of dout
  // (skipped when dbias is null).
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int N, int IC, int OC) = 0;
  // out[n, c] += bias[c].
  virtual void add_bias(float* out, const float* bias, int N, int C) = 0;
  // `bytes` of p set to 0.
  virtual void zero(void* p, std::size_t bytes) = 0;

  // The same over bf16 activations, for the bf16 overloads of parallel_linear.h: inp, out, dout and dinp are bf16;
  // weight, bias and their gradients f32. Each output element is summed in f32 and rounded to bf16 once (dinp: its
  // bf16 value plus the f32 sum, rounded once); dweight and dbias sum the bf16 values in f32. Kernels without them
  // throw kUnsupported (these defaults): the MLP example's host kernels and the CPU kernel table implement them.
  virtual void matmul_forward_bf16(Bf16* out, const Bf16* inp, const float* weight, const float* bias, int N, int IC,
                                   int OC);
  virtual void matmul_backward_bf16(Bf16* dinp, float* dweight, float* dbias, const Bf16* dout, const Bf16* inp,
                                    const float* weight, int N, int IC, int OC);
  virtual void add_bias_bf16(Bf16* out, const float* bias, int N, int C);
};

// LinearKernels' products by activation type (f32, or bf16 through the *_bf16 methods), for code written once over
// both.
inline void linear_forward(LinearKernels& k, float* out, const float* inp, const float* weight, const float* bias,
                           int N, int IC, int OC) {
  k.matmul_forward(out, inp, weight, bias, N, IC, OC);
}
inline void linear_forward(LinearKernels& k, Bf16* out, const Bf16* inp, const float* weight, const float* bias, int N,
                           int IC, int OC) {
  k.matmul_forward_bf16(out, inp, weight, bias, N, IC, OC);
}
inline void linear_backward(LinearKernels& k, float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int IC, int OC) {
  k.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}
inline void linear_backward(LinearKernels& k, Bf16* dinp, float* dweight, float* dbias, const Bf16* dout,
                            const Bf16* inp, const float* weight, int N, int IC, int OC) {
  k.matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}
inline void linear_add_bias(LinearKernels& k, float* out, const float* bias, int N, int C) {
  k.add_bias(out, bias, N, C);
}
inline void linear_add_bias(LinearKernels& k, Bf16* out, const float* bias, int N, int C) {
  k.add_bias_bf16(out, bias, N, C);
}

// The bf16 linear kernels on host memory through f32 ones: the operands widened into f32 scratch, `f32`'s kernels
// run, the outputs rounded to bf16 once. What the CPU kernel tables do (and any host LinearKernels may); `scratch`
// grows to the largest call (host memory outside the ledger, as the kernels' own scratch).
void host_matmul_forward_bf16(LinearKernels& f32, std::vector<float>& scratch, Bf16* out, const Bf16* inp,
                              const float* weight, const float* bias, int N, int IC, int OC);
void host_matmul_backward_bf16(LinearKernels& f32, std::vector<float>& scratch, Bf16* dinp, float* dweight,
                               float* dbias, const Bf16* dout, const Bf16* inp, const float* weight, int N, int IC,
                               int OC);
void host_add_bias_bf16(Bf16* out, const float* bias, int N, int C);

// The vocabulary-parallel kernels: a rank holds rows [v_begin, v_begin + v_count) of the embedding table and the
// matching columns of the logits, of which the first `valid` are real (the rest pad the vocabulary to a multiple of
// tp and never enter the loss).
class VocabKernels {
 public:
  virtual ~VocabKernels() = default;
  // out[n, :] = wte[tokens[n] - v_begin, :] when the token is one of this rank's rows, else 0.
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int v_begin, int v_count,
                                 int N, int C) = 0;
  // dwte[tokens[n] - v_begin, :] += dout[n, :] for this rank's tokens.
  virtual void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, int v_begin,
                                  int v_count, int N, int C) = 0;
  // row_max[n] = the maximum of logits[n, v] over v < valid.
  virtual void vocab_max(float* row_max, const float* logits, int N, int V, int valid) = 0;
  // stats[n] = sum over v < valid of exp(logits[n, v] - row_max[n]); stats[N + n] = the target's logit, or 0 when
  // another rank owns the target.
  virtual void vocab_sumexp(float* stats, const float* logits, const float* row_max, const std::int32_t* targets,
                            int v_begin, int N, int V, int valid) = 0;
  // losses[n] = log(stats[n]) + row_max[n] - stats[N + n]; dlogits[n, v] = (softmax - [target]) * dscale for
  // v < valid and 0 for the padded columns, written (dlogits may equal logits; null: losses only).
  virtual void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max,
                                  const float* stats, const std::int32_t* targets, int v_begin, int N, int V,
                                  int valid, float dscale) = 0;

  // The same over bf16 activations (the bf16 overloads of vocab_parallel.h): out, dout, logits and dlogits bf16; the
  // table, its gradient, the statistics and the losses f32; the arithmetic on the widened values, each bf16 output
  // rounded once. Kernels without them throw kUnsupported (these defaults); the CPU kernel table has them.
  virtual void embedding_forward_bf16(Bf16* out, const std::int32_t* tokens, const float* wte, int v_begin, int v_count,
                                      int N, int C);
  virtual void embedding_backward_bf16(float* dwte, const Bf16* dout, const std::int32_t* tokens, int v_begin,
                                       int v_count, int N, int C);
  virtual void vocab_max_bf16(float* row_max, const Bf16* logits, int N, int V, int valid);
  virtual void vocab_sumexp_bf16(float* stats, const Bf16* logits, const float* row_max, const std::int32_t* targets,
                                 int v_begin, int N, int V, int valid);
  virtual void vocab_crossentropy_bf16(float* losses, Bf16* dlogits, const Bf16* logits, const float* row_max,
                                       const float* stats, const std::int32_t* targets, int v_begin, int N, int V,
                                       int valid, float dscale);
};

}  // namespace strata
