// Causal multi-head attention for the GPT-2 example: FlashAttention-style forward and backward on the CPU.
//
// Forward: one task per (b, h, query tile); key tiles are visited in order with an online softmax (running
// max m, running sum l, output accumulator O rescaled by exp(m_old - m_new)); lse = m + log(l) is saved.
// Backward: one task per (b, h), so the task owns that head's columns of dq, dk and dv and nothing is atomic;
// for each key tile (outer) and each query row at or after it (inner) the probabilities are recomputed as
// P = exp(S - lse), then dV += P^T dO, dP = dO V^T, dS = P * (dP - D_i) / sqrt(D), dQ += dS K, dK += dS^T Q.
// Memory: per thread a few tiles (forward) plus D_i for T rows (backward); never a T x T matrix.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "examples/gpt/kernels.h"
#include "runtime/core/error.h"

namespace strata::gpt {
namespace {

constexpr int kTileQ = 64;  // query rows per forward task
constexpr int kTileK = 64;  // keys per tile (the transposed K and V tiles are D x kTileK)

struct Dims {
  int B, T, C, NH, D;
  std::size_t row;  // floats per qkv row (3C)
};

Dims dims(int B, int T, int C, int NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0, "C = {} must be a positive multiple of NH = {}", C, NH);
  return Dims{B, T, C, NH, C / NH, static_cast<std::size_t>(3) * C};
}

std::size_t forward_floats_per_thread(int D) {
  return static_cast<std::size_t>(kTileQ) * kTileK   // scores / probabilities
         + static_cast<std::size_t>(D) * kTileK      // K tile, transposed
         + static_cast<std::size_t>(kTileQ) * D      // output accumulator
         + 2 * static_cast<std::size_t>(kTileQ);     // running max and sum
}

std::size_t backward_floats_per_thread(int T, int D) {
  return 2 * static_cast<std::size_t>(D) * kTileK    // K and V tiles, transposed
         + 2 * static_cast<std::size_t>(kTileK) * D  // dK and dV accumulators
         + 2 * static_cast<std::size_t>(kTileK)      // one row of P and of dP / dS
         + static_cast<std::size_t>(D)               // one row of dQ
         + static_cast<std::size_t>(T);              // D_i = rowsum(dout_i * out_i) for the head
}

// dst[d * kTileK + j] = src[j * stride + d] for j < n: a K or V tile, transposed so score rows vectorize over keys.
void transpose_tile(float* dst, const float* src, std::size_t stride, int n, int D) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) dst[static_cast<std::size_t>(d) * kTileK + j] = src[j * stride + d];
}

// s[j] = sum_d a[d] * tile_t[d][j] for j < n (the dot products of one row with n keys or values).
inline void row_times_tile(float* s, const float* a, const float* tile_t, int n, int D) {
  std::fill(s, s + n, 0.0f);
  for (int d = 0; d < D; ++d) {
    const float ad = a[d];
    const float* t = tile_t + static_cast<std::size_t>(d) * kTileK;
    for (int j = 0; j < n; ++j) s[j] += ad * t[j];
  }
}

}  // namespace

std::size_t attention_workspace_bytes(int B, int T, int C, int NH) {
  (void)B;
  const Dims g = dims(B, T, C, NH);
  const std::size_t per_thread = std::max(forward_floats_per_thread(g.D), backward_floats_per_thread(T, g.D));
  return per_thread * static_cast<std::size_t>(omp_get_max_threads()) * sizeof(float);
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const Dims g = dims(B, T, C, NH);
  const int D = g.D;
  if (B == 0 || T == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::size_t per_thread = forward_floats_per_thread(D);
  std::vector<float> workspace(per_thread * omp_get_max_threads());
  const int q_tiles = (T + kTileQ - 1) / kTileQ;

  // Later query tiles see more keys: dynamic scheduling balances the causal triangle.
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int qt = 0; qt < q_tiles; ++qt) {
        float* ws = workspace.data() + per_thread * omp_get_thread_num();
        float* S = ws;
        float* Kt = S + kTileQ * kTileK;
        float* O = Kt + static_cast<std::size_t>(D) * kTileK;
        float* m = O + static_cast<std::size_t>(kTileQ) * D;
        float* l = m + kTileQ;
        const float* base = qkv + static_cast<std::size_t>(b) * T * g.row;
        const float* q = base + h * D;
        const float* k = base + C + h * D;
        const float* v = base + 2 * C + h * D;
        const int i0 = qt * kTileQ, i1 = std::min(T, i0 + kTileQ), nq = i1 - i0;
        std::fill(m, m + nq, -std::numeric_limits<float>::infinity());
        std::fill(l, l + nq, 0.0f);
        std::fill(O, O + static_cast<std::size_t>(nq) * D, 0.0f);

        for (int j0 = 0; j0 < i1; j0 += kTileK) {
          const int nk = std::min(i1, j0 + kTileK) - j0;
          transpose_tile(Kt, k + j0 * g.row, g.row, nk, D);
          for (int ii = 0; ii < nq; ++ii) {
            const int i = i0 + ii;
            const int n = std::min(nk, i - j0 + 1);  // keys j0 .. i are visible to row i
            if (n <= 0) continue;
            float* s = S + static_cast<std::size_t>(ii) * kTileK;
            row_times_tile(s, q + i * g.row, Kt, n, D);
            float row_max = m[ii];
            for (int j = 0; j < n; ++j) {
              s[j] *= scale;
              row_max = std::max(row_max, s[j]);
            }
            const float correction = std::exp(m[ii] - row_max);  // 0 on the first tile (m = -inf)
            float row_sum = 0.0f;
            for (int j = 0; j < n; ++j) {
              s[j] = std::exp(s[j] - row_max);
              row_sum += s[j];
            }
            l[ii] = l[ii] * correction + row_sum;
            m[ii] = row_max;
            float* o = O + static_cast<std::size_t>(ii) * D;
            for (int d = 0; d < D; ++d) o[d] *= correction;
            for (int j = 0; j < n; ++j) {
              const float p = s[j];
              const float* vj = v + (j0 + j) * g.row;
              for (int d = 0; d < D; ++d) o[d] += p * vj[d];
            }
          }
        }
        for (int ii = 0; ii < nq; ++ii) {
          const int i = i0 + ii;
          const float inv = 1.0f / l[ii];
          const float* o = O + static_cast<std::size_t>(ii) * D;
          float* y = out + (static_cast<std::size_t>(b) * T + i) * C + h * D;
          for (int d = 0; d < D; ++d) y[d] = o[d] * inv;
          lse[(static_cast<std::size_t>(b) * NH + h) * T + i] = m[ii] + std::log(l[ii]);
        }
      }
}

