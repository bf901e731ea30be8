// CPU float32 kernels of the tensor-parallel GPT (docs/tensor-parallel.md): the vocabulary-parallel embedding and
// cross-entropy, the position embedding of a sequence slice, and a bias added after a row-parallel reduction.
// Conventions as cpu_ops.h: forward kernels overwrite, backward kernels add (+=); N rows, C channels. The vocabulary
// kernels have bf16 overloads (bf16 activations, logits and their gradients; the table, the statistics and the
// losses f32): the same arithmetic on the widened values, each bf16 output rounded once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

// out[n,:] = wte[tokens[n] - v_begin,:] when tokens[n] is in [v_begin, v_begin + v_count), else 0.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int v_begin, int v_count, int N, int C);
void embedding_forward(Bf16* out, const int32_t* tokens, const float* wte, int v_begin, int v_count, int N, int C);
// dwte[tokens[n] - v_begin,:] += dout[n,:] for the tokens in range.
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int v_begin, int v_count, int N, int C);
void embedding_backward(float* dwte, const Bf16* dout, const int32_t* tokens, int v_begin, int v_count, int N, int C);
// out[b,t,:] += wpe[t0 + t,:] for b < B, t < T (this rank's T positions of the sequence, from t0).
void position_forward(float* out, const float* wpe, int B, int T, int t0, int C);
// dwpe[t0 + t,:] += sum over b of dout[b,t,:].
void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C);
// out[n,c] += bias[c].
void add_bias(float* out, const float* bias, int N, int C);

// Vocabulary-parallel cross-entropy over this rank's logits[N, V] (its V columns of the vocabulary, from v_begin),
// of which the first `valid` are real (the rest pad the vocabulary to a multiple of tp and never enter the loss).
// Three passes around two tp reductions: the row maxima (then a max over tp), the sums of exp(logit - max) and the
// target's logit (0 when another rank owns the target; then a sum over tp), then the losses and the gradient.
void vocab_max(float* row_max, const float* logits, int N, int V, int valid);
void vocab_max(float* row_max, const Bf16* logits, int N, int V, int valid);
// stats[n] = sum over v < valid of exp(logits[n,v] - row_max[n]); stats[N + n] = the target's logit or 0.
void vocab_sumexp(float* stats, const float* logits, const float* row_max, const int32_t* targets, int v_begin, int N,
                  int V, int valid);
void vocab_sumexp(float* stats, const Bf16* logits, const float* row_max, const int32_t* targets, int v_begin, int N,
                  int V, int valid);
// losses[n] = log(stats[n]) + row_max[n] - stats[N + n];
// dlogits[n,v] = (exp(logits[n,v] - row_max[n]) / stats[n] - [v_begin + v == target]) * dscale for v < valid, and 0
// for the padded columns; written (not added). dlogits may equal logits; null: losses only.
void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max, const float* stats,
                        const int32_t* targets, int v_begin, int N, int V, int valid, float dscale);
void vocab_crossentropy(float* losses, Bf16* dlogits, const Bf16* logits, const float* row_max, const float* stats,
                        const int32_t* targets, int v_begin, int N, int V, int valid, float dscale);

}  // namespace strata::cpu
