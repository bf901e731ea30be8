// The tensor-parallel GPT's kernels on the GPU (see kernels/cuda/ops.h; kernels/cpu/tp_ops.cc is the reference):
// the vocabulary-parallel embedding and cross-entropy, the position embedding of a sequence slice, the bias add.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;

// ---- embeddings and bias --------------------------------------------------------------------------------------

// out[n, c] = wte[tokens[n] - v_begin, c] for the tokens of this rank's rows [v_begin, v_begin + v_count), else 0.
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, int v_begin,
                                         int v_count, int C, std::size_t total) {
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t n = idx / C;
    const int c = static_cast<int>(idx % C);
    const int v = tokens[n] - v_begin;
    out[idx] = v >= 0 && v < v_count ? wte[static_cast<std::size_t>(v) * C + c] : 0.0f;
  }
}

// dwte rows are shared by repeated tokens. Without atomics, as encoder_cuda.cu's dwte: thread (c, g) owns column c
// of every local row v with v % kTokenGroups == g and walks all N rows in order, so each dwte element has one writer
// and sums its rows in the CPU's order. Tokens outside this rank's rows are skipped.
constexpr int kTokenGroups = 64;
constexpr int kGroupsPerBlock = 8;

__global__ void embedding_backward_kernel(float* dwte, const float* dout, const int32_t* tokens, int v_begin,
                                          int v_count, int N, int C) {
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  const int g = blockIdx.y * kGroupsPerBlock + threadIdx.y;
  if (c >= C) return;
  for (int i = 0; i < N; ++i) {
    const int v = tokens[i] - v_begin;
    if (v < 0 || v >= v_count || v % kTokenGroups != g) continue;  // uniform across the warp: its lanes share g, v
    dwte[static_cast<std::size_t>(v) * C + c] += dout[static_cast<std::size_t>(i) * C + c];
  }
}

// out[b, t, c] += wpe[t0 + t, c].
__global__ void position_forward_kernel(float* out, const float* wpe, int T, int t0, int C, std::size_t total) {
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t row = idx / C;  // b * T + t
    const int c = static_cast<int>(idx % C);
    const int t = static_cast<int>(row % T);
    out[idx] += wpe[static_cast<std::size_t>(t0 + t) * C + c];
  }
}

// dwpe[t0 + t, c] += dout[0, t, c] + dout[1, t, c] + ...: one thread per (t, c), batch rows in order (as the CPU).
__global__ void position_backward_kernel(float* dwpe, const float* dout, int B, int T, int t0, int C) {
  const std::size_t total = static_cast<std::size_t>(T) * C;
  const std::size_t batch_stride = total;
  float* d = dwpe + static_cast<std::size_t>(t0) * C;
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float acc = d[idx];
    for (int b = 0; b < B; ++b) acc += dout[b * batch_stride + idx];
    d[idx] = acc;
  }
}

// out[n, c] += bias[c].
__global__ void add_bias_kernel(float* out, const float* bias, int C, std::size_t total) {
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[idx] += bias[idx % C];
}

// ---- vocabulary-parallel cross-entropy: one block per row -----------------------------------------------------

// row_max[n] = max over v < valid of logits[n, v] (-inf when valid is 0; fmaxf skips NaN as the CPU's fmax).
__global__ __launch_bounds__(kThreads) void vocab_max_kernel(float* row_max, const float* logits, int V, int valid) {
  __shared__ float scratch[kWarps];
  const std::size_t n = blockIdx.x;
  const float* x = logits + n * V;
  float local = -INFINITY;
  for (int v = threadIdx.x; v < valid; v += kThreads) local = fmaxf(local, x[v]);
  const float m = block_max<kWarps>(local, scratch);
  if (threadIdx.x == 0) row_max[n] = m;
}

// stats[n] = sum over v < valid of exp(logits[n, v] - row_max[n]), exponentials and sum in double as the CPU;
// stats[N + n] = the target's logit when this rank holds it among its valid columns, else 0.
__global__ __launch_bounds__(kThreads) void vocab_sumexp_kernel(float* stats, const float* logits,
                                                                const float* row_max, const int32_t* targets,
                                                                int v_begin, int N, int V, int valid) {
  __shared__ double scratch[kWarps];
  const std::size_t n = blockIdx.x;
  const float* x = logits + n * V;
  const double m = row_max[n];
  double local = 0;
  for (int v = threadIdx.x; v < valid; v += kThreads) local += exp(static_cast<double>(x[v]) - m);
  const double s = block_sum<kWarps>(local, scratch);
  if (threadIdx.x == 0) {
    stats[n] = static_cast<float>(s);
    const int t = targets[n] - v_begin;
    stats[static_cast<std::size_t>(N) + n] = t >= 0 && t < valid ? x[t] : 0.0f;
  }
}

