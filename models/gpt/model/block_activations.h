// What a block's backward reads from its forward (either family's), activation by activation, and which of them each
// recomputation kind (runtime/memory/recompute_policy.h) gives up. GptModel allocates by it; the memory prediction
// (models/gpt/training/gpt_memory.h) counts by it.
#pragma once

#include <cstdint>
#include <vector>

#include "models/gpt/model/gpt_model.h"
#include "runtime/memory/recompute_policy.h"
#include "runtime/parallel/pipeline_schedule.h"

namespace strata::gpt {

// In the order of the block's forward. Under sequence parallelism the LayerNorm outputs, their statistics and x_mid
// are this rank's rows (Nl); qkv, the attention output and the MLP's are the whole sequence's rows (N) of this rank's
// channels (Cl = C / tp); lse is [B, heads / tp, T].
enum BlockAct {
  kActLn1, kActLn1Mean, kActLn1Rstd, kActQkv, kActAtty, kActLse, kActXmid, kActLn2, kActLn2Mean, kActLn2Rstd, kActFch,
  kActFchGelu, kNumBlockActs
};
using ActMask = std::uint32_t;
inline constexpr ActMask act_bit(int a) { return ActMask{1} << a; }
inline constexpr ActMask kAllActs = (ActMask{1} << kNumBlockActs) - 1;

// The activations a block of this kind does not keep on the device between its forward and its backward: the GELU's
// output, or SwiGLU's (mlp), the attention core's output and log-sum-exp (attention), all of them (full, offload).
inline ActMask dropped_by(BlockRecompute kind) {
  switch (kind) {
    case BlockRecompute::kNone: return 0;
    case BlockRecompute::kMlp: return act_bit(kActFchGelu);
    case BlockRecompute::kAttention: return act_bit(kActAtty) | act_bit(kActLse);
    case BlockRecompute::kFull:
    case BlockRecompute::kOffload: return kAllActs;
  }
  return 0;
}

// The widths of one block's activations on one rank: N rows of the micro-batch (Nl of them on this rank's sequence
// shard), C residual channels, this rank's share of q | k | v (qkv), of the attention's output (att), of the MLP's up
// product (up: GPT-2's 4C, Llama's gate | up 2F) and of its activation (act: 4C, or F), Hl heads of sequences of T;
// norm_mean: the norms keep a mean beside rstd (LayerNorm; RMSNorm keeps rstd only).
struct BlockWidths {
  std::uint64_t N = 0, Nl = 0, C = 0, qkv = 0, att = 0, up = 0, act = 0, Hl = 0, T = 0;
  bool norm_mean = true;
  static BlockWidths of(const GptConfig& cfg, std::uint64_t N, std::uint64_t Nl, int tp, std::uint64_t T);
};

// Floats of activation `a`.
inline std::uint64_t act_floats(int a, const BlockWidths& w) {
  switch (a) {
    case kActLn1: case kActXmid: case kActLn2: return w.Nl * w.C;
    case kActLn1Mean: case kActLn2Mean: return w.norm_mean ? w.Nl : 0;
    case kActLn1Rstd: case kActLn2Rstd: return w.Nl;
    case kActQkv: return w.N * w.qkv;
    case kActAtty: return w.N * w.att;
    case kActLse: return (w.N / w.T) * w.Hl * w.T;
    case kActFch: return w.N * w.up;
    case kActFchGelu: return w.N * w.act;
    default: return 0;
  }
}

// What the blocks of a rank keep, by position in its chunks (one set of buffers serves a position in every chunk, so
// it keeps the union of what the blocks there keep), which positions offload, and what any of its recomputations
// rebuilds (one set for all blocks). GptModel allocates by it; gpt_memory.cc counts by it.
struct PositionPlan {
  std::vector<ActMask> keep;
  std::vector<bool> offloads;
  ActMask rebuilt = 0;
};
PositionPlan plan_positions(const std::vector<LayerRange>& chunks, const RecomputePolicy& policy);

}  // namespace strata::gpt
