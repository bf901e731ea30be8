// What ring attention (ring_attention.h) asks of a trainer's attention kernels: the causal attention of one block of
// queries over one block of keys, each block a range of rows at known global positions, and the pieces that put the
// blocks together (the online-softmax merge, the row dot of the backward, row copies). Strata holds the ring (which
// block, when, from which peer); the arithmetic is the trainer's, on its device, as LinearKernels' is
// (runtime/tensor/tp_kernels.h). The GPT's kernel table implements it on the CPU, f32 and bf16 activations; its CUDA
// table has the f32 forward block and the row copies (the decode path's attention over its KV cache) and refuses the
// rest.
//
// Contract, for every method: pointers are the device's memory; work is ordered on the device's compute stream (the
// CPU runs it inline); forward kernels overwrite their outputs, backward kernels add (+=) into gradients. A block's
// query heads are `heads` groups of D = width / heads columns: query head h uses columns h D .. h D + D - 1 of q, out,
// dout (and dq), which are `width` wide, and has its own lse and di. k and v (and dk, dv) hold kv_heads = KVH key /
// value heads of the same D columns, KVH D wide (grouped-query attention: KVH divides heads, and query head h reads
// key / value head h / (heads / KVH), Hugging Face's repeat_kv order; KVH = heads is multi-head attention, KVH = 1
// multi-query). The gradient of a key / value head sums the terms of its heads / KVH query heads.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace strata {

// Rows of a [batch, rows, columns] tensor of T (float, or Bf16 for bf16 activations) that may sit inside a larger
// one: row (b, i) starts at data + b * batch_stride + i * row_stride (in elements).
template <typename T>
struct RowsOf {
  const T* data = nullptr;
  std::size_t row_stride = 0, batch_stride = 0;
};
template <typename T>
struct RowsOutOf {
  T* data = nullptr;
  std::size_t row_stride = 0, batch_stride = 0;
  operator RowsOf<T>() const { return RowsOf<T>{data, row_stride, batch_stride}; }  // NOLINT: an output read as input
};
using Rows = RowsOf<float>;
using RowsOut = RowsOutOf<float>;
using Bf16Rows = RowsOf<Bf16>;
using Bf16RowsOut = RowsOutOf<Bf16>;
// A statistic per (batch, head, row): (b, h, i) at data + b * batch_stride + h * head_stride + i.
struct RowStats {
  const float* data = nullptr;
  std::size_t head_stride = 0, batch_stride = 0;
};
struct RowStatsOut {
  float* data = nullptr;
  std::size_t head_stride = 0, batch_stride = 0;
  operator RowStats() const { return RowStats{data, head_stride, batch_stride}; }  // NOLINT: as above
};

// One block: q_rows queries at global positions q_pos .. q_pos + q_rows - 1 against kv_rows keys (and values) at
// kv_pos .. kv_pos + kv_rows - 1, causal by position (a query at p sees the keys at positions <= p).
struct AttentionBlock {
  int batch = 0, heads = 0, width = 0;  // B, NH, C
  int q_rows = 0, q_pos = 0;
  int kv_rows = 0, kv_pos = 0;
  int kv_heads = 0;  // KVH, dividing heads; 0: heads (multi-head attention)

  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // Columns of a k or v row: KVH D.
  int kv_width() const { return heads > 0 ? kv_head_count() * (width / heads) : 0; }
};

class AttentionKernels {
 public:
  virtual ~AttentionKernels() = default;
  // The block's attention alone: out = softmax(q k^T / sqrt(D)) v over the keys each query sees, and lse = the
  // log-sum-exp of those scaled scores; a query that sees none gets out 0 and lse -inf. out and lse have q_rows rows.
  virtual void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k,
                                       Rows v) = 0;
  // The block's terms of the gradient, from the whole row's lse and di = rowsum(dout * out) (per query head): with
  // P = exp(q k^T / sqrt(D) - lse) over the keys each query sees and dS = P (dout v^T - di) / sqrt(D),
  // dq += dS k, dk += dS^T q, dv += P^T dout (a key / value head's dk and dv: the sum over its query heads).
  virtual void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Rows dout,
                                        RowStats lse, RowStats di, Rows q, Rows k, Rows v) = 0;
  // The online softmax across blocks, for q_rows rows: lse' = log(e^lse + e^lse_b),
  // out' = out e^(lse - lse') + out_b e^(lse_b - lse') (a row whose lse_b is -inf is left as it is).
  virtual void attention_merge(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows out_b,
                               RowStats lse_b) = 0;
  // di(b, h, i) = the sum over query head h's columns of dout * out, for q_rows rows.
  virtual void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Rows dout, Rows out) = 0;
  // dst = src (add: dst += src) for the first `columns` floats of `rows` rows of `batch` batches.
  virtual void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add) = 0;

  // bf16 activations (RingAttention over bf16 rows): the same arithmetic on q, k, v, dout and out read as bf16 and
  // widened to f32 (a tile at a time), into f32 outputs: out and lse of a block (the ring merges them in f32 and rounds
  // once), and dq, dk, dv (summed in f32 over the ring's steps). The results equal the f32 methods' on the widened
  // values. Kernels without them throw kUnsupported naming the method (the defaults); the CPU kernel table has them.
  virtual void attention_block_forward_bf16(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Bf16Rows q,
                                            Bf16Rows k, Bf16Rows v);
  virtual void attention_block_backward_bf16(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv,
                                             Bf16Rows dout, RowStats lse, RowStats di, Bf16Rows q, Bf16Rows k,
                                             Bf16Rows v);
  virtual void attention_row_dot_bf16(const AttentionBlock& blk, RowStatsOut di, Bf16Rows dout, Bf16Rows out);
  // dst = src for the first `columns` values of `rows` rows of `batch` batches, bf16 to bf16.
  virtual void copy_rows_bf16(Bf16RowsOut dst, Bf16Rows src, int batch, int rows, int columns);
  // dst = src rounded to bf16 once (add: dst = dst + src in f32, rounded once), f32 to bf16.
  virtual void round_rows_bf16(Bf16RowsOut dst, Rows src, int batch, int rows, int columns, bool add);
};

}  // namespace strata
