// Rehearsals of a step's unit protocol: how many gathered-parameter and unsharded-gradient slots a rank's step holds
// at once (StepDeclaration::held), counted by running the real ShardedModel (its prefetch, no-sync and reshard rules)
// on units one element wide, so no second copy of the protocol is kept to drift from it. The GPT's pipeline rehearsal
// (models/gpt/training/pipeline_rehearsal.h) runs its own stage through rehearse_pools; a trainer whose steps call
// their units in the usual order runs rehearse_unit_protocol.
#pragma once

#include <functional>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/memory/step_memory.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/sharding/sharded_model.h"

namespace strata {

// The same units, slots (names, flags, order) one element each (a zero-size slot stays empty, a scalar a scalar),
// without their tp splits: pools count slots, not bytes, so a rehearsal runs on these.
std::vector<UnitSpec> rehearsal_units(const std::vector<UnitSpec>& units);

// The slots a model's gathered-parameter and unsharded-gradient pools have grown to (0 for a pool it has none of).
PoolPeaks pool_slots(const ShardedModel& model);

// Builds a ShardedModel over `units` with `options` on a CPU device of its own and one-rank groups (`self`: no peer,
// no transfer), runs `step` on it (one step's calls: forwards, backwards, the micro-batch controls), waits for its
// gradients and returns the slots each pool grew to: the most units gathered (unsharded gradients held) at once.
using RehearsalStep = std::function<void(ShardedModel& model, Communicator& self)>;
PoolPeaks rehearse_pools(const std::vector<UnitSpec>& units, const ShardingOptions& options, const RehearsalStep& step);

// The order most steps call their units in, for rehearse_unit_protocol.
struct UnitProtocol {
  int micro_batches = 1;  // per step, without a schedule (a schedule has its own)
  // false: no-sync accumulation, gradients left unsharded until each unit's last backward of the step reduces them.
  bool sync_every_micro_batch = true;
  // A pipeline rank's chunks: chunk c holds units [chunk_first[c], chunk_first[c + 1]) (the last to the end). Empty:
  // one chunk of every unit.
  std::vector<int> chunk_first;
  // What the trainer sets on its model before its steps (its own prefetch lists, say), applied to the rehearsal's.
  std::function<void(ShardedModel& model)> configure;
};

// rehearse_pools over rehearsal_units(units) with a step that, without a schedule, runs each micro-batch's forward
// through the units in order and its backward in reverse order; with one, pp rank pp_rank's list of it (a rehearsal
// PipelineExecutor: its order, its activation slots and its last-of-chunk marks), each forward and backward of a
// chunk over its units so. The sync flag is set before each backward as `protocol` says, and the step's last
// backward of a unit finishes its reductions, as ShardedModel's micro-batch controls do for a trainer.
PoolPeaks rehearse_unit_protocol(const std::vector<UnitSpec>& units, const ShardingOptions& options,
                                 const UnitProtocol& protocol, const PipelineSchedule* schedule = nullptr,
                                 int pp_rank = 0);

}  // namespace strata
