// predict_step_memory over a declaration: the bytes a training step holds on one rank at its peak, by ledger
// category, for any model. Strata's own buffers follow from the rank's units (predict_state_memory: the layout with
// its padding, the pools, the data-parallel staging, the optimizer's state); the pools grow by the slots a rehearsal
// of the step held at once; everything else is the trainer's and declared by name: the activations it keeps for the
// micro-batches in flight, its workspace, its own collectives' staging. The GPT and Llama-style trainer's prediction
// is one such declaration (models/gpt/training/gpt_memory.cc); docs/embedding.md writes another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_stats.h"
#include "runtime/sharding/sharding_options.h"
#include "runtime/sharding/state_memory.h"

namespace strata {

// Slots of the two unit pools a step holds at once (a rehearsal's count: the pools grow to it).
struct PoolPeaks {
  std::uint64_t params = 0;  // gathered parameter slots (ZeRO-3)
  std::uint64_t grads = 0;   // unsharded gradient slots (ZeRO-2 and 3)
};

// One buffer of the trainer's own, at the peak of its step.
struct DeclaredBuffer {
  std::string name;      // what it is, as declaration_table shows it
  MemCategory category;  // kActivations, kWorkspace, kCommBuffer, ...
  std::uint64_t bytes = 0;
  bool host = false;  // in host memory (activation offload's host sets), not on the device
};

struct StepDeclaration {
  std::vector<UnitSpec> units;  // this rank's units as its ShardedModel holds them (its tp slices, its stage's)
  ShardingOptions sharding;     // as its ShardedModel has them
  DataParallelSizes groups;
  int optimizer_floats = 2;     // f32 optimizer state per element: AdamW 2 (predict_state_memory)
  bool optimizer_flags = true;  // ShardedAdamW's non-finite flags, a float per slot (a trainer's own optimizer: false)
  // Pool slots the step holds at once, when it holds more than ShardedModel's constructor makes (a pipeline's
  // schedule, from a rehearsal); zero: no more.
  PoolPeaks held;
  // Units the trainer keeps open beyond that (gathered from a first use to a later one, such as tied embeddings used
  // again by the head): one more slot of each pool apiece.
  PoolPeaks kept_open;
  std::vector<DeclaredBuffer> buffers;
  void add(std::string name, MemCategory category, std::uint64_t bytes);
  void add_host(std::string name, MemCategory category, std::uint64_t bytes);
};

// Bytes per ledger category on the device at the peak of the step (the state, the pools grown, the declared buffers).
CategoryBytes predict_step_memory(const StepDeclaration& d);
// The same on the host: the state under offload and the buffers declared with add_host.
CategoryBytes predict_step_host_memory(const StepDeclaration& d);
// "category  bytes  what" rows: Strata's state by category (the host's under offload), the pools' growth, then each
// declared buffer (a host one marked so).
std::string declaration_table(const StepDeclaration& d);

}  // namespace strata
