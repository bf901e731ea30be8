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

namespace {

// The kernels by activation type.
void embed(VocabKernels& k, float* out, const std::int32_t* tokens, const float* table, const VocabShard& s, int N,
           int C) {
  k.embedding_forward(out, tokens, table, s.begin, s.valid, N, C);
}
void embed(VocabKernels& k, Bf16* out, const std::int32_t* tokens, const float* table, const VocabShard& s, int N,
           int C) {
  k.embedding_forward_bf16(out, tokens, table, s.begin, s.valid, N, C);
}
void embed_grad(VocabKernels& k, float* dtable, const float* dout, const std::int32_t* tokens, const VocabShard& s,
                int N, int C) {
  k.embedding_backward(dtable, dout, tokens, s.begin, s.valid, N, C);
}
void embed_grad(VocabKernels& k, float* dtable, const Bf16* dout, const std::int32_t* tokens, const VocabShard& s,
                int N, int C) {
  k.embedding_backward_bf16(dtable, dout, tokens, s.begin, s.valid, N, C);
}
void row_max_of(VocabKernels& k, float* row_max, const float* logits, const VocabShard& s, int N) {
  k.vocab_max(row_max, logits, N, s.rows, s.valid);
}
void row_max_of(VocabKernels& k, float* row_max, const Bf16* logits, const VocabShard& s, int N) {
  k.vocab_max_bf16(row_max, logits, N, s.rows, s.valid);
}
void sumexp(VocabKernels& k, float* stats, const float* logits, const float* row_max, const std::int32_t* targets,
            const VocabShard& s, int N) {
  k.vocab_sumexp(stats, logits, row_max, targets, s.begin, N, s.rows, s.valid);
}
void sumexp(VocabKernels& k, float* stats, const Bf16* logits, const float* row_max, const std::int32_t* targets,
            const VocabShard& s, int N) {
  k.vocab_sumexp_bf16(stats, logits, row_max, targets, s.begin, N, s.rows, s.valid);
}
void crossentropy(VocabKernels& k, float* losses, float* dlogits, const float* logits, const float* row_max,
                  const float* stats, const std::int32_t* targets, const VocabShard& s, int N, float dscale) {
  k.vocab_crossentropy(losses, dlogits, logits, row_max, stats, targets, s.begin, N, s.rows, s.valid, dscale);
}
void crossentropy(VocabKernels& k, float* losses, Bf16* dlogits, const Bf16* logits, const float* row_max,
                  const float* stats, const std::int32_t* targets, const VocabShard& s, int N, float dscale) {
  k.vocab_crossentropy_bf16(losses, dlogits, logits, row_max, stats, targets, s.begin, N, s.rows, s.valid, dscale);
}

template <typename T>
T* embedding_forward_of(VocabKernels& k, TensorParallel& tp, T* partial, T* out, const std::int32_t* tokens,
                        const float* table, const VocabShard& shard, int C) {
  T* whole = tp.sequence_parallel() ? partial : out;
  embed(k, whole, tokens, table, shard, tp.rows(), C);
  return tp.reduce_partial(whole, out, C);
}

template <typename T>
void embedding_backward_of(VocabKernels& k, TensorParallel& tp, float* dtable, const T* dout, T* gathered,
                           const std::int32_t* tokens, const VocabShard& shard, int C) {
  const T* whole = tp.to_full(dout, gathered, C);
  embed_grad(k, dtable, whole, tokens, shard, tp.rows(), C);
}

template <typename T>
void cross_entropy_of(VocabKernels& k, TensorParallel& tp, float* losses, T* dlogits, const T* logits,
                      const std::int32_t* targets, const VocabShard& shard, float dscale, float* row_max,
                      float* stats) {
  const int N = tp.rows();
  row_max_of(k, row_max, logits, shard, N);
  tp.max(row_max, static_cast<std::size_t>(N));
  sumexp(k, stats, logits, row_max, targets, shard, N);
  tp.sum(stats, 2 * static_cast<std::size_t>(N));
  crossentropy(k, losses, dlogits, logits, row_max, stats, targets, shard, N, dscale);
}

}  // namespace

float* vocab_parallel_embedding_forward(VocabKernels& k, TensorParallel& tp, float* partial, float* out,
                                        const std::int32_t* tokens, const float* table, const VocabShard& shard,
                                        int C) {
  return embedding_forward_of(k, tp, partial, out, tokens, table, shard, C);
}

Bf16* vocab_parallel_embedding_forward(VocabKernels& k, TensorParallel& tp, Bf16* partial, Bf16* out,
                                       const std::int32_t* tokens, const float* table, const VocabShard& shard, int C) {
  return embedding_forward_of(k, tp, partial, out, tokens, table, shard, C);
}

void vocab_parallel_embedding_backward(VocabKernels& k, TensorParallel& tp, float* dtable, const float* dout,
                                       float* gathered, const std::int32_t* tokens, const VocabShard& shard, int C) {
  embedding_backward_of(k, tp, dtable, dout, gathered, tokens, shard, C);
}

void vocab_parallel_embedding_backward(VocabKernels& k, TensorParallel& tp, float* dtable, const Bf16* dout,
                                       Bf16* gathered, const std::int32_t* tokens, const VocabShard& shard, int C) {
  embedding_backward_of(k, tp, dtable, dout, gathered, tokens, shard, C);
}

void vocab_parallel_cross_entropy(VocabKernels& k, TensorParallel& tp, float* losses, float* dlogits,
                                  const float* logits, const std::int32_t* targets, const VocabShard& shard,
                                  float dscale, float* row_max, float* stats) {
  cross_entropy_of(k, tp, losses, dlogits, logits, targets, shard, dscale, row_max, stats);
}

void vocab_parallel_cross_entropy(VocabKernels& k, TensorParallel& tp, float* losses, Bf16* dlogits, const Bf16* logits,
                                  const std::int32_t* targets, const VocabShard& shard, float dscale, float* row_max,
                                  float* stats) {
  cross_entropy_of(k, tp, losses, dlogits, logits, targets, shard, dscale, row_max, stats);
}

}  // namespace strata
