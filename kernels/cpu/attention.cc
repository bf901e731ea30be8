// Causal attention (multi-head, grouped-query, multi-query): FlashAttention-style forward and backward on the CPU.
//
// Forward: one task per (b, query head h, query tile), reading key / value head h / (NH / KVH); key tiles are
// visited in order with an online softmax (running max m, running sum l, output accumulator O rescaled by
// exp(m_old - m_new)); lse = m + log(l) is saved.
// Backward: one task per (b, key / value head g), so the task owns g's columns of dk and dv and those of its query
// heads in dq, and nothing is atomic; for each key tile (outer), each of g's query heads in order (middle) and each
// query tile at or after the key tile (inner) the probabilities are recomputed as P = exp(S - lse), then
// dV += P^T dO, dP = dO V^T, dS = P * (dP - D_i) / sqrt(D), dQ += dS K, dK += dS^T Q. With KVH = NH (one query head
// a group) these are the multi-head kernel's operations in its order, so its results are bitwise unchanged.
// Every product is a small tile GEMM (tile_gemm below, register-blocked with vector extensions); each output
// sums its terms in a fixed order, so results do not depend on the thread count.
// Memory: per thread a few tiles, plus D_i for every row and head (backward); never a T x T matrix.
// The loops run on a block: queries and keys at global positions (the causal mask taken from them) in strided views.
// The whole sequence is one block; ring attention's (runtime/context) are pieces of it.
#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu {
namespace {

constexpr int kTileQ = 64;  // query rows per tile
constexpr int kTileK = 64;  // keys per tile (the transposed K and V tiles are D x kTileK)

// ---- tile GEMM ----------------------------------------------------------------------------------------------

// Floats in a GCC/Clang vector: v8 is one AVX register with -mavx2 (two SSE registers without); v16 one AVX-512
// register, used where the build's target has AVX-512 (twice the columns a multiply-add, and 32 registers to hold the
// accumulators).
using v8 = float __attribute__((vector_size(32)));
using v16 = float __attribute__((vector_size(64)));
template <typename V>
inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
inline void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// C[MR x L*NV] (+)= sum over kk < k of A(i, kk) * B[kk][j], A(i, kk) = A[i * ars + kk * acs], L the floats of V:
// MR*NV accumulators stay in registers while k runs. Each output sums its terms in kk order, whatever V is.
template <typename V, int MR, int NV>
inline void micro_kernel(int k, const float* A, std::size_t ars, std::size_t acs, const float* B, std::size_t ldb,
                         float* C, std::size_t ldc, bool accumulate) {
  constexpr int L = sizeof(V) / sizeof(float);
  V c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? load<V>(C + r * ldc + L * v) : V{};
  for (int kk = 0; kk < k; ++kk) {
    V b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load<V>(B + kk * ldb + L * v);
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * ars + kk * acs];
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store<V>(C + r * ldc + L * v, c[r][v]);
}

template <typename V, int NV>
void micro_rows(int m, int k, const float* A, std::size_t ars, std::size_t acs, const float* B, std::size_t ldb,
                float* C, std::size_t ldc, bool accumulate) {
  int i = 0;
  for (; i + 6 <= m; i += 6) micro_kernel<V, 6, NV>(k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, accumulate);
  switch (m - i) {
    case 5: micro_kernel<V, 5, NV>(k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, accumulate); break;
    case 4: micro_kernel<V, 4, NV>(k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, accumulate); break;
    case 3: micro_kernel<V, 3, NV>(k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, accumulate); break;
    case 2: micro_kernel<V, 2, NV>(k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, accumulate); break;
    case 1: micro_kernel<V, 1, NV>(k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, accumulate); break;
    default: break;
  }
}

// C[m x n] (+)= op(A)[m x k] @ B[k x n], with A(i, kk) = A[i * ars + kk * acs] (so a transposed A is just other
// strides), B and C row-major with row strides ldb and ldc. Terms are summed in kk order.
void tile_gemm(int m, int n, int k, const float* A, std::size_t ars, std::size_t acs, const float* B, std::size_t ldb,
               float* C, std::size_t ldc, bool accumulate) {
  int j = 0;
#if defined(__AVX512F__)
  for (; j + 32 <= n; j += 32) micro_rows<v16, 2>(m, k, A, ars, acs, B + j, ldb, C + j, ldc, accumulate);
  for (; j + 16 <= n; j += 16) micro_rows<v16, 1>(m, k, A, ars, acs, B + j, ldb, C + j, ldc, accumulate);
#else
  for (; j + 16 <= n; j += 16) micro_rows<v8, 2>(m, k, A, ars, acs, B + j, ldb, C + j, ldc, accumulate);
#endif
  for (; j + 8 <= n; j += 8) micro_rows<v8, 1>(m, k, A, ars, acs, B + j, ldb, C + j, ldc, accumulate);
  for (; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = accumulate ? C[i * ldc + j] : 0.0f;
      for (int kk = 0; kk < k; ++kk) acc += A[i * ars + kk * acs] * B[kk * ldb + j];
      C[i * ldc + j] = acc;
    }
}

// ---- shapes and workspace -----------------------------------------------------------------------------------

struct Dims {
  int D;
  int kv_heads;  // KVH
  int group;     // query heads a key / value head serves: NH / KVH
};

// kv_heads 0 means NH (AttentionBlock's convention).
Dims dims(int C, int NH, int kv_heads) {
  STRATA_CHECK(NH > 0 && C > 0 && C % NH == 0, "C = {} must be a positive multiple of NH = {}", C, NH);
  const int kvh = kv_heads == 0 ? NH : kv_heads;
  STRATA_CHECK(kvh > 0 && NH % kvh == 0, "{} key / value heads must divide NH = {} query heads (grouped-query)",
               kv_heads, NH);
  return Dims{C / NH, kvh, NH / kvh};
}
Dims dims(const AttentionBlock& blk) { return dims(blk.width, blk.heads, blk.kv_heads); }

std::size_t forward_floats_per_thread(int D) {
  return static_cast<std::size_t>(kTileQ) * kTileK  // scores, then probabilities
         + static_cast<std::size_t>(D) * kTileK     // K tile, transposed
         + static_cast<std::size_t>(kTileQ) * D     // output accumulator
         + 2 * static_cast<std::size_t>(kTileQ);    // running max and sum
}

std::size_t backward_floats_per_thread(int D) {
  return 2 * static_cast<std::size_t>(D) * kTileK         // K and V tiles, transposed
         + 2 * static_cast<std::size_t>(kTileK) * D       // dK and dV accumulators
         + 2 * static_cast<std::size_t>(kTileQ) * kTileK;  // P and dP / dS
}

// bf16 views are read a tile at a time, widened into per-thread scratch; f32 views are read in place.
template <typename T>
constexpr bool kWidened = std::is_same_v<T, Bf16>;

// dst[d * kTileK + j] = src[j * stride + d] for j < n: a K or V tile, transposed so score rows vectorize over keys.
template <typename T>
void transpose_tile(float* dst, const T* src, std::size_t stride, int n, int D) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) dst[static_cast<std::size_t>(d) * kTileK + j] = f32_of(src[j * stride + d]);
}

