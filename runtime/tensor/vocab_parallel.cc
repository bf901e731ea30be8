// The vocabulary-parallel embedding and cross-entropy: the trainer's kernels around the tp reductions.
#include "runtime/tensor/vocab_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

VocabShard VocabShard::of(int vocab, int tp, int tp_rank) {
  STRATA_CHECK(vocab >= 1 && tp >= 1 && tp_rank >= 0 && tp_rank < tp, "a vocabulary of {} over tp {} (rank {})",
               vocab, tp, tp_rank);
  VocabShard s;
  s.rows = (vocab + tp - 1) / tp;
  s.begin = tp_rank * s.rows;
  s.valid = std::max(0, std::min(s.rows, vocab - s.begin));
  return s;
}

float* vocab_parallel_embedding_forward(VocabKernels& k, TensorParallel& tp, float* partial, float* out,
                                        const std::int32_t* tokens, const float* table, const VocabShard& shard,
                                        int C) {
  float* whole = tp.sequence_parallel() ? partial : out;
  k.embedding_forward(whole, tokens, table, shard.begin, shard.valid, tp.rows(), C);
  return tp.reduce_partial(whole, out, C);
}

void vocab_parallel_embedding_backward(VocabKernels& k, TensorParallel& tp, float* dtable, const float* dout,
                                       float* gathered, const std::int32_t* tokens, const VocabShard& shard, int C) {
  const float* whole = tp.to_full(dout, gathered, C);
  k.embedding_backward(dtable, whole, tokens, shard.begin, shard.valid, tp.rows(), C);
}

void vocab_parallel_cross_entropy(VocabKernels& k, TensorParallel& tp, float* losses, float* dlogits,
                                  const float* logits, const std::int32_t* targets, const VocabShard& shard,
                                  float dscale, float* row_max, float* stats) {
  const int N = tp.rows();
  k.vocab_max(row_max, logits, N, shard.rows, shard.valid);
  tp.max(row_max, static_cast<std::size_t>(N));
  k.vocab_sumexp(stats, logits, row_max, targets, shard.begin, N, shard.rows, shard.valid);
  tp.sum(stats, 2 * static_cast<std::size_t>(N));
  k.vocab_crossentropy(losses, dlogits, logits, row_max, stats, targets, shard.begin, N, shard.rows, shard.valid,
                       dscale);
}

}  // namespace strata
