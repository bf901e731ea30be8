// Causal multi-head attention on the GPU, FlashAttention-2 style: tiles in shared memory, an online softmax, lse.
// Grouped-query attention: qkv rows are [q: C | k: KVH * D | v: KVH * D], and query head h reads kv head
// h / (NH / KVH) (KVH = NH is plain multi-head attention).
//
// Tiles of kTile = 32 queries and 32 keys, so lane j of a warp owns key j of the current key tile; a block has
// kWarps warps and warp w owns query rows w, w + kWarps, ... of its query tile (its row state stays in registers
// and its rows of the shared accumulators are touched by no other warp).
//   forward:  one block per (b, h, query tile); key tiles in order, online softmax (running max m and sum l, the
//             output accumulator rescaled by exp(m_old - m_new)), then out = O / l and lse = m + log l.
//   backward: two kernels, so every gradient element has one writer and no atomics are needed:
//             dK/dV: one block per (b, kv head, key tile), looping over the group's query heads in order and, for
//             each, over its query tiles from the diagonal on (a kv head's gradient sums its query heads' terms in
//             that fixed order, in shared memory); dQ: one block per (b, h, query tile), key tiles up to the
//             diagonal. Both recompute P = exp(S - lse) and
//             dS = P * (dP - D_i) / sqrt(D) tile by tile (D_i = rowsum(dout_i * out_i), recomputed
//             where needed rather than stored).
// Global memory holds only the inputs and outputs: never a T x T matrix, no workspace.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/launch.h"