// n rows of D values of a view as f32 rows: the view itself (f32), or its values widened into scratch (bf16, rows of
// D). The f32 products then run on either.
struct TileRows {
  const float* data;
  std::size_t stride;
};
inline TileRows tile_rows(const float* src, std::size_t stride, int, int, float*) { return TileRows{src, stride}; }
inline TileRows tile_rows(const Bf16* src, std::size_t stride, int n, int D, float* scratch) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) scratch[static_cast<std::size_t>(j) * D + d] = src[j * stride + d].value();
  return TileRows{scratch, static_cast<std::size_t>(D)};
}

}  // namespace

std::size_t attention_workspace_bytes(int B, int T, int C, int NH) {
  const int D = dims(C, NH, NH).D;
  const std::size_t threads = static_cast<std::size_t>(omp_get_max_threads());
  // The backward's D_i: one float per row and head, beside its per-thread tiles.
  const std::size_t backward = backward_floats_per_thread(D) * threads +
                               static_cast<std::size_t>(B) * static_cast<std::size_t>(NH) * static_cast<std::size_t>(T);
  return std::max(forward_floats_per_thread(D) * threads, backward) * sizeof(float);
}

// ---- ring attention's blocks ----------------------------------------------------------------------------------

namespace {

// The first value of row i of batch b in a view, head h's columns.
template <typename T>
inline const T* at(RowsOf<T> r, int b, std::size_t i, int col) {
  return r.data + b * r.batch_stride + i * r.row_stride + col;
}
template <typename T>
inline T* at(RowsOutOf<T> r, int b, std::size_t i, int col) {
  return r.data + b * r.batch_stride + i * r.row_stride + col;
}
inline std::size_t stat(std::size_t batch_stride, std::size_t head_stride, int b, int h) {
  return b * batch_stride + h * head_stride;
}

template <typename T>
void block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, RowsOf<T> q, RowsOf<T> k, RowsOf<T> v,
                   bool bf16_products) {
  const Dims dm = dims(blk);
  const int D = dm.D, group = dm.group;
  if (blk.batch == 0 || blk.q_rows == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::size_t tiles = forward_floats_per_thread(D);
  const std::size_t widened = kWidened<T> ? static_cast<std::size_t>(kTileQ + kTileK) * D : 0;  // Q and V tiles
  const std::size_t per_thread = tiles + widened;
  std::vector<float> workspace(per_thread * omp_get_max_threads());
  const int q_tiles = (blk.q_rows + kTileQ - 1) / kTileQ;

#pragma omp parallel for collapse(3) schedule(dynamic, 1)
  for (int b = 0; b < blk.batch; ++b)
    for (int h = 0; h < blk.heads; ++h)
      for (int qt = 0; qt < q_tiles; ++qt) {
        float* S = workspace.data() + per_thread * omp_get_thread_num();
        float* Kt = S + kTileQ * kTileK;
        float* O = Kt + static_cast<std::size_t>(D) * kTileK;
        float* m = O + static_cast<std::size_t>(kTileQ) * D;
        float* l = m + kTileQ;
        float* Qw = S + tiles;  // bf16: the widened Q and V tiles
        float* Vw = Qw + static_cast<std::size_t>(kTileQ) * D;
        const T* qb = at(q, b, 0, h * D);
        const T* kb = at(k, b, 0, h / group * D);
        const T* vb = at(v, b, 0, h / group * D);
        const int i0 = qt * kTileQ, i1 = std::min(blk.q_rows, i0 + kTileQ), nq = i1 - i0;
        const TileRows Q = tile_rows(qb + i0 * q.row_stride, q.row_stride, nq, D, Qw);
        std::fill(m, m + nq, -std::numeric_limits<float>::infinity());
        std::fill(l, l + nq, 0.0f);
        std::fill(O, O + static_cast<std::size_t>(nq) * D, 0.0f);
        // Keys at positions up to the tile's last query's.
        const int key_end = std::clamp(blk.q_pos + i1 - blk.kv_pos, 0, blk.kv_rows);
        for (int j0 = 0; j0 < key_end; j0 += kTileK) {
          const int nk = std::min(key_end, j0 + kTileK) - j0;
          transpose_tile(Kt, kb + j0 * k.row_stride, k.row_stride, nk, D);
          tile_gemm(nq, nk, D, Q.data, Q.stride, 1, Kt, kTileK, S, kTileK, false);  // S = Q K^T
          for (int ii = 0; ii < nq; ++ii) {
            float* s = S + static_cast<std::size_t>(ii) * kTileK;
            const int n = std::clamp(blk.q_pos + i0 + ii - (blk.kv_pos + j0) + 1, 0, nk);
            float row_max = m[ii];
            for (int j = 0; j < n; ++j) {
              s[j] *= scale;
              row_max = std::max(row_max, s[j]);
            }
            const float correction = n == 0 ? 1.0f : detail::exp_f32(m[ii] - row_max);
            float row_sum = 0.0f;
            for (int j = 0; j < n; ++j) {
              s[j] = detail::exp_f32(s[j] - row_max);
              row_sum += s[j];
            }
            if (bf16_products)
              for (int j = 0; j < n; ++j) s[j] = detail::round_bf16(s[j]);  // after the f32 row sum
            std::fill(s + n, s + nk, 0.0f);  // masked keys have probability 0
            l[ii] = l[ii] * correction + row_sum;
            m[ii] = row_max;
            float* o = O + static_cast<std::size_t>(ii) * D;
            for (int d = 0; d < D; ++d) o[d] *= correction;
          }
          const TileRows V = tile_rows(vb + j0 * v.row_stride, v.row_stride, nk, D, Vw);
          tile_gemm(nq, D, nk, S, kTileK, 1, V.data, V.stride, O, D, true);  // O += P V
        }
        for (int ii = 0; ii < nq; ++ii) {
          const int i = i0 + ii;
          float* y = at(out, b, i, h * D);
          float& row_lse = lse.data[stat(lse.batch_stride, lse.head_stride, b, h) + i];
          if (l[ii] == 0.0f) {  // no key visible
            std::fill(y, y + D, 0.0f);
            row_lse = -std::numeric_limits<float>::infinity();
            continue;
          }
          const float inv = 1.0f / l[ii];
          const float* o = O + static_cast<std::size_t>(ii) * D;
          for (int d = 0; d < D; ++d) y[d] = o[d] * inv;
          row_lse = m[ii] + std::log(l[ii]);
        }
      }
}

// A backward block's key tile: keys j0 .. j0 + nk - 1 of one key / value head, k row-major (row stride k_stride) and
// Kt, Vt its K and V transposed; dK and dV accumulate the tile's gradients (nk x D); P and dS are scratch; k is f32
// (widened, for bf16 views); Qw and dOw: scratch for a query tile's q and dout widened (bf16 views).
struct KeyTile {
  int j0, nk;
  const float* k;
  std::size_t k_stride;
  const float *Kt, *Vt;
  float *dK, *dV, *P, *dS, *Qw, *dOw;
};
// One query head's rows of a backward block (a batch's): q, dout and dq with their row strides, lse and di.
template <typename T>
struct QueryHead {
  const T* q;
  std::size_t q_stride;
  const T* dout;
  std::size_t dout_stride;
  float* dq;
  std::size_t dq_stride;
  const float *lse, *di;
};

// The terms of a query head's rows from i_first on against a key tile: dq += dS K, and the tile's dK += dS^T Q,
// dV += P^T dO, query tile by query tile.
template <typename T>
void backward_key_tile(const AttentionBlock& blk, int D, int i_first, const KeyTile& t, const QueryHead<T>& qh,
                       bool bf16_products) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int nk = t.nk;
  float *P = t.P, *dS = t.dS;
  for (int i0 = i_first; i0 < blk.q_rows; i0 += kTileQ) {
    const int nq = std::min(blk.q_rows, i0 + kTileQ) - i0;
    const TileRows qi = tile_rows(qh.q + i0 * qh.q_stride, qh.q_stride, nq, D, t.Qw);
    const TileRows dyi = tile_rows(qh.dout + i0 * qh.dout_stride, qh.dout_stride, nq, D, t.dOw);
    tile_gemm(nq, nk, D, qi.data, qi.stride, 1, t.Kt, kTileK, P, kTileK, false);     // S
    tile_gemm(nq, nk, D, dyi.data, dyi.stride, 1, t.Vt, kTileK, dS, kTileK, false);  // dP
    for (int ii = 0; ii < nq; ++ii) {
      const int i = i0 + ii;
      const int n = std::clamp(blk.q_pos + i - (blk.kv_pos + t.j0) + 1, 0, nk);
      float* p = P + static_cast<std::size_t>(ii) * kTileK;
      float* ds = dS + static_cast<std::size_t>(ii) * kTileK;
      const float l_i = qh.lse[i], d_i = qh.di[i];
      for (int j = 0; j < n; ++j) {
        p[j] = detail::exp_f32(p[j] * scale - l_i);
        ds[j] = p[j] * (ds[j] - d_i) * scale;
      }
      if (bf16_products)  // dS from the f32 P, then both rounded for their products
        for (int j = 0; j < n; ++j) {
          p[j] = detail::round_bf16(p[j]);
          ds[j] = detail::round_bf16(ds[j]);
        }
      std::fill(p + n, p + nk, 0.0f);  // masked keys
      std::fill(ds + n, ds + nk, 0.0f);
    }
    float* dqi = qh.dq + i0 * qh.dq_stride;
    tile_gemm(nk, D, nq, P, 1, kTileK, dyi.data, dyi.stride, t.dV, D, true);        // dV += P^T dO
    tile_gemm(nq, D, nk, dS, kTileK, 1, t.k, t.k_stride, dqi, qh.dq_stride, true);  // dQ += dS K
    tile_gemm(nk, D, nq, dS, 1, kTileK, qi.data, qi.stride, t.dK, D, true);         // dK += dS^T Q
  }
}

