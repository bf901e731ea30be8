// What a GPT block's backward reads from its forward, activation by activation, and which of them each
// recomputation kind (runtime/memory/recompute_policy.h) gives up. GptModel allocates by it; the memory prediction
// (models/gpt/training/gpt_memory.h) counts by it.
#pragma once

#include <cstdint>
#include <vector>

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
// output (mlp), the attention core's output and log-sum-exp (attention), all of them (full, offload).
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

// Floats of activation `a` for N rows (Nl of them on this rank's sequence shard), Cl channels of C, Hl heads of
// sequences of T.
inline std::uint64_t act_floats(int a, std::uint64_t N, std::uint64_t Nl, std::uint64_t C, std::uint64_t Cl,
                                std::uint64_t Hl, std::uint64_t T) {
  switch (a) {
    case kActLn1: case kActXmid: case kActLn2: return Nl * C;
    case kActLn1Mean: case kActLn1Rstd: case kActLn2Mean: case kActLn2Rstd: return Nl;
    case kActQkv: return 3 * N * Cl;
    case kActAtty: return N * Cl;
    case kActLse: return (N / T) * Hl * T;
    case kActFch: case kActFchGelu: return 4 * N * Cl;
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
