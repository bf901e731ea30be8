// The GPT-2 example's elementwise, normalisation, embedding, matmul and loss kernels (attention is in cpu_attention.cc).
#include "models/gpt/model/cpu_ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "models/gpt/model/blas.h"
#include "models/gpt/model/thread_limit.h"
#include "models/gpt/model/vec_math.h"
#include "core/error.h"

namespace strata::gpt {
namespace {

// Parameter gradients reduce over rows; they are computed per block of this many channels, one block per task,
// summing rows in order in double, so results do not depend on the thread count.
constexpr int kChannelBlock = 64;

// dst[c] += sum over rows n of f(n, c), for every c < C: the fixed-order column reduction, one task per block.
template <typename F>
void add_column_sums(float* dst, int N, int C, F&& f) {
  const int blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    double acc[kChannelBlock] = {};
    for (int n = 0; n < N; ++n)
      for (int c = c0; c < c1; ++c) acc[c - c0] += f(n, c);
    for (int c = c0; c < c1; ++c) dst[c] += static_cast<float>(acc[c - c0]);
  }
}

// Rows of at least this many elements are worth a task each; shorter elementwise work stays serial.
constexpr std::size_t kMinParallelElements = 1 << 14;

}  // namespace

void set_num_threads(int n) {
  STRATA_CHECK(n >= 1, "thread count {} must be >= 1", n);
  n = allowed_threads(n);  // within OMP_THREAD_LIMIT, or dnnl_sgemm leaves blocks unwritten (thread_limit.h)
  omp_set_num_threads(n);
  detail::blas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_name() { return detail::blas_name(); }

// ---- encoder ------------------------------------------------------------------------------------------------

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* w = wte + static_cast<std::size_t>(tokens[b * T + t]) * C;
      const float* p = wpe + static_cast<std::size_t>(t) * C;
      float* o = out + (static_cast<std::size_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) {
  // dwpe: each position's row is owned by one task; rows of dwte are shared by repeated tokens, so each task owns
  // a block of channels and walks every row in order (no atomics, fixed summation order).
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int t = 0; t < T; ++t) {
      float* dp = dwpe + static_cast<std::size_t>(t) * C;
      for (int b = 0; b < B; ++b) {
        const float* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
        for (int c = 0; c < C; ++c) dp[c] += d[c];
      }
    }
    const int blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
      for (int i = 0; i < B * T; ++i) {
        float* dw = dwte + static_cast<std::size_t>(tokens[i]) * C;
        const float* d = dout + static_cast<std::size_t>(i) * C;
        for (int c = c0; c < c1; ++c) dw[c] += d[c];
      }
    }
  }
}

// ---- layernorm ----------------------------------------------------------------------------------------------

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    double sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double m = sum / C;
    double var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float mf = static_cast<float>(m);
    const float s = static_cast<float>(1.0 / std::sqrt(var / C + 1e-5));
    float* o = out + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - mf) * s * weight[c] + bias[c];
    mean[n] = mf;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  // dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = weight * dout, xhat = (x - mean) * rstd.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* dy = dout + static_cast<std::size_t>(n) * C;
    const float m = mean[n], s = rstd[n];
    double g_sum = 0, gx_sum = 0;
    for (int c = 0; c < C; ++c) {
      const float g = weight[c] * dy[c];
      g_sum += g;
      gx_sum += static_cast<double>(g) * ((x[c] - m) * s);
    }
    const float g_mean = static_cast<float>(g_sum / C), gx_mean = static_cast<float>(gx_sum / C);
    float* dx = dinp + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) dx[c] += (weight[c] * dy[c] - g_mean - (x[c] - m) * s * gx_mean) * s;
  }
  add_column_sums(dweight, N, C, [&](int n, int c) {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    return static_cast<double>(dout[i]) * ((inp[i] - mean[n]) * rstd[n]);
  });
  add_column_sums(dbias, N, C,
                  [&](int n, int c) { return static_cast<double>(dout[static_cast<std::size_t>(n) * C + c]); });
}

// ---- matmuls (through the BLAS) -----------------------------------------------------------------------------

namespace {

// The row-major product of blas.h, in f32 or with bf16 operands.
void gemm(bool bf16, bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  if (bf16)
    detail::gemm_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else
    detail::sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                    bool bf16) {
  if (N == 0 || OC == 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    // out starts as the bias rows and the product is accumulated onto it (torch.addmm does the same).
#pragma omp parallel for schedule(static) if (static_cast <std::size_t>(N) * OC >= kMinParallelElements)
    for (int n = 0; n < N; ++n) std::copy(bias, bias + OC, out + static_cast<std::size_t>(n) * OC);
    beta = 1.0f;
  }
  gemm(bf16, false, false, N, OC, IC, inp, IC, weight, OC, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, bool bf16) {
  if (dinp != nullptr) gemm(bf16, false, true, N, IC, OC, dout, OC, weight, OC, 1.0f, dinp, IC);
  gemm(bf16, true, false, IC, OC, N, inp, IC, dout, OC, 1.0f, dweight, OC);
  if (dbias != nullptr)
    add_column_sums(dbias, N, OC,
                    [&](int n, int c) { return static_cast<double>(dout[static_cast<std::size_t>(n) * OC + c]); });
}

void round_to_bf16(float* out, const float* in, std::size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelElements)
  for (std::size_t i = 0; i < n; ++i) out[i] = detail::round_bf16(in[i]);
}

void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V, bool bf16) {
  gemm(bf16, false, true, N, V, C, inp, C, wte, C, 0.0f, logits, V);
}