void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                        int T, int C, int NH) {
  const Dims g = dims(B, T, C, NH);
  const int D = g.D;
  if (B == 0 || T == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::size_t per_thread = backward_floats_per_thread(T, D);
  std::vector<float> workspace(per_thread * omp_get_max_threads());

#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      float* ws = workspace.data() + per_thread * omp_get_thread_num();
      float* Kt = ws;
      float* Vt = Kt + static_cast<std::size_t>(D) * kTileK;
      float* dK = Vt + static_cast<std::size_t>(D) * kTileK;
      float* dV = dK + static_cast<std::size_t>(kTileK) * D;
      float* p = dV + static_cast<std::size_t>(kTileK) * D;
      float* ds = p + kTileK;
      float* dq = ds + kTileK;
      float* Di = dq + D;
      const std::size_t row0 = static_cast<std::size_t>(b) * T;
      const float* q = qkv + row0 * g.row + h * D;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dqh = dqkv + row0 * g.row + h * D;
      float* dkh = dqh + C;
      float* dvh = dqh + 2 * C;
      const float* dy = dout + row0 * C + h * D;
      const float* y = out + row0 * C + h * D;
      const float* lse_h = lse + (static_cast<std::size_t>(b) * NH + h) * T;

      for (int i = 0; i < T; ++i) {
        float acc = 0.0f;
        for (int d = 0; d < D; ++d) acc += dy[static_cast<std::size_t>(i) * C + d] * y[static_cast<std::size_t>(i) * C + d];
        Di[i] = acc;
      }

      for (int j0 = 0; j0 < T; j0 += kTileK) {
        const int nk = std::min(T, j0 + kTileK) - j0;
        transpose_tile(Kt, k + j0 * g.row, g.row, nk, D);
        transpose_tile(Vt, v + j0 * g.row, g.row, nk, D);
        std::fill(dK, dK + static_cast<std::size_t>(nk) * D, 0.0f);
        std::fill(dV, dV + static_cast<std::size_t>(nk) * D, 0.0f);
        for (int i = j0; i < T; ++i) {  // rows before j0 see none of these keys
          const int n = std::min(nk, i - j0 + 1);
          const float* qi = q + i * g.row;
          const float* dyi = dy + static_cast<std::size_t>(i) * C;
          row_times_tile(p, qi, Kt, n, D);
          for (int j = 0; j < n; ++j) p[j] = std::exp(p[j] * scale - lse_h[i]);
          row_times_tile(ds, dyi, Vt, n, D);  // dP
          for (int j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - Di[i]) * scale;
          std::fill(dq, dq + D, 0.0f);
          for (int j = 0; j < n; ++j) {
            const float pj = p[j], sj = ds[j];
            const float* kj = k + (j0 + j) * g.row;
            float* dvj = dV + static_cast<std::size_t>(j) * D;
            float* dkj = dK + static_cast<std::size_t>(j) * D;
            for (int d = 0; d < D; ++d) {
              dvj[d] += pj * dyi[d];
              dkj[d] += sj * qi[d];
              dq[d] += sj * kj[d];
            }
          }
          float* dqi = dqh + i * g.row;
          for (int d = 0; d < D; ++d) dqi[d] += dq[d];
        }
        for (int j = 0; j < nk; ++j) {
          float* dkj = dkh + (j0 + j) * g.row;
          float* dvj = dvh + (j0 + j) * g.row;
          for (int d = 0; d < D; ++d) {
            dkj[d] += dK[static_cast<std::size_t>(j) * D + d];
            dvj[d] += dV[static_cast<std::size_t>(j) * D + d];
          }
        }
      }
    }
}

}  // namespace strata::gpt
