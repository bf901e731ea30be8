// Causal attention on the CPU, FlashAttention-style: the whole sequence, and the blocks ring attention runs.
// Conventions as every kernel of kernels/cpu (kernels/README.md): forward kernels overwrite their outputs, backward
// kernels add (+=) into every gradient; row counts may be 0.
#pragma once

#include <cstddef>

#include "runtime/context/attention_kernels.h"

namespace strata::cpu {

// Causal self-attention, FlashAttention-style: tiled with an online softmax, never a T x T matrix. NH query heads of
// D = C / NH columns and KVH key / value heads (grouped-query attention: KVH divides NH, query head h reads key / value
// head h / (NH / KVH); KVH = NH is multi-head attention). A qkv[B,T,C + 2 KVH D] row is [q: C | k: KVH D | v: KVH D];
// query head h uses columns h*D .. h*D+D-1 of q, key / value head g columns g*D .. g*D+D-1 of k and of v.
// out[B,T,C] (head h in columns h*D ..); lse[B,NH,T] = log-sum-exp of row t's scaled scores (scale 1/sqrt(D)).
// bf16_products: the probabilities (unnormalised, in the forward) are rounded to bf16 before they multiply V, and
// in the backward P and dS before their products, as FlashAttention's bf16 kernels do (the caller rounds q, k, v
// and dout); row sums, maxima and lse stay f32.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                       bool bf16_products = false);
// dqkv[B,T,C + 2 KVH D] (qkv's layout) += the gradient of out with respect to qkv, recomputing the scores tile by tile
// from q, k and lse (D_i = rowsum(dout_i * out_i), dS = P * (dP - D_i)); a key / value head's gradient sums its query
// heads' terms in head order. out and lse are attention_forward's.
void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                        int T, int C, int NH, int KVH, bool bf16_products = false);
// The blocks of ring attention (runtime/context/attention_kernels.h has the semantics): attention_forward and
// attention_backward for a block of queries against a block of keys at given global positions, with strided views.
// attention_forward and attention_backward are these over the whole sequence (one block, the same operations in the
// same order). The key / value heads are blk.kv_heads'; bf16_products as theirs.
void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k, Rows v,
                             bool bf16_products = false);
void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Rows dout, RowStats lse,
                              RowStats di, Rows q, Rows k, Rows v, bool bf16_products = false);
void attention_merge(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows out_b, RowStats lse_b);
void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Rows dout, Rows out);
void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add);
// The same over bf16 activations (AttentionKernels' *_bf16): q, k, v, dout and out read as bf16 and widened to f32 a
// tile at a time, every output f32; the results equal the f32 kernels' on the widened values, bit for bit.
void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Bf16Rows q, Bf16Rows k,
                             Bf16Rows v, bool bf16_products = false);
void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Bf16Rows dout,
                              RowStats lse, RowStats di, Bf16Rows q, Bf16Rows k, Bf16Rows v,
                              bool bf16_products = false);
void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Bf16Rows dout, Bf16Rows out);
void copy_rows(Bf16RowsOut dst, Bf16Rows src, int batch, int rows, int columns);
// dst = src rounded to bf16 once (add: dst = dst + src in f32, rounded once).
void round_rows(Bf16RowsOut dst, Rows src, int batch, int rows, int columns, bool add);
// Bytes attention_forward and attention_backward each allocate at most, per call, with num_threads() threads:
// O(tile) per thread, and the backward's D_i (B x NH x T floats); nothing grows as T^2, and nothing depends on KVH.
std::size_t attention_workspace_bytes(int B, int T, int C, int NH);

}  // namespace strata::cpu