namespace strata::cuda::detail {
namespace {

constexpr int kTile = kWarpSize;  // queries and keys per tile; lane j <-> key j
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr std::size_t kDefaultSharedLimit = 48 * 1024;  // above this a kernel must opt in

// K and V tiles are stored with a row stride of D + 1 so that lanes reading key j's element d (a dot product per
// lane) hit different banks.
std::size_t forward_floats(int D) {
  return 2 * static_cast<std::size_t>(kTile) * D              // Q, O accumulator
         + 2 * static_cast<std::size_t>(kTile) * (D + 1)      // K, V
         + static_cast<std::size_t>(kWarps) * kTile;          // one probability row per warp
}
std::size_t dkdv_floats(int D) {
  return 2 * static_cast<std::size_t>(kTile) * (D + 1)        // K, V
         + 4 * static_cast<std::size_t>(kTile) * D            // dK, dV accumulators, Q, dO
         + 2 * static_cast<std::size_t>(kTile) * kTile;       // P, dS
}
std::size_t dq_floats(int D) {
  return 3 * static_cast<std::size_t>(kTile) * D              // Q, dO, dQ accumulator
         + 2 * static_cast<std::size_t>(kTile) * (D + 1)      // K, V
         + static_cast<std::size_t>(kWarps) * kTile           // one dS row per warp
         + 2 * static_cast<std::size_t>(kTile);               // D_i and lse_i of the tile's rows
}

__device__ inline float dot(const float* a, const float* b, int D) {
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc += a[d] * b[d];
  return acc;
}

// dst[r * D + d] = src[r * src_stride + d] for r < rows (a tile of rows, dense).
__device__ inline void load_rows(float* dst, const float* src, std::size_t src_stride, int rows, int D) {
  for (int e = threadIdx.x; e < rows * D; e += kThreads) dst[e] = src[(e / D) * src_stride + e % D];
}
// The same into a padded tile: dst[r * (D + 1) + d].
__device__ inline void load_rows_padded(float* dst, const float* src, std::size_t src_stride, int rows, int D) {
  for (int e = threadIdx.x; e < rows * D; e += kThreads)
    dst[(e / D) * (D + 1) + e % D] = src[(e / D) * src_stride + e % D];
}

// x rounded to the nearest bf16 (ties to even) when `on`: bf16 products, the rounding points of kernels/cpu.
__device__ inline float maybe_bf16(float x, bool on) { return on ? __bfloat162float(__float2bfloat16_rn(x)) : x; }

// Where head h's q, and its kv head's k and v, start in row 0 of batch b of qkv (rows of C + 2 KVH D floats).
struct HeadColumns {
  std::size_t row;  // floats per qkv row
  const float *q, *k, *v;
};
__device__ inline HeadColumns head_columns(const float* qkv, int b, int h, int T, int C, int NH, int KVH, int D) {
  const std::size_t row = C + 2 * static_cast<std::size_t>(KVH) * D;
  const int kvh = h / (NH / KVH);
  const float* base = qkv + static_cast<std::size_t>(b) * T * row;
  const float* k = base + C + static_cast<std::size_t>(kvh) * D;
  return HeadColumns{row, base + static_cast<std::size_t>(h) * D, k, k + static_cast<std::size_t>(KVH) * D};
}

__global__ __launch_bounds__(kThreads) void attention_forward_kernel(float* out, float* lse, const float* qkv, int T,
                                                                     int C, int NH, int KVH, int D, float scale,
                                                                     int q_tiles, bool bf16) {
  extern __shared__ float smem[];
  const int ldk = D + 1;
  float* Qs = smem;
  float* Os = Qs + kTile * D;
  float* Ks = Os + kTile * D;
  float* Vs = Ks + kTile * ldk;
  float* Ps = Vs + kTile * ldk;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int qt = q_tiles - 1 - static_cast<int>(blockIdx.x % q_tiles);  // later (longer) query tiles start first
  const int bh = static_cast<int>(blockIdx.x / q_tiles);
  const int b = bh / NH, h = bh % NH;
  const int i0 = qt * kTile, nq = min(kTile, T - i0), i1 = i0 + nq;
  const auto [row, q, k, v] = head_columns(qkv, b, h, T, C, NH, KVH, D);

  load_rows(Qs, q + i0 * row, row, nq, D);
  for (int e = threadIdx.x; e < nq * D; e += kThreads) Os[e] = 0.0f;
  float m[kRowsPerWarp], l[kRowsPerWarp];
#pragma unroll
  for (int kk = 0; kk < kRowsPerWarp; ++kk) {
    m[kk] = -INFINITY;
    l[kk] = 0.0f;
  }

  for (int j0 = 0; j0 < i1; j0 += kTile) {
    const int nk = min(kTile, i1 - j0);
    __syncthreads();  // the previous K and V tiles are no longer read (the first time: Q and O are written)
    load_rows_padded(Ks, k + j0 * row, row, nk, D);
    load_rows_padded(Vs, v + j0 * row, row, nk, D);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kRowsPerWarp; ++kk) {
      const int r = warp + kk * kWarps;
      const int n = min(nk, i0 + r - j0 + 1);  // row i0 + r sees keys j0 .. j0 + n - 1 of this tile
      if (r >= nq || n <= 0) continue;         // the same for the whole warp
      const float s = lane < n ? dot(Qs + r * D, Ks + lane * ldk, D) * scale : -INFINITY;
      const float m_new = fmaxf(m[kk], warp_max(s));  // finite: lane 0 always sees a key
      const float p = lane < n ? expf(s - m_new) : 0.0f;
      const float correction = expf(m[kk] - m_new);  // 0 on the row's first tile (m = -inf, O = 0)
      l[kk] = l[kk] * correction + warp_sum(p);
      m[kk] = m_new;
      float* pw = Ps + warp * kTile;
      pw[lane] = maybe_bf16(p, bf16);  // after the f32 row sum
      __syncwarp();
      float* o = Os + r * D;
      for (int d = lane; d < D; d += kWarpSize) {
        float acc = o[d] * correction;
        for (int j = 0; j < n; ++j) acc += pw[j] * Vs[j * ldk + d];
        o[d] = acc;
      }
      __syncwarp();  // pw is rewritten for the warp's next row
    }
  }

#pragma unroll
  for (int kk = 0; kk < kRowsPerWarp; ++kk) {
    const int r = warp + kk * kWarps;
    if (r >= nq) continue;
    const std::size_t i = static_cast<std::size_t>(b) * T + i0 + r;
    const float inv = 1.0f / l[kk];
    for (int d = lane; d < D; d += kWarpSize) out[i * C + h * D + d] = Os[r * D + d] * inv;
    if (lane == 0) lse[(static_cast<std::size_t>(b) * NH + h) * T + i0 + r] = m[kk] + logf(l[kk]);
  }
}

// dK and dV of one key tile of one kv head: for each query head of its group in order, query tiles from the
// diagonal to T; accumulators in shared memory, each element owned by one thread (the same e -> (j, d) mapping for
// zeroing, accumulating and the final add).
__global__ __launch_bounds__(kThreads) void attention_dkdv_kernel(float* dqkv, const float* dout, const float* out,
                                                                  const float* lse, const float* qkv, int T, int C,
                                                                  int NH, int KVH, int D, float scale, int k_tiles,
                                                                  bool bf16) {
  extern __shared__ float smem[];
  const int ldk = D + 1;
  float* Ks = smem;
  float* Vs = Ks + kTile * ldk;
  float* dKs = Vs + kTile * ldk;
  float* dVs = dKs + kTile * D;
  float* Qs = dVs + kTile * D;
  float* dOs = Qs + kTile * D;
  float* Ps = dOs + kTile * D;
  float* dSs = Ps + kTile * kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int kt = static_cast<int>(blockIdx.x % k_tiles);  // early key tiles (more query rows) start first
  const int bkv = static_cast<int>(blockIdx.x / k_tiles);
  const int b = bkv / KVH, kvh = bkv % KVH, group = NH / KVH;
  const int j0 = kt * kTile, nk = min(kTile, T - j0);
  const std::size_t row0 = static_cast<std::size_t>(b) * T;
  const auto [row, q_first, k, v] = head_columns(qkv, b, kvh * group, T, C, NH, KVH, D);

  load_rows_padded(Ks, k + j0 * row, row, nk, D);
  load_rows_padded(Vs, v + j0 * row, row, nk, D);
  for (int e = threadIdx.x; e < nk * D; e += kThreads) {
    dKs[e] = 0.0f;
    dVs[e] = 0.0f;
  }

  for (int g = 0; g < group; ++g) {  // the group's query heads, in order
    const int h = kvh * group + g;
    const float* q = q_first + static_cast<std::size_t>(g) * D;
    const float* dy = dout + row0 * C + h * D;
    const float* y = out + row0 * C + h * D;
    const float* lse_h = lse + (static_cast<std::size_t>(b) * NH + h) * T;
    for (int i0 = j0; i0 < T; i0 += kTile) {  // query rows before j0 see none of these keys
      const int nq = min(kTile, T - i0);
      __syncthreads();  // the previous Q, dO, P and dS are no longer read (the first time: K and V are written)
      load_rows(Qs, q + i0 * row, row, nq, D);
      load_rows(dOs, dy + i0 * static_cast<std::size_t>(C), C, nq, D);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kRowsPerWarp; ++kk) {
        const int r = warp + kk * kWarps;
        if (r >= nq) continue;  // the same for the whole warp
        const int i = i0 + r;
        float di = 0.0f;  // D_i = rowsum(dout_i * out_i)
        for (int d = lane; d < D; d += kWarpSize) di += dOs[r * D + d] * y[static_cast<std::size_t>(i) * C + d];
        di = warp_sum(di);
        float p = 0.0f, ds = 0.0f;  // masked keys (and lanes past the tile) contribute nothing
        if (lane < nk && j0 + lane <= i) {
          p = expf(dot(Qs + r * D, Ks + lane * ldk, D) * scale - lse_h[i]);
          ds = p * (dot(dOs + r * D, Vs + lane * ldk, D) - di) * scale;
        }
        Ps[r * kTile + lane] = maybe_bf16(p, bf16);  // dS from the f32 P, then both rounded for their products
        dSs[r * kTile + lane] = maybe_bf16(ds, bf16);
      }
      __syncthreads();
      for (int e = threadIdx.x; e < nk * D; e += kThreads) {  // dV += P^T dO, dK += dS^T Q
        const int j = e / D, d = e % D;
        float acc_v = dVs[e], acc_k = dKs[e];
        for (int r = 0; r < nq; ++r) {
          acc_v += Ps[r * kTile + j] * dOs[r * D + d];
          acc_k += dSs[r * kTile + j] * Qs[r * D + d];
        }
        dVs[e] = acc_v;
        dKs[e] = acc_k;
      }
    }
  }

