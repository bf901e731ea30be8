// ShardedParameters: a ShardedModel's parameters as an optimizer sees them: this rank's f32 master shard and reduced
// gradient shard of each unit, the memory and stream they live on, and the update protocol that publishes the
// result to the parameters the next forward gathers. ShardedAdamW is one client; a trainer may bring its own
// optimizer (examples/custom_trainer: momentum SGD).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/sharding/shard_layout.h"

namespace strata {

class FlatOps;
class ShardedModel;

class ShardedParameters {
 public:
  explicit ShardedParameters(ShardedModel& model) : model_(model) {}

  int num_units() const;
  UnitShard unit(int i);
  // The segments of unit i that this rank alone answers for among the ranks of its data-parallel group (to save
  // each element once): its shard on the first replica of a hybrid layout (none on the others); under ZeRO stage 0,
  // where every rank holds the whole unit, this rank's part of a split of the unit over the dp group. shard_begin
  // indexes unit(i).master.
  std::vector<ShardSegment> owned_segments(int i) const;
  // The memory the shards live in (the host under offload), the stream that orders work on them (its compute
  // stream) and the element-wise operations on that memory.
  Device& device();
  Stream& stream();
  FlatOps& ops();
  // The groups across which this rank's shards are disjoint parts of the parameters: a global norm sums over them.
  std::vector<Communicator*> partition_groups() const;
  // A stream of the model's device, beside its gathers and reductions, for an optimizer's own collectives (a norm).
  Stream& comm_stream();

  // The update protocol of one step:
  //   wait_for_grads(); [read the gradients, e.g. a norm]; for each unit i: begin_update(i); [write master i];
  //   end_update(i); finish_step(t, true)  -- or, to skip the step: zero_grads(); finish_step(t, false).
  // Waits until every reduction has finished (the caller's time counts as exposed communication).
  void wait_for_grads();
  // The host waits for `stream` (exposed communication, e.g. a norm's all-reduce).
  void wait(Stream& stream);
  // The host waits until unit i's master may be written (its previous upload, a gather still sending it).
  void begin_update(int i);
  // Zeroes unit i's gradient shard and publishes its parameters (the cast, the copy to the device under offload, the
  // refresh gather of stages 1-2); then waits for unit i-1's upload, so at most two are in flight.
  void end_update(int i);
  // Zeroes every gradient shard without an update (a skipped step).
  void zero_grads();
  // Waits for the last upload and closes the step's summary: `steps_taken` optimizer steps so far, `updated` false
  // for a skipped step.
  void finish_step(std::int64_t steps_taken, bool updated);

  // Collective over the shard group: unit i's full f32 master values (numel elements), for tests and checkpoints.
  std::vector<float> gather_master(int i);

 private:
  ShardedModel& model_;
};

}  // namespace strata
