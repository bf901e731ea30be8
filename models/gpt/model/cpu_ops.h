// CPU float32 kernels for the GPT-2 example: llm.c-style free functions over row-major arrays.
//
// Conventions (docs/notes/cpu-blas.md has the BLAS choice, docs/gpt-model.md the model they compute):
//   - B batch rows, T sequence length, C channels, NH heads (C % NH == 0, D = C / NH), V vocabulary, N = B*T.
//   - Forward kernels overwrite their outputs. Backward kernels ADD (+=) into every gradient they take
//     (dinp, dweight, dbias, dwte, dqkv, ...), so callers zero gradients once per step, as llm.c does.
//   - Outputs must not alias inputs unless a function says so. Row counts (N, B, T) may be 0: nothing is done.
//   - Threads: OpenMP inside each kernel (parallel over rows, heads, tiles or channel blocks); the matmuls go
//     through the BLAS chosen at build time. Results do not depend on the thread count except through the
//     BLAS's own blocking (parameter-gradient reductions over rows run in a fixed order, in double).
//   - No kernel may be called from inside an OpenMP parallel region of the caller.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context/attention_kernels.h"

namespace strata::gpt {

// Threads used by every kernel and by the BLAS (the trainer passes cores / ranks-per-node). n >= 1.
void set_num_threads(int n);
int num_threads();
// The sgemm the matmuls use, e.g. "oneDNN 2.6.3 dnnl_sgemm (avx2, openmp)".
const char* blas_name();

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. Every token must be in [0, V).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum over b of dout[b,t,:].
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C);

// Per row of inp[N,C]: out = (x - mean) * rstd * weight + bias with rstd = 1/sqrt(biased var + 1e-5);
// mean[N] and rstd[N] are saved for the backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

// bf16_products (the matmuls and the LM head): every operand of each product rounded to bf16 and the sums in f32
// (blas.h's gemm_bf16); outputs, gradients and the bias terms stay f32 (dbias sums the f32 dout).

// out[N,OC] = inp[N,IC] @ weight[IC,OC] (+ bias[OC] when bias is non-null). Conv1D layout: weight is [in, out].
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                    bool bf16_products = false);
// dinp += dout @ weight^T (skipped when dinp is null), dweight += inp^T @ dout, dbias += column sums of dout
// (skipped when dbias is null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, bool bf16_products = false);

// out[i] = in[i] rounded to the nearest bf16 (ties to even, NaN stays NaN), kept as a float. out may equal in.
void round_to_bf16(float* out, const float* in, std::size_t n);

// Tied lm head: logits[N,V] = inp[N,C] @ wte[V,C]^T.
void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V,
                     bool bf16_products = false);
// dinp += dlogits @ wte, dwte += dlogits^T @ inp.
void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N, int C,
                      int V, bool bf16_products = false);
// What the bf16 products run on here, e.g. "oneDNN bf16 matmul (brg:avx512_core_amx_bf16)".
const char* bf16_gemm_name();

// Causal multi-head self-attention, FlashAttention-style: tiled with an online softmax, never a T x T matrix.
// qkv[B,T,3C] holds q, k, v in that order along the last dimension; head h uses columns h*D .. h*D+D-1 of each.
// out[B,T,C] (head h in columns h*D ..); lse[B,NH,T] = log-sum-exp of row t's scaled scores (scale 1/sqrt(D)).
// bf16_products: the probabilities (unnormalised, in the forward) are rounded to bf16 before they multiply V, and
// in the backward P and dS before their products, as FlashAttention's bf16 kernels do (the caller rounds q, k, v
// and dout); row sums, maxima and lse stay f32.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       bool bf16_products = false);
// dqkv[B,T,3C] += the gradient of out with respect to qkv, recomputing the scores tile by tile from q, k and lse
// (D_i = rowsum(dout_i * out_i), dS = P * (dP - D_i)). out and lse are attention_forward's.
void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                        int T, int C, int NH, bool bf16_products = false);
// The blocks of ring attention (runtime/context/attention_kernels.h has the semantics): attention_forward and
// attention_backward for a block of queries against a block of keys at given global positions, with strided views.
// attention_forward and attention_backward are these over the whole sequence (one block, the same operations in the
// same order). bf16_products as theirs.
void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k, Rows v,
                             bool bf16_products = false);
void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Rows dout, RowStats lse,
                              RowStats di, Rows q, Rows k, Rows v, bool bf16_products = false);
void attention_merge(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows out_b, RowStats lse_b);
void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Rows dout, Rows out);
void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add);
// Bytes attention_forward and attention_backward each allocate at most, per call, with num_threads() threads:
// O(tile) per thread, and the backward's D_i (B x NH x T floats); nothing grows as T^2.
std::size_t attention_workspace_bytes(int B, int T, int C, int NH);

// gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), elementwise, evaluated as z / (1 + exp(-2u))
// with u the tanh argument (the same function, without the cancellation in 1 + tanh for negative z). out may
// equal inp.
void gelu_forward(float* out, const float* inp, std::size_t n);
// dinp += gelu_tanh'(inp) * dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);

// out = a + b, elementwise. out may equal a or b.
void residual_forward(float* out, const float* a, const float* b, std::size_t n);

// Fused softmax + cross-entropy over logits[N,V], every target in [0, V):
// losses[i] = -log softmax(logits[i])[targets[i]] (natural log, max-subtracted, sums in double);
// dlogits[i,:] = (softmax(logits[i]) - onehot(targets[i])) * dscale, written (not added). dlogits may equal
// logits (in place), or be null to compute only the losses.
void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                          float dscale);

}  // namespace strata::gpt