void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N, int C,
                      int V, bool bf16) {
  gemm(bf16, false, false, N, C, V, dlogits, V, wte, C, 1.0f, dinp, C);
  gemm(bf16, true, false, V, C, N, dlogits, V, inp, C, 1.0f, dwte, C);
}

const char* bf16_gemm_name() { return detail::bf16_gemm_name(); }

// ---- elementwise --------------------------------------------------------------------------------------------

// gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as x * sigmoid(2u) (the same
// function: 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))) with the vectorizing exp_f32; this also avoids the cancellation
// in 1 + tanh(u) for negative x. exp's argument is capped at 80 so e * sigma stays finite (for x < -9.4 the
// output is then ~1e-35 * x instead of a smaller number: no float result a caller could notice).
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluKappa = 0.044715f;

void gelu_forward(float* out, const float* inp, std::size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelElements)
  for (std::size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float minus_2u = -2.0f * kGeluBeta * (x + kGeluKappa * x * x * x);
    const float e = detail::exp_f32(minus_2u < 80.0f ? minus_2u : 80.0f);
    out[i] = x / (1.0f + e);
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
  // d/dx = sigma + 0.5 x (1 - tanh^2 u) u' = sigma + 2 x sigma (1 - sigma) u', with 1 - sigma = e * sigma exactly.
#pragma omp parallel for schedule(static) if (n >= kMinParallelElements)
  for (std::size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float x_sq = x * x;
    const float minus_2u = -2.0f * kGeluBeta * (x + kGeluKappa * x_sq * x);
    const float e = detail::exp_f32(minus_2u < 80.0f ? minus_2u : 80.0f);
    const float sigma = 1.0f / (1.0f + e);
    const float du = kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq);
    dinp[i] += dout[i] * (sigma + 2.0f * x * sigma * (e * sigma) * du);
  }
}

void residual_forward(float* out, const float* a, const float* b, std::size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelElements)
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// ---- loss ---------------------------------------------------------------------------------------------------

namespace {

// Eight independent lanes, combined in a fixed order: the loops vectorize and the result does not depend on how
// the caller is threaded.
constexpr int kLanes = 8;

float row_max(const float* x, int n) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, x[0]);
  int v = 0;
  for (; v + kLanes <= n; v += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = lane[j] < x[v + j] ? x[v + j] : lane[j];
  float m = lane[0];
  for (int j = 1; j < kLanes; ++j) m = std::max(m, lane[j]);
  for (; v < n; ++v) m = std::max(m, x[v]);
  return m;
}

// sum over v of exp(x[v] - shift), accumulated in double; e[v] = exp(x[v] - shift) when e is non-null (e may be x).
double sum_exp(const float* x, int n, float shift, float* e) {
  double lane[kLanes] = {};
  float tmp[kLanes];
  int v = 0;
  for (; v + kLanes <= n; v += kLanes) {
    for (int j = 0; j < kLanes; ++j) tmp[j] = detail::exp_f32(x[v + j] - shift);
    for (int j = 0; j < kLanes; ++j) lane[j] += tmp[j];
    if (e != nullptr) std::copy(tmp, tmp + kLanes, e + v);
  }
  double sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  for (; v < n; ++v) {
    const float t = detail::exp_f32(x[v] - shift);
    sum += t;
    if (e != nullptr) e[v] = t;
  }
  return sum;
}

}  // namespace

void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                          float dscale) {
  for (int n = 0; n < N; ++n)
    STRATA_CHECK(targets[n] >= 0 && targets[n] < V, "target {} of row {} is outside the vocabulary [0, {})", targets[n],
                 n, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<std::size_t>(n) * V;
    const int target = targets[n];
    const float maxv = row_max(x, V);
    const float x_target = x[target];  // read before an in-place dlogits overwrites it
    float* d = dlogits == nullptr ? nullptr : dlogits + static_cast<std::size_t>(n) * V;
    const double sum = sum_exp(x, V, maxv, d);  // d[v] = exp(x[v] - max), written after x[v] is read
    if (d != nullptr) {
      const float inv = static_cast<float>(1.0 / sum);
      const float e_target = d[target];
      for (int v = 0; v < V; ++v) d[v] = d[v] * inv * dscale;
      d[target] = (e_target * inv - 1.0f) * dscale;
    }
    losses[n] = static_cast<float>(std::log(sum) - (static_cast<double>(x_target) - maxv));
  }
}

}  // namespace strata::gpt