template <typename T>
void block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, RowsOf<T> dout, RowStats lse,
                    RowStats di, RowsOf<T> q, RowsOf<T> k, RowsOf<T> v, bool bf16_products) {
  const Dims dm = dims(blk);
  const int D = dm.D, kv_heads = dm.kv_heads, group = dm.group;
  if (blk.batch == 0 || blk.q_rows == 0 || blk.kv_rows == 0) return;
  const std::size_t tiles = backward_floats_per_thread(D);
  // bf16: the widened K tile, and a query tile's q and dout
  const std::size_t widened = kWidened<T> ? static_cast<std::size_t>(kTileK + 2 * kTileQ) * D : 0;
  const std::size_t per_thread = tiles + widened;
  std::vector<float> workspace(per_thread * omp_get_max_threads());

#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int b = 0; b < blk.batch; ++b)
    for (int g = 0; g < kv_heads; ++g) {
      float* Kt = workspace.data() + per_thread * omp_get_thread_num();
      float* Vt = Kt + static_cast<std::size_t>(D) * kTileK;
      float* dK = Vt + static_cast<std::size_t>(D) * kTileK;
      float* dV = dK + static_cast<std::size_t>(kTileK) * D;
      float* P = dV + static_cast<std::size_t>(kTileK) * D;
      float* dS = P + static_cast<std::size_t>(kTileQ) * kTileK;
      float* Kw = Kt + tiles;  // bf16: the widened K tile, then a query tile's q and dout
      float* Qw = Kw + static_cast<std::size_t>(kTileK) * D;
      float* dOw = Qw + static_cast<std::size_t>(kTileQ) * D;
      const T* kb = at(k, b, 0, g * D);
      const T* vb = at(v, b, 0, g * D);
      float* dkb = at(dk, b, 0, g * D);
      float* dvb = at(dv, b, 0, g * D);
      for (int j0 = 0; j0 < blk.kv_rows; j0 += kTileK) {
        const int nk = std::min(blk.kv_rows, j0 + kTileK) - j0;
        // Queries at positions from the tile's first key's on see some of it.
        const int i_first = std::clamp(blk.kv_pos + j0 - blk.q_pos, 0, blk.q_rows);
        if (i_first == blk.q_rows) continue;
        transpose_tile(Kt, kb + j0 * k.row_stride, k.row_stride, nk, D);
        transpose_tile(Vt, vb + j0 * v.row_stride, v.row_stride, nk, D);
        std::fill(dK, dK + static_cast<std::size_t>(nk) * D, 0.0f);
        std::fill(dV, dV + static_cast<std::size_t>(nk) * D, 0.0f);
        const TileRows K = tile_rows(kb + j0 * k.row_stride, k.row_stride, nk, D, Kw);
        const KeyTile tile{j0, nk, K.data, K.stride, Kt, Vt, dK, dV, P, dS, Qw, dOw};
        for (int h = g * group; h < (g + 1) * group; ++h) {  // the group's query heads, in order
          const QueryHead<T> qh{at(q, b, 0, h * D),
                                q.row_stride,
                                at(dout, b, 0, h * D),
                                dout.row_stride,
                                at(dq, b, 0, h * D),
                                dq.row_stride,
                                lse.data + stat(lse.batch_stride, lse.head_stride, b, h),
                                di.data + stat(di.batch_stride, di.head_stride, b, h)};
          backward_key_tile(blk, D, i_first, tile, qh, bf16_products);
        }
        for (int j = 0; j < nk; ++j) {
          float* dkj = dkb + (j0 + j) * dk.row_stride;
          float* dvj = dvb + (j0 + j) * dv.row_stride;
          for (int d = 0; d < D; ++d) {
            dkj[d] += dK[static_cast<std::size_t>(j) * D + d];
            dvj[d] += dV[static_cast<std::size_t>(j) * D + d];
          }
        }
      }
    }
}

