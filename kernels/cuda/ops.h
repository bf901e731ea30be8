// CUDA twins of the CPU kernels (kernels/cpu/ops.h), plus a cuBLAS context and a bf16 matmul.
//
// Conventions: those of kernels/cpu, which is the reference (tests/kernels/cuda/test_cuda_kernels.cc compares every kernel
// here with its CPU twin). Same names, arguments and semantics, with these differences:
//   - Every pointer is device memory, tokens and targets included. Each function enqueues its work on `stream`
//     (the matmuls: on the Blas's stream) and returns without synchronising. Bad arguments and launch or cuBLAS
//     failures throw strata::Error; errors inside a kernel surface at the caller's next synchronisation.
//   - Forward kernels overwrite their outputs; backward kernels ADD (+=) into every gradient they take.
//     Row counts (N, B, T) may be 0: nothing is enqueued.
//   - No float atomics anywhere: parameter-gradient reductions (dweight, dbias, dwpe, dwte) give each element one
//     writer that sums its rows in a fixed order (in double where the CPU does), and attention's dk and dv of a
//     key / value head sum its query heads' terms in head order, so runs are bitwise repeatable; cuBLAS is
//     repeatable on a given GPU model with one stream per handle.
//   - Nothing allocates global memory; attention keeps its tiles in shared memory, 768 * D + 8448 bytes per block
//     for head size D (56 KiB at D = 64), so D is limited by the device's shared memory per block (D <= 291 on
//     an H100, 206 on an A100).
// The CPU-only knobs of kernels/cpu (set_num_threads, num_threads, blas_name, attention_workspace_bytes) have no twin.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/context/attention_kernels.h"

namespace strata::cuda {

// A cuBLAS handle bound to one stream, on the device current at construction. Math mode: the default, i.e. f32
// products in full f32 (no TF32), plus CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION so the bf16 product also
// reduces in f32. Use one per stream and from one thread at a time; it must outlive the work it enqueued.
class Blas {
 public:
  explicit Blas(cudaStream_t stream);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  cublasHandle_t handle() const { return handle_; }
  cudaStream_t stream() const { return stream_; }

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. Every token must be in [0, V).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum over b of dout[b,t,:]. Both sum in the CPU's row order.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                      cudaStream_t stream);

// Per row of inp[N,C]: out = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(biased var + 1e-5); mean[N] and
// rstd[N] are saved for the backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t stream);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream);

// RMSNorm (kernels/cpu/rmsnorm.h): per row, rstd = 1/sqrt(mean(x^2) + eps) (the mean of squares in double) and
// out = x * rstd * weight; rstd[N] is saved for the backward. out may not alias inp. C >= 1, eps >= 0.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     cudaStream_t stream);
// dinp += rstd * (g - xhat * mean(g * xhat)) with g = dout * weight, xhat = x * rstd; dweight[c] += the sum over rows
// of dout * xhat, in double, one writer per channel (layernorm_backward's fixed-order reduction).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, cudaStream_t stream);

// Rotary embeddings (kernels/cpu/rope.h), in place: rotates `heads` heads of D channels (D even) in each of B x T rows
// of x, row (b, t) at x + b * batch_stride + t * row_stride (floats), head h at column h * D, row t at position
// pos0 + t. cos and sin are a cpu::rope_table copied to the device, with rows up to pos0 + T - 1 (not checked: device
// memory). Columns outside the heads (v in a packed qkv row, say) are not touched.
void rope_forward(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                  std::size_t row_stride, std::size_t batch_stride, cudaStream_t stream);
// The transpose of the rotation, in place (rope_forward with sin negated): d(rotated) into d(unrotated).
void rope_backward(float* dx, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                   std::size_t row_stride, std::size_t batch_stride, cudaStream_t stream);

// SwiGLU (kernels/cpu/swiglu.h): gu[N, 2F] holds each row's gate in columns 0 .. F-1 and its up product in F .. 2F-1;
// out[N, F] = silu(g) * u. out may not alias gu.
void swiglu_forward(float* out, const float* gu, int N, int F, cudaStream_t stream);
// dgu[:, 0..F) += dout * u * silu'(g), dgu[:, F..2F) += dout * silu(g).
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F, cudaStream_t stream);

// out[N,OC] = inp[N,IC] @ weight[IC,OC] (+ bias[OC] when bias is non-null). Conv1D layout: weight is [in, out].
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                    Blas& blas);
// The same in bf16: bf16 inp, weight, bias and out; products accumulated in f32 (CUBLAS_COMPUTE_32F), the bias
// added in f32, and out rounded to bf16 once. With a bias, `f32_workspace` (N * OC floats) holds the f32 result
// before that rounding: cuBLAS's own beta path with a bf16 C was seen on an H200 to round the product before adding
// the bias. Without a bias it may be null.
void matmul_forward_bf16(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                         const __nv_bfloat16* bias, int N, int IC, int OC, Blas& blas, float* f32_workspace);
// bf16 products with f32 results (Kernels' bf16 compute): bf16 operands on tensor cores, accumulated in f32
// (CUBLAS_COMPUTE_32F) into the f32 outputs, which forward kernels overwrite and backward kernels add into, as
// their f32 twins. The bias stays f32 (out starts as its rows); its gradient comes from the f32 dout (bias_backward).
void matmul_forward_bf16_operands(float* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* bias,
                                  int N, int IC, int OC, Blas& blas);