  float* dk = dqkv + row0 * row + C + static_cast<std::size_t>(kvh) * D;
  float* dv = dk + static_cast<std::size_t>(KVH) * D;
  for (int e = threadIdx.x; e < nk * D; e += kThreads) {
    const std::size_t at = (j0 + e / D) * row + e % D;
    dk[at] += dKs[e];
    dv[at] += dVs[e];
  }
}

// dQ of one query tile: key tiles up to the diagonal; warp w owns its rows of the dQ accumulator.
__global__ __launch_bounds__(kThreads) void attention_dq_kernel(float* dqkv, const float* dout, const float* out,
                                                                const float* lse, const float* qkv, int T, int C,
                                                                int NH, int KVH, int D, float scale, int q_tiles,
                                                                bool bf16) {
  extern __shared__ float smem[];
  const int ldk = D + 1;
  float* Qs = smem;
  float* dOs = Qs + kTile * D;
  float* dQs = dOs + kTile * D;
  float* Ks = dQs + kTile * D;
  float* Vs = Ks + kTile * ldk;
  float* dSw = Vs + kTile * ldk;
  float* Di = dSw + kWarps * kTile;
  float* Li = Di + kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int qt = q_tiles - 1 - static_cast<int>(blockIdx.x % q_tiles);
  const int bh = static_cast<int>(blockIdx.x / q_tiles);
  const int b = bh / NH, h = bh % NH;
  const int i0 = qt * kTile, nq = min(kTile, T - i0), i1 = i0 + nq;
  const std::size_t row0 = static_cast<std::size_t>(b) * T;
  const auto [row, q, k, v] = head_columns(qkv, b, h, T, C, NH, KVH, D);
  const float* dy = dout + row0 * C + h * D;
  const float* y = out + row0 * C + h * D;
  const float* lse_h = lse + (static_cast<std::size_t>(b) * NH + h) * T;

  load_rows(Qs, q + i0 * row, row, nq, D);
  load_rows(dOs, dy + i0 * static_cast<std::size_t>(C), C, nq, D);
  for (int e = threadIdx.x; e < nq * D; e += kThreads) dQs[e] = 0.0f;
  __syncthreads();
  for (int r = warp; r < nq; r += kWarps) {  // D_i = rowsum(dout_i * out_i) and lse_i, read by the row's warp
    const std::size_t i = static_cast<std::size_t>(i0 + r);
    float di = 0.0f;
    for (int d = lane; d < D; d += kWarpSize) di += dOs[r * D + d] * y[i * C + d];
    di = warp_sum(di);
    if (lane == 0) {
      Di[r] = di;
      Li[r] = lse_h[i];
    }
  }

  for (int j0 = 0; j0 < i1; j0 += kTile) {
    const int nk = min(kTile, i1 - j0);
    __syncthreads();  // the previous K and V tiles are no longer read
    load_rows_padded(Ks, k + j0 * row, row, nk, D);
    load_rows_padded(Vs, v + j0 * row, row, nk, D);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kRowsPerWarp; ++kk) {
      const int r = warp + kk * kWarps;
      const int n = min(nk, i0 + r - j0 + 1);  // row i0 + r sees keys j0 .. j0 + n - 1 of this tile
      if (r >= nq || n <= 0) continue;         // the same for the whole warp
      float ds = 0.0f;
      if (lane < n) {
        const float p = expf(dot(Qs + r * D, Ks + lane * ldk, D) * scale - Li[r]);
        ds = p * (dot(dOs + r * D, Vs + lane * ldk, D) - Di[r]) * scale;
      }
      float* dsw = dSw + warp * kTile;
      dsw[lane] = maybe_bf16(ds, bf16);
      __syncwarp();
      for (int d = lane; d < D; d += kWarpSize) {  // dQ += dS K
        float acc = dQs[r * D + d];
        for (int j = 0; j < n; ++j) acc += dsw[j] * Ks[j * ldk + d];
        dQs[r * D + d] = acc;
      }
      __syncwarp();  // dsw is rewritten for the warp's next row
    }
  }

  __syncthreads();  // rows of dQs were written by their warps; all threads add them out
  float* dq = dqkv + row0 * row + h * D;
  for (int e = threadIdx.x; e < nq * D; e += kThreads) dq[(i0 + e / D) * row + e % D] += dQs[e];
}