template <typename T>
void row_dot(const AttentionBlock& blk, RowStatsOut di, RowsOf<T> dout, RowsOf<T> out) {
  const int D = dims(blk).D;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < blk.batch; ++b)
    for (int h = 0; h < blk.heads; ++h)
      for (int i = 0; i < blk.q_rows; ++i) {
        const T* dy = at(dout, b, i, h * D);
        const T* y = at(out, b, i, h * D);
        float acc = 0.0f;
        for (int d = 0; d < D; ++d) acc += f32_of(dy[d]) * f32_of(y[d]);
        di.data[stat(di.batch_stride, di.head_stride, b, h) + i] = acc;
      }
}

}  // namespace

void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k, Rows v,
                             bool bf16_products) {
  block_forward(blk, out, lse, q, k, v, bf16_products);
}
void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Bf16Rows q, Bf16Rows k,
                             Bf16Rows v, bool bf16_products) {
  block_forward(blk, out, lse, q, k, v, bf16_products);
}
void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Rows dout, RowStats lse,
                              RowStats di, Rows q, Rows k, Rows v, bool bf16_products) {
  block_backward(blk, dq, dk, dv, dout, lse, di, q, k, v, bf16_products);
}
void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Bf16Rows dout,
                              RowStats lse, RowStats di, Bf16Rows q, Bf16Rows k, Bf16Rows v, bool bf16_products) {
  block_backward(blk, dq, dk, dv, dout, lse, di, q, k, v, bf16_products);
}
void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Rows dout, Rows out) { row_dot(blk, di, dout, out); }
void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Bf16Rows dout, Bf16Rows out) {
  row_dot(blk, di, dout, out);
}

