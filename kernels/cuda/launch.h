// The kernel launchers behind kernels/cuda/ops.h: each enqueues its kernels and returns the launch's cudaError_t.
//
// Split from the API (cuda_ops.cc) so that nvcc never compiles fmt, whose C++20 consteval format strings
// nvcc 13 rejects: argument checks and STRATA_CHECK_CUDA live in the host-compiled .cc, kernels in the .cu files.
// Arguments are as in kernels/cuda/ops.h and already validated; sizes of 0 enqueue nothing and return cudaSuccess.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace strata::cuda::detail {

cudaError_t launch_encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                                   int T, int C, cudaStream_t stream);
cudaError_t launch_encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                                    int C, cudaStream_t stream);

cudaError_t launch_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                     const float* bias, int N, int C, cudaStream_t stream);
cudaError_t launch_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                      const float* weight, const float* mean, const float* rstd, int N, int C,
                                      cudaStream_t stream);

cudaError_t launch_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                   float eps, cudaStream_t stream);
cudaError_t launch_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                    const float* weight, const float* rstd, int N, int C, cudaStream_t stream);

// Rotates x in place (inverse: by -angle, rope_backward): rows at x + b * batch_stride + t * row_stride.
cudaError_t launch_rope(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                        std::size_t row_stride, std::size_t batch_stride, bool inverse, cudaStream_t stream);

cudaError_t launch_swiglu_forward(float* out, const float* gu, int N, int F, cudaStream_t stream);
cudaError_t launch_swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F, cudaStream_t stream);

// out[n, :] = row[:] for n < N (the bias rows a matmul then accumulates onto).
cudaError_t launch_fill_rows(float* out, const float* row, int N, int C, cudaStream_t stream);
cudaError_t launch_fill_rows(__nv_bfloat16* out, const __nv_bfloat16* row, int N, int C, cudaStream_t stream);
cudaError_t launch_fill_rows(float* out, const __nv_bfloat16* row, int N, int C, cudaStream_t stream);
// dst[c] += sum over n < N of src[n, c], summed in double in a fixed order.
cudaError_t launch_add_column_sums(float* dst, const float* src, int N, int C, cudaStream_t stream);

// Shared memory the attention kernels need per block for head size D (the largest of the three kernels).
std::size_t attention_shared_bytes(int D);
// qkv rows are [q: C | k: KVH * D | v: KVH * D]; query head h reads kv head h / (NH / KVH).
// bf16: P (and dS) rounded to bf16 before their products, as kernels/cpu's attention with bf16_products.
cudaError_t launch_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                                     bool bf16, cudaStream_t stream);
cudaError_t launch_attention_backward(float* dqkv, const float* dout, const float* out, const float* lse,
                                      const float* qkv, int B, int T, int C, int NH, int KVH, bool bf16,
                                      cudaStream_t stream);

cudaError_t launch_gelu_forward(float* out, const float* inp, std::size_t n, cudaStream_t stream);
cudaError_t launch_gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, cudaStream_t stream);
cudaError_t launch_residual_forward(float* out, const float* a, const float* b, std::size_t n, cudaStream_t stream);

cudaError_t launch_crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                        int N, int V, float dscale, cudaStream_t stream);

// One block of queries against one block of keys (runtime/context/attention_kernels.h's attention_block_forward), f32,
// rows at the given strides (in floats): q, k, v, out at row (b, i) = base + b * bs + i * rs, head h at columns
// h * D .. h * D + D - 1 of q and out (D = width / heads <= 32 * kMaxPerLane) and its kv head h / (heads / kv_heads)
// at the same columns of k and v; lse (b, h, i) at base + b * bs + h * hs + i. kv_heads divides heads (never 0 here).
constexpr int kMaxPerLane = 8;
struct AttentionBlockArgs {
  int batch = 0, heads = 0, kv_heads = 0, width = 0, q_rows = 0, q_pos = 0, kv_rows = 0, kv_pos = 0;
  float* out = nullptr;
  std::size_t out_rs = 0, out_bs = 0;
  float* lse = nullptr;
  std::size_t lse_hs = 0, lse_bs = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  std::size_t q_rs = 0, q_bs = 0, k_rs = 0, k_bs = 0, v_rs = 0, v_bs = 0;
};
cudaError_t launch_attention_block_forward(const AttentionBlockArgs& args, cudaStream_t stream);
// dst (+)= src for the first `columns` floats of batch x rows rows at the given strides.
cudaError_t launch_copy_rows(float* dst, std::size_t dst_rs, std::size_t dst_bs, const float* src, std::size_t src_rs,
                             std::size_t src_bs, int batch, int rows, int columns, bool add, cudaStream_t stream);

// Tensor parallelism (tp_ops_cuda.cu).
cudaError_t launch_embedding_forward(float* out, const int32_t* tokens, const float* wte, int v_begin, int v_count,
                                     int N, int C, cudaStream_t stream);
cudaError_t launch_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int v_begin, int v_count,
                                      int N, int C, cudaStream_t stream);
cudaError_t launch_position_forward(float* out, const float* wpe, int B, int T, int t0, int C, cudaStream_t stream);
cudaError_t launch_position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C,
                                     cudaStream_t stream);
cudaError_t launch_add_bias(float* out, const float* bias, int N, int C, cudaStream_t stream);
cudaError_t launch_vocab_max(float* row_max, const float* logits, int N, int V, int valid, cudaStream_t stream);
cudaError_t launch_vocab_sumexp(float* stats, const float* logits, const float* row_max, const int32_t* targets,
                                int v_begin, int N, int V, int valid, cudaStream_t stream);
cudaError_t launch_vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max,
                                      const float* stats, const int32_t* targets, int v_begin, int N, int V,
                                      int valid, float dscale, cudaStream_t stream);

}  // namespace strata::cuda::detail
