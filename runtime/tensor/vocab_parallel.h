// The vocabulary-parallel embedding and cross-entropy (Megatron's VocabParallelEmbedding and
// vocab_parallel_cross_entropy): tp rank r holds rows [r Vl, (r + 1) Vl) of the embedding table, Vl = ceil(V / tp),
// and computes the matching columns of a tied LM head's logits. The vocabulary is padded to tp x Vl rows; padded rows
// are 0, take no gradient and never enter the loss. The logits are never gathered: two reductions of N values each
// (the row maxima, then the sums of exponentials with the target's logit) give every rank the exact softmax.
#pragma once

#include <cstdint>

#include "runtime/parallel/tp_split.h"
#include "runtime/tensor/tensor_parallel.h"
#include "runtime/tensor/tp_kernels.h"

namespace strata {

// This rank's part of a vocabulary of `vocab` tokens.
struct VocabShard {
  int begin = 0;  // the first token this rank holds
  int rows = 0;   // rows of its table (Vl, the padded share)
  int valid = 0;  // of which real tokens (the rest is padding)
  static VocabShard of(int vocab, int tp, int tp_rank);
  // The table's split: [vocab, width] cut along dim 0 (the slot's local shape is [rows, width]).
  static TpSplit table_split(int vocab, int width) { return TpSplit{0, 1, {vocab, width}}; }
};

// The embedding of `tokens` (the micro-batch's rows() tokens) into this rank's rows `out` ([local_rows, C]): each rank
// looks up its tokens into `partial` ([rows, C], 0 for the others), then the sum over tp (a reduce-scatter along the
// sequence under sequence parallelism). Returns out (partial itself without sequence parallelism).
float* vocab_parallel_embedding_forward(VocabKernels& k, TensorParallel& tp, float* partial, float* out,
                                        const std::int32_t* tokens, const float* table, const VocabShard& shard, int C);
// dtable += the gradient of this rank's rows; dout is this rank's rows ([local_rows, C]), gathered whole into
// `gathered` ([rows, C]) under sequence parallelism.
void vocab_parallel_embedding_backward(VocabKernels& k, TensorParallel& tp, float* dtable, const float* dout,
                                       float* gathered, const std::int32_t* tokens, const VocabShard& shard, int C);
// losses[n] (the rows() rows) and, unless dlogits is null, dlogits = d(loss) / d(logits) x dscale, written over this
// rank's logits [rows, shard.rows] (dlogits may equal logits). row_max [rows] and stats [2 rows] are scratch.
void vocab_parallel_cross_entropy(VocabKernels& k, TensorParallel& tp, float* losses, float* dlogits,
                                  const float* logits, const std::int32_t* targets, const VocabShard& shard,
                                  float dscale, float* row_max, float* stats);

// The same over bf16 activations and logits (the table, its gradient, the statistics and the losses f32): the
// kernels' *_bf16 methods; the embedding's reduction in bf16 (exact: one rank holds each row's token); the loss's two
// reductions of N values stay f32.
Bf16* vocab_parallel_embedding_forward(VocabKernels& k, TensorParallel& tp, Bf16* partial, Bf16* out,
                                       const std::int32_t* tokens, const float* table, const VocabShard& shard, int C);
void vocab_parallel_embedding_backward(VocabKernels& k, TensorParallel& tp, float* dtable, const Bf16* dout,
                                       Bf16* gathered, const std::int32_t* tokens, const VocabShard& shard, int C);
void vocab_parallel_cross_entropy(VocabKernels& k, TensorParallel& tp, float* losses, Bf16* dlogits, const Bf16* logits,
                                  const std::int32_t* targets, const VocabShard& shard, float dscale, float* row_max,
                                  float* stats);

}  // namespace strata