void matmul_backward_bf16_operands(float* dinp, float* dweight, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                   const __nv_bfloat16* weight, int N, int IC, int OC, Blas& blas);
void lm_head_forward_bf16_operands(float* logits, const __nv_bfloat16* inp, const __nv_bfloat16* wte, int N, int C,
                                   int V, Blas& blas);
void lm_head_backward_bf16_operands(float* dinp, float* dwte, const __nv_bfloat16* dlogits, const __nv_bfloat16* inp,
                                    const __nv_bfloat16* wte, int N, int C, int V, Blas& blas);
// dbias[OC] += column sums of dout[N,OC] (matmul_backward's bias term on its own, the CPU's order).
void bias_backward(float* dbias, const float* dout, int N, int OC, Blas& blas);

// dinp += dout @ weight^T (skipped when dinp is null), dweight += inp^T @ dout, dbias += column sums of dout
// (skipped when dbias is null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, Blas& blas);

// Tied lm head: logits[N,V] = inp[N,C] @ wte[V,C]^T.
void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V, Blas& blas);
// dinp += dlogits @ wte, dwte += dlogits^T @ inp.
void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N, int C,
                      int V, Blas& blas);

// Causal self-attention with NH query heads and KVH key / value heads (grouped-query attention: KVH divides NH;
// KVH = NH is multi-head attention), FlashAttention-style (tiled, online softmax, never a T x T matrix).
// qkv[B,T,C + 2 KVH D] rows are [q: C | k: KVH D | v: KVH D] (D = C / NH): query head h in columns h*D .. h*D+D-1 of
// q, reading key / value head h / (NH / KVH) at the same columns of k and v. out[B,T,C]; lse[B,NH,T] = log-sum-exp
// of row t's scaled scores (scale 1/sqrt(D)). bf16_products: P (and in the backward dS) rounded to bf16 before their
// products, as kernels/cpu's attention (the caller rounds q, k, v, dout).
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                       cudaStream_t stream, bool bf16_products = false);
// dqkv (laid out as qkv) += the gradient of out with respect to qkv, recomputing the scores tile by tile from q, k
// and lse; a key / value head's dk and dv sum its query heads' terms in head order (no atomics). out and lse are
// attention_forward's.
void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                        int T, int C, int NH, int KVH, cudaStream_t stream, bool bf16_products = false);

// One block of queries against one block of keys, f32 (runtime/context/attention_kernels.h's
// attention_block_forward): the decode path's attention over its KV cache. A head of at most 256 columns; k and v
// hold blk.kv_heads heads (0: blk.heads), each query head reading its group's.
void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k, Rows v,
                             cudaStream_t stream);
// dst (+)= src for the first `columns` floats of `rows` rows of `batch` batches (attention_kernels.h's copy_rows).
void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add, cudaStream_t stream);

// gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), elementwise. out may equal inp.
void gelu_forward(float* out, const float* inp, std::size_t n, cudaStream_t stream);
// dinp += gelu_tanh'(inp) * dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, cudaStream_t stream);

// out = a + b, elementwise. out may equal a or b.
void residual_forward(float* out, const float* a, const float* b, std::size_t n, cudaStream_t stream);

// Fused softmax + cross-entropy over logits[N,V]: losses[i] = -log softmax(logits[i])[targets[i]];
// dlogits[i,:] = (softmax(logits[i]) - onehot(targets[i])) * dscale, written (not added). dlogits may equal logits
// (in place), or be null to compute only the losses. The targets stay on the device, so they are not checked on
// the host: a row whose target is outside [0, V) gets a NaN loss (and NaN dlogits) instead of an exception.
void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                          float dscale, cudaStream_t stream);

// ---- tensor parallelism ---------------------------------------------------------------------------------------
// Twins of kernels/cpu/tp_ops.h (the reference, same semantics). Tokens and targets stay on the device and are
// not checked on the host: one outside this rank's range simply selects nothing (a zero embedding row, no gradient,
// a target logit of 0), as on the CPU.

// out[n,:] = wte[tokens[n] - v_begin,:] when tokens[n] is in [v_begin, v_begin + v_count), else 0.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int v_begin, int v_count, int N, int C,
                       cudaStream_t stream);
// dwte[tokens[n] - v_begin,:] += dout[n,:] for the tokens in range, summed in the CPU's row order.
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int v_begin, int v_count, int N, int C,
                        cudaStream_t stream);
// out[b,t,:] += wpe[t0 + t,:].
void position_forward(float* out, const float* wpe, int B, int T, int t0, int C, cudaStream_t stream);
// dwpe[t0 + t,:] += sum over b of dout[b,t,:], batch rows in order.
void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C, cudaStream_t stream);
// out[n,c] += bias[c].
void add_bias(float* out, const float* bias, int N, int C, cudaStream_t stream);
// The vocabulary-parallel cross-entropy's three passes over this rank's logits[N, V], the first `valid` columns
// real: row_max[N]; stats[2N] (the sums of exp(logit - max) in double, then the target logits or 0); the losses and,
// unless dlogits is null, dlogits (written, not added; 0 in the padded columns; dlogits may equal logits).
void vocab_max(float* row_max, const float* logits, int N, int V, int valid, cudaStream_t stream);
void vocab_sumexp(float* stats, const float* logits, const float* row_max, const int32_t* targets, int v_begin, int N,
                  int V, int valid, cudaStream_t stream);
void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max, const float* stats,
                        const int32_t* targets, int v_begin, int N, int V, int valid, float dscale,
                        cudaStream_t stream);

}  // namespace strata::cuda
