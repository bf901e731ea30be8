// RecomputePolicy: what each transformer block keeps for its backward, and what it rebuilds or moves instead
// (docs/memory-model.md, "Memory levers"). One kind for every block, a kind on every K-th block, or one kind per
// block; the planner and the trainers read it the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata {

enum class BlockRecompute : std::uint8_t {
  kNone,       // keeps every activation its backward reads
  kMlp,        // selective: drops the GELU's output, recomputed from its input in the backward
  kAttention,  // selective: drops the attention core's output and row statistics, recomputed from q, k, v
  kFull,       // keeps the block's input only and runs the whole block forward again in the backward
  kOffload,    // keeps every activation, in host memory: copied out after its forward, back before its backward
};
inline constexpr int kNumBlockRecompute = 5;

// "none", "mlp", "attention", "full", "offload".
const char* block_recompute_name(BlockRecompute kind);
// Every kind, in the order above (what --recompute auto chooses among).
std::vector<BlockRecompute> every_block_recompute();
// kInvalidArgument naming the value and the choices for anything else (`flag` names the option in the message).
BlockRecompute parse_block_recompute(const std::string& text, const char* flag = "--recompute");

struct RecomputePolicy {
  BlockRecompute kind = BlockRecompute::kNone;
  // kind applies to the blocks l with (l + 1) % every == 0 (torchtitan's every K-th block), the others keep all.
  int every = 1;
  std::vector<BlockRecompute> per_layer;  // one kind per block when not empty (overrides kind and every)
  bool automatic = false;                 // --recompute auto: the trainer chooses per_layer from the memory budget

  static RecomputePolicy uniform(BlockRecompute kind, int every = 1) {
    RecomputePolicy p;
    p.kind = kind;
    p.every = every;
    return p;
  }
  static RecomputePolicy full() { return uniform(BlockRecompute::kFull); }
  static RecomputePolicy of(std::vector<BlockRecompute> layers);
  // --recompute's value: none | mlp | attention | full | offload | auto, or a comma-separated kind per block; with
  // `every` (--recompute-every) K > 1 the kind applies to every K-th block. kInvalidArgument naming the problem.
  static RecomputePolicy parse(const std::string& text, int every = 1);

  BlockRecompute at(int layer) const;
  // Whether some block may rebuild or move anything (automatic counts: its choice is not known yet).
  bool any() const;
  // How many of the first `layers` blocks take `kind`.
  int count(BlockRecompute kind, int layers) const;
  // kInvalidArgument when a per-block list does not have `layers` entries or `every` is below 1.
  void validate(int layers) const;
  // The value of --recompute (and --recompute-every) that gives this policy: "full", "attention --recompute-every
  // 2", or the per-block list.
  std::string flags(int layers) const;
  // Short and readable: "none", "full", "full on every 2nd block", "2 x attention, 4 x none".
  std::string describe(int layers) const;
  bool operator==(const RecomputePolicy&) const = default;
};

// What a candidate policy costs on one pipeline stage: the matrix-product FLOPs it runs again, the bytes it moves to
// host memory and back, the elements element-wise recomputation (the GELU) writes again, the device bytes it needs.
// Lower is better, in that order.
struct RecomputeCost {
  double flops = 0, offload_bytes = 0, elementwise = 0, memory = 0;
};

// --recompute auto's search. For each stage in turn (`stages[s]`: the blocks it holds, in order; each stage's memory
// depends on its own blocks only), every mix of two of `kinds` over its blocks (the first k blocks one kind, the rest
// the other, k = 0..n: the cheapest mixes of identical blocks lie on such a pair) is tried with `trial`, which returns
// its cost or nothing when it does not fit; the cheapest that fits is kept. Returns the per-block policy
// (automatic set), or the stage where nothing fits in *failed_stage (-1 on success) with the policy left empty.
using RecomputeTrial = std::function<std::optional<RecomputeCost>(const RecomputePolicy& candidate, int stage)>;
RecomputePolicy choose_recompute(int layers, const std::vector<std::vector<int>>& stages,
                                 const std::vector<BlockRecompute>& kinds, const RecomputeTrial& trial,
                                 int* failed_stage);

}  // namespace strata
