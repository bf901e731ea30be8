// predict_state_memory: the bytes a ShardedModel allocates for itself, by ledger category, on the device and (under
// offload) on the host. The one copy of that arithmetic: the over-budget advice and train_gpt's exact prediction
// both start from it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/memory_stats.h"
#include "runtime/sharding/sharded_model.h"

namespace strata {

using CategoryBytes = std::array<std::uint64_t, kNumMemCategories>;
std::uint64_t total(const CategoryBytes& b);

struct StateMemory {
  CategoryBytes device{};
  CategoryBytes host{};  // all zero without offload
};

// A ShardedModel of `units` under `o` on a job of `world` ranks (`local_size` per node), on the CPU backend: its
// persistent state, its pools as the constructor makes them (a trainer that keeps more units gathered at once grows
// them in its first step: add those slots), the norm's buffer, and the MPI backend's grow-only staging for its
// largest reduction (NCCL needs none, so on a GPU this errs on the safe side).
StateMemory predict_state_memory(const std::vector<UnitSpec>& units, const ShardingOptions& o, int world,
                                 int local_size);

}  // namespace strata