// losses[n] = log(stats[n]) + row_max[n] - stats[N + n]; dlogits[n, v] = (softmax - onehot) * dscale for v < valid
// and 0 for the padded columns. No reduction: each dlogits element is written by the thread that read its logit, so
// dlogits may equal logits.
__global__ __launch_bounds__(kThreads) void vocab_crossentropy_kernel(float* losses, float* dlogits,
                                                                      const float* logits, const float* row_max,
                                                                      const float* stats, const int32_t* targets,
                                                                      int v_begin, int N, int V, int valid,
                                                                      float dscale) {
  const std::size_t n = blockIdx.x;
  const double sum = stats[n], m = row_max[n];
  if (threadIdx.x == 0)
    losses[n] = static_cast<float>(log(sum) + m - static_cast<double>(stats[static_cast<std::size_t>(N) + n]));
  if (dlogits == nullptr) return;
  const float* x = logits + n * V;
  float* d = dlogits + n * V;
  const int t = targets[n] - v_begin;
  for (int v = threadIdx.x; v < V; v += kThreads) {
    if (v < valid) {
      const double p = exp(static_cast<double>(x[v]) - m) / sum;
      d[v] = static_cast<float>((p - (v == t ? 1.0 : 0.0)) * dscale);
    } else {
      d[v] = 0.0f;
    }
  }
}

}  // namespace

cudaError_t launch_embedding_forward(float* out, const int32_t* tokens, const float* wte, int v_begin, int v_count,
                                     int N, int C, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(N) * C;
  if (total == 0) return cudaSuccess;
  embedding_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(out, tokens, wte, v_begin, v_count, C,
                                                                               total);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int v_begin, int v_count,
                                      int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0 || v_count == 0) return cudaSuccess;
  const dim3 block(kWarpSize, kGroupsPerBlock);
  const dim3 grid((C + kWarpSize - 1) / kWarpSize, kTokenGroups / kGroupsPerBlock);
  embedding_backward_kernel<<<grid, block, 0, stream>>>(dwte, dout, tokens, v_begin, v_count, N, C);
  return cudaGetLastError();
}

cudaError_t launch_position_forward(float* out, const float* wpe, int B, int T, int t0, int C, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(B) * T * C;
  if (total == 0) return cudaSuccess;
  position_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(out, wpe, T, t0, C, total);
  return cudaGetLastError();
}

cudaError_t launch_position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C,
                                     cudaStream_t stream) {
  if (B == 0 || T == 0 || C == 0) return cudaSuccess;
  const std::size_t positions = static_cast<std::size_t>(T) * C;
  position_backward_kernel<<<grid_for(positions, kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T, t0, C);
  return cudaGetLastError();
}

cudaError_t launch_add_bias(float* out, const float* bias, int N, int C, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(N) * C;
  if (total == 0) return cudaSuccess;
  add_bias_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(out, bias, C, total);
  return cudaGetLastError();
}

cudaError_t launch_vocab_max(float* row_max, const float* logits, int N, int V, int valid, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  vocab_max_kernel<<<N, kThreads, 0, stream>>>(row_max, logits, V, valid);
  return cudaGetLastError();
}

cudaError_t launch_vocab_sumexp(float* stats, const float* logits, const float* row_max, const int32_t* targets,
                                int v_begin, int N, int V, int valid, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  vocab_sumexp_kernel<<<N, kThreads, 0, stream>>>(stats, logits, row_max, targets, v_begin, N, V, valid);
  return cudaGetLastError();
}

cudaError_t launch_vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max,
                                      const float* stats, const int32_t* targets, int v_begin, int N, int V,
                                      int valid, float dscale, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  vocab_crossentropy_kernel<<<N, kThreads, 0, stream>>>(losses, dlogits, logits, row_max, stats, targets, v_begin, N,
                                                        V, valid, dscale);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
