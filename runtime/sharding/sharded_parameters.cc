// ShardedParameters: the optimizer's side of a ShardedModel.
#include "runtime/sharding/sharded_parameters.h"

#include "core/error.h"
#include "runtime/sharding/flat_ops.h"
#include "runtime/sharding/sharded_model.h"

namespace strata {

int ShardedParameters::num_units() const { return model_.num_units(); }

UnitShard ShardedParameters::unit(int i) {
  model_.check_unit(i, "parameters().unit");
  return model_.units_[static_cast<std::size_t>(i)]->shard();
}

Device& ShardedParameters::device() {
  Device* host = model_.resources().host_device();
  return host ? *host : model_.resources().device();
}

Stream& ShardedParameters::stream() { return device().compute_stream(); }

FlatOps& ShardedParameters::ops() {
  const UnitResources& r = model_.resources().for_units();
  return r.host ? *r.host_ops : *r.ops;
}

std::vector<Communicator*> ShardedParameters::partition_groups() const {
  return model_.resources().comm().partition_groups();
}

Stream& ShardedParameters::comm_stream() { return model_.resources().comm().reduce_scatter_stream(); }

void ShardedParameters::wait_for_grads() {
  model_.resources().monitor().mark_start();
  for (std::size_t i = 0; i < model_.units_.size(); ++i) {
    const TrainingState s = model_.protocol_[i].state;
    STRATA_CHECK(s == TrainingState::kIdle, "an optimizer step while unit '{}' is still in {}",
                 model_.units_[i]->name(), s == TrainingState::kForward ? "forward" : "backward");
  }
  model_.finish_reductions();
}

void ShardedParameters::wait(Stream& stream) {
  model_.resources().monitor().exposed([&] { stream.synchronize(); });
}

void ShardedParameters::begin_update(int i) {
  model_.check_unit(i, "parameters().begin_update");
  model_.units_[static_cast<std::size_t>(i)]->begin_update();
}

void ShardedParameters::end_update(int i) {
  model_.check_unit(i, "parameters().end_update");
  model_.units_[static_cast<std::size_t>(i)]->end_update();
  // Under offload, unit i's copy to the device runs while unit i+1 updates (at most two copies in flight).
  if (i > 0) model_.units_[static_cast<std::size_t>(i) - 1]->finish_upload();
}

void ShardedParameters::zero_grads() {
  for (auto& u : model_.units_) u->zero_grad_shard();
}

void ShardedParameters::finish_step(std::int64_t steps_taken, bool updated) {
  if (updated) model_.resources().monitor().exposed([&] { model_.units_.back()->finish_upload(); });
  // Forwards that had no backward (an evaluation pass) do not carry into the next step.
  // The update resharded every unit (prepare_update).
  for (auto& p : model_.protocol_) {
    p.forwards = 0;
    p.resharded = true;
  }
  model_.resources().monitor().finish(steps_taken, updated);
}

std::vector<ShardSegment> ShardedParameters::owned_segments(int i) const {
  model_.check_unit(i, "parameters().owned_segments");
  const ModelResources& r = model_.resources();
  if (r.options().stage != ZeroStage::kNone) {
    const std::span<const ShardSegment> mine = model_.units_[static_cast<std::size_t>(i)]->shard().segments;
    return r.groups().replicate->rank() == 0 ? std::vector<ShardSegment>(mine.begin(), mine.end())
                                             : std::vector<ShardSegment>{};
  }
  // Stage 0: every rank holds the whole unit; split it over the dp group as a shard layout would.
  const Communicator& dp = *r.groups().dp;
  const ShardLayout split(r.declaration()[static_cast<std::size_t>(i)].slots, dp.size(), r.options().align_elements);
  std::vector<ShardSegment> out = split.segments(dp.rank());
  for (ShardSegment& seg : out) seg.shard_begin = split.slots()[seg.slot].offset + seg.slot_begin;
  return out;
}

std::vector<float> ShardedParameters::gather_master(int i) {
  model_.check_unit(i, "parameters().gather_master");
  return model_.units_[static_cast<std::size_t>(i)]->gather_master();
}

}  // namespace strata
