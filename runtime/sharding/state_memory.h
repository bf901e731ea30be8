// predict_state_memory: the bytes a ShardedModel (and its optimizer's state) allocates, by ledger category, on the
// device and (under offload) on the host: the sum of its units' UnitPlacement, its pools and the MPI backend's
// staging. The over-budget advice and train_gpt's exact prediction both start from it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_stats.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/sharding_options.h"
#include "runtime/sharding/unit_placement.h"

namespace strata {

// A unit as a trainer declares it: a name and its parameters.
struct UnitSpec {
  std::string name;
  std::vector<SlotSpec> slots;
};

using CategoryBytes = std::array<std::uint64_t, kNumMemCategories>;
std::uint64_t total(const CategoryBytes& b);

struct StateMemory {
  CategoryBytes device{};
  CategoryBytes host{};  // all zero without offload
  // The pools the constructor makes (plan_pools over the units' placements): each pooled buffer's slot size and its
  // initial slots. A step that holds more units open at once grows a pool by a slot of that size each.
  std::vector<PoolPlan> pools;
};

// The sizes of the data-parallel groups (DataParallelGroups) that shape the state.
struct DataParallelSizes {
  int shard = 1;      // dp_shard
  int replicate = 1;  // dp_replicate
  int dp() const { return shard * replicate; }
};

// A ShardedModel of `units` under `o` with these groups, on the CPU backend: its persistent buffers, its pools as the
// constructor makes them (a trainer that keeps more units open at once grows them in its first step: add those
// slots), the MPI backend's grow-only staging for its largest reduction (NCCL needs none, so on a GPU this errs on
// the safe side), and an optimizer keeping `optimizer_floats` f32 values per shard element (AdamW: 2, for m and v)
// beside the master, plus the global norm's two doubles and, with `slot_flags`, ShardedAdamW's non-finite flags (one
// float per slot; a trainer's own optimizer has none).
StateMemory predict_state_memory(const std::vector<UnitSpec>& units, const ShardingOptions& o,
                                 const DataParallelSizes& groups, int optimizer_floats, bool slot_flags = true);

// The MPI backend's staging for an all-reduce of n elements of esz bytes over g ranks (collectives/
// mpi_communicator.cc): 2 g ceil(n / g) esz. A lane's staging (one per group and stream) grows to its largest
// collective and lives as long as the group; NCCL stages nothing.
std::uint64_t all_reduce_staging(std::uint64_t n, std::uint64_t g, std::uint64_t esz);

// When the state does not fit in `budget` bytes per rank: the cheapest change of ZeRO stage or offload that does
// (strata-plan's order), as one sentence, or why none does.
std::string state_fit_advice(const std::vector<UnitSpec>& units, const ShardingOptions& o,
                             const DataParallelSizes& groups, int optimizer_floats, std::uint64_t budget);

}  // namespace strata