// Opts the kernel in to `bytes` of dynamic shared memory where that is above the default limit.
template <typename Kernel>
cudaError_t allow_shared(Kernel kernel, std::size_t bytes) {
  if (bytes <= kDefaultSharedLimit) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace

std::size_t attention_shared_bytes(int D) {
  return std::max({forward_floats(D), dkdv_floats(D), dq_floats(D)}) * sizeof(float);
}

cudaError_t launch_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                                     bool bf16, cudaStream_t stream) {
  if (B == 0 || T == 0) return cudaSuccess;
  const int D = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int q_tiles = (T + kTile - 1) / kTile;
  const std::size_t bytes = forward_floats(D) * sizeof(float);
  if (cudaError_t rc = allow_shared(attention_forward_kernel, bytes); rc != cudaSuccess) return rc;
  attention_forward_kernel<<<B * NH * q_tiles, kThreads, bytes, stream>>>(out, lse, qkv, T, C, NH, KVH, D, scale,
                                                                          q_tiles, bf16);
  return cudaGetLastError();
}

cudaError_t launch_attention_backward(float* dqkv, const float* dout, const float* out, const float* lse,
                                      const float* qkv, int B, int T, int C, int NH, int KVH, bool bf16,
                                      cudaStream_t stream) {
  if (B == 0 || T == 0) return cudaSuccess;
  const int D = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int tiles = (T + kTile - 1) / kTile;
  const std::size_t dkdv_bytes = dkdv_floats(D) * sizeof(float);
  const std::size_t dq_bytes = dq_floats(D) * sizeof(float);
  if (cudaError_t rc = allow_shared(attention_dkdv_kernel, dkdv_bytes); rc != cudaSuccess) return rc;
  if (cudaError_t rc = allow_shared(attention_dq_kernel, dq_bytes); rc != cudaSuccess) return rc;
  attention_dkdv_kernel<<<B * KVH * tiles, kThreads, dkdv_bytes, stream>>>(dqkv, dout, out, lse, qkv, T, C, NH, KVH, D,
                                                                           scale, tiles, bf16);
  if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  attention_dq_kernel<<<B * NH * tiles, kThreads, dq_bytes, stream>>>(dqkv, dout, out, lse, qkv, T, C, NH, KVH, D,
                                                                      scale, tiles, bf16);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
