// Megatron's column- and row-parallel products over a TensorParallel group, each with its collective beside it
// (Megatron-Core's ColumnParallelLinear and RowParallelLinear). Weights are [in, out] row-major (x @ W), as the GPT's
// Conv1D layout; declare their slots with weight_split() / bias_split() so the sharding runtime, the optimizer's
// norm and checkpoints see each rank's slice at its global place (runtime/parallel/tp_split.h).
//
// A micro-batch is the group's rows() rows (B x T); under sequence parallelism a rank's activations outside these
// layers are its local_rows() of them. A column-parallel product followed by a row-parallel one (an MLP, attention)
// needs one collective each way: g after the row-parallel product, f's backward before the column-parallel input
// gradient leaves. Buffers are the caller's; nothing is allocated here. Activations are f32 or, through the overloads
// that take Bf16, bf16 (Megatron's bf16 activations: half the memory and half the bytes on the wire; the products sum
// in f32), with f32 weights either way.
#pragma once

#include <vector>

#include "runtime/parallel/tp_split.h"
#include "runtime/tensor/tensor_parallel.h"
#include "runtime/tensor/tp_kernels.h"

namespace strata {

// y = x @ W + b with W [in, out] split along out: this rank computes out / tp columns. The input is whole on every
// rank (f: the identity forward; under sequence parallelism an all-gather along the sequence), the output split.
class ColumnParallelLinear {
 public:
  // `out` is the global width; parts > 1 splits each of `parts` equal blocks of it (q|k|v by heads).
  ColumnParallelLinear(TensorParallel& tp, LinearKernels& k, int in, int out, int parts = 1);
  // The output as parts of these widths, in order, each split over tp (grouped-query attention's q | k | v: the query
  // heads' width, then the key-value heads' twice); every width must divide by tp. With `atom` (a head's width), a
  // part of fewer atoms than tp ranks is cut into atoms, each held by several ranks (TpSplit::atom): fewer key-value
  // heads than tp ranks; their gradients need sum_shared_grads.
  ColumnParallelLinear(TensorParallel& tp, LinearKernels& k, int in, const std::vector<int>& part_widths,
                       int atom = 0);
  int in() const { return in_; }
  int local_out() const { return local_out_; }
  TpSplit weight_split() const { return TpSplit{1, parts_, {in_, out_}, part_widths_, atom_}; }
  TpSplit bias_split() const { return TpSplit{0, parts_, {out_}, part_widths_, atom_}; }
  // Floats of the staging sum_shared_grads needs: in x the global width of the parts several ranks hold (0: none).
  std::size_t shared_staging_floats() const;
  // The gradients of the pieces several tp ranks hold (dw [in, local_out], db [local_out], null: no bias), each the
  // sum of those ranks' shares: every rank places its pieces at their global columns of `staging` (zero elsewhere),
  // the staging is summed over tp, and each takes its pieces back. Call it on one micro-batch's gradients, before they
  // join accumulated ones. Nothing without shared pieces.
  void sum_shared_grads(float* dw, float* db, float* staging);

  // y [rows, local_out] from x, this rank's rows of the input ([local_rows, in]); under sequence parallelism x is
  // gathered whole into `gathered` ([rows, in]) first. Returns the whole input multiplied (backward takes it).
  // `rows` > 0: a pass over that many rows, at most the group's (a decode step's rows vary), without sequence
  // parallelism; 0: rows().
  const float* forward(float* y, const float* x, float* gathered, const float* w, const float* b, int rows = 0);
  // dw += x^T dy, db += the column sums of dy (db may be null); this rank's share of dx into `partial` [rows, in]
  // (zeroed first), then f's backward: the sum over tp into this rank's rows, `local` ([local_rows, in],
  // reduce-scatter) under sequence parallelism, else `partial` itself (all-reduce). Returns it. x_whole: what
  // forward returned (or the same input gathered again).
  const float* backward(float* partial, float* local, float* dw, float* db, const float* dy, const float* x_whole,
                        const float* w);
  // The same over bf16 activations (weights, bias and their gradients f32): the kernels' *_bf16 methods, and the
  // collectives in bf16 (half the bytes).
  const Bf16* forward(Bf16* y, const Bf16* x, Bf16* gathered, const float* w, const float* b);
  const Bf16* backward(Bf16* partial, Bf16* local, float* dw, float* db, const Bf16* dy, const Bf16* x_whole,
                       const float* w);

 private:
  TensorParallel& tp_;
  LinearKernels& k_;
  int in_, out_, parts_, local_out_;
  std::vector<std::int64_t> part_widths_;  // empty: `parts_` equal ones
  int atom_ = 0;
};

// y = x @ W + b with W [in, out] split along in: this rank holds in / tp input channels (a column-parallel
// product's output) and its partial product is summed over tp (g: an all-reduce; under sequence parallelism a
// reduce-scatter along the sequence). The bias is replicated and added once, after the sum.
class RowParallelLinear {
 public:
  RowParallelLinear(TensorParallel& tp, LinearKernels& k, int in, int out);
  int local_in() const { return local_in_; }
  int out() const { return out_; }
  TpSplit weight_split() const { return TpSplit{0, 1, {in_, out_}}; }
  static TpSplit bias_split() { return TpSplit{}; }

  // The partial product of x [rows, local_in] into `partial` [rows, out], summed over tp into this rank's rows:
  // `local` [local_rows, out] under sequence parallelism, else `partial` in place; then + b. Returns the result.
  // `rows` as ColumnParallelLinear::forward's.
  float* forward(float* partial, float* local, const float* x, const float* w, const float* b, int rows = 0);
  // dy is this rank's rows of the output gradient ([local_rows, out]; g's backward: the identity, under sequence
  // parallelism an all-gather into `gathered` [rows, out]). dx [rows, local_in] is zeroed and written; dw += x^T dy,
  // db += the column sums of the whole dy (equal on every tp rank). Returns the whole dy.
  const float* backward(float* dx, float* gathered, float* dw, float* db, const float* dy, const float* x,
                        const float* w);
  // The same over bf16 activations (weights, bias and their gradients f32).
  Bf16* forward(Bf16* partial, Bf16* local, const Bf16* x, const float* w, const float* b);
  const Bf16* backward(Bf16* dx, Bf16* gathered, float* dw, float* db, const Bf16* dy, const Bf16* x, const float* w);

 private:
  TensorParallel& tp_;
  LinearKernels& k_;
  int in_, out_, local_in_;
};

}  // namespace strata