void attention_merge(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows out_b, RowStats lse_b) {
  const int D = dims(blk).D;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < blk.batch; ++b)
    for (int h = 0; h < blk.heads; ++h)
      for (int i = 0; i < blk.q_rows; ++i) {
        float& la = lse.data[stat(lse.batch_stride, lse.head_stride, b, h) + i];
        const float lb = lse_b.data[stat(lse_b.batch_stride, lse_b.head_stride, b, h) + i];
        if (lb == -std::numeric_limits<float>::infinity()) continue;
        float* y = at(out, b, i, h * D);
        const float* yb = at(out_b, b, i, h * D);
        const float mx = std::max(la, lb);
        const float wa = la == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(la - mx);
        const float wb = std::exp(lb - mx), sum = wa + wb;
        const float ca = wa / sum, cb = wb / sum;
        for (int d = 0; d < D; ++d) y[d] = y[d] * ca + yb[d] * cb;
        la = mx + std::log(sum);
      }
}

void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i) {
      float* d = at(dst, b, i, 0);
      const float* s = at(src, b, i, 0);
      if (add)
        for (int c = 0; c < columns; ++c) d[c] += s[c];
      else
        std::memcpy(d, s, static_cast<std::size_t>(columns) * sizeof(float));
    }
}

void copy_rows(Bf16RowsOut dst, Bf16Rows src, int batch, int rows, int columns) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i)
      std::memcpy(at(dst, b, i, 0), at(src, b, i, 0), static_cast<std::size_t>(columns) * sizeof(Bf16));
}

void round_rows(Bf16RowsOut dst, Rows src, int batch, int rows, int columns, bool add) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i) {
      Bf16* d = at(dst, b, i, 0);
      const float* s = at(src, b, i, 0);
      for (int c = 0; c < columns; ++c) d[c] = Bf16::from(add ? d[c].value() + s[c] : s[c]);
    }
}

// ---- the whole sequence: one block of every query against every key -----------------------------------------

namespace {

// The q, k and v views of a whole-sequence qkv [B, T, C + 2 KVH D] (or of its gradient), and the block of every query
// against every key.
struct Sequence {
  AttentionBlock blk;
  std::size_t row, seq, kv_width;
};
Sequence sequence(int B, int T, int C, int NH, int KVH) {
  STRATA_CHECK(KVH > 0, "attention over {} key / value heads: KVH must be >= 1 (and divide NH = {})", KVH, NH);
  const std::size_t kv_width = static_cast<std::size_t>(KVH) * dims(C, NH, KVH).D;
  return Sequence{AttentionBlock{B, NH, C, T, 0, T, 0, KVH}, static_cast<std::size_t>(C) + 2 * kv_width,
                  static_cast<std::size_t>(T), kv_width};
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                       bool bf16_products) {
  const auto [blk, row, seq, kv_width] = sequence(B, T, C, NH, KVH);
  attention_block_forward(blk, RowsOut{out, static_cast<std::size_t>(C), seq * C},
                          RowStatsOut{lse, seq, static_cast<std::size_t>(NH) * seq}, Rows{qkv, row, seq * row},
                          Rows{qkv + C, row, seq * row}, Rows{qkv + C + kv_width, row, seq * row}, bf16_products);
}

void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                        int T, int C, int NH, int KVH, bool bf16_products) {
  const auto [blk, row, seq, kv_width] = sequence(B, T, C, NH, KVH);
  if (B == 0 || T == 0) return;
  const std::size_t heads = static_cast<std::size_t>(NH);
  std::vector<float> di(static_cast<std::size_t>(B) * heads * seq);  // D_i = rowsum(dout_i * out_i), per head
  const Rows y{out, static_cast<std::size_t>(C), seq * C}, dy{dout, static_cast<std::size_t>(C), seq * C};
  attention_row_dot(blk, RowStatsOut{di.data(), seq, heads * seq}, dy, y);
  attention_block_backward(blk, RowsOut{dqkv, row, seq * row}, RowsOut{dqkv + C, row, seq * row},
                           RowsOut{dqkv + C + kv_width, row, seq * row}, dy, RowStats{lse, seq, heads * seq},
                           RowStats{di.data(), seq, heads * seq}, Rows{qkv, row, seq * row},
                           Rows{qkv + C, row, seq * row}, Rows{qkv + C + kv_width, row, seq * row}, bf16_products);
}

}  // namespace strata::cpu
