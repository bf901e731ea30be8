// ShardedModel: the embedding API. A trainer describes its model as ordered units of named parameters over the
// data-parallel groups of a DeviceMesh and brackets each unit's forward and backward with begin/end calls; Strata
// gathers and reduces. An optimizer (ShardedAdamW, or the trainer's own) updates the f32 shards through
// parameters(). See docs/embedding.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/comm_context.h"
#include "runtime/sharding/model_resources.h"
#include "runtime/sharding/sharded_parameters.h"
#include "runtime/sharding/sharded_unit.h"
#include "runtime/sharding/state_memory.h"
#include "runtime/sharding/step_monitor.h"

namespace strata {

class FlatOps;
class Runtime;

// Where a unit is in the forward/backward protocol (FSDP2's TrainingState).
enum class TrainingState { kIdle, kForward, kBackward };

struct BackwardViews {
  const std::vector<TensorView>& params;
  const std::vector<TensorView>& grads;  // zeroed by Strata; the trainer adds its gradients into them
};

class ShardedModel {
 public:
  // Collective over the groups: checks that every rank of `groups.dp` declares the same units, shapes and options.
  ShardedModel(Device& device, const DataParallelGroups& groups, std::vector<UnitSpec> units,
               const ShardingOptions& options);
  // Over a mesh's data-parallel groups (dp_shard, dp_replicate: hybrid sharding when both exceed one rank).
  ShardedModel(DeviceMesh& mesh, std::vector<UnitSpec> units, const ShardingOptions& options);
  // Over every rank of the job as one shard group (a mesh of dp_shard = world, owned by the model).
  ShardedModel(Runtime& runtime, std::vector<UnitSpec> units, const ShardingOptions& options);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  int num_units() const { return static_cast<int>(units_.size()); }
  // Unit i's flat layout: its slots (names, shapes, offsets) and shard sizes.
  const ShardLayout& layout(int i) const;
  // What describes the model (its declaration, options, groups and device; offload's host memory) and what its
  // units share (the pools, streams and the step monitor, whose last_step_summary() the trainer reads).
  ModelResources& resources() const { return *resources_; }

  // Each rank fills only its shard's elements of every slot.
  void init(const SlotInit& fill);
  // Small models: rank 0 fills whole slots (`fill(slot, out)` with slot.numel values), the rest receive them.
  void init_from_rank0(const std::function<void(const ParamSlot& slot, float* out)>& fill);

  // FSDP2's micro-batch controls; both hold until changed. Without gradient sync a backward leaves its gradients
  // unsharded to accumulate (no-sync); the next backward with sync reduces the sum. On the last backward of a step
  // the model finishes every reduction when the last unit's backward ends (else the optimizer waits for them).
  void set_requires_gradient_sync(bool sync) { sync_grads_ = sync; }
  void set_is_last_backward(bool last) { last_backward_ = last; }
  // ZeRO-3: whether a unit's backward frees its gathered parameters (FSDP2's reshard_after_backward). A pipeline
  // keeps them gathered between the micro-batches of a step and frees them after each unit's last backward.
  void set_reshard_after_backward(bool reshard) { reshard_after_backward_ = reshard; }
  // Forwards with no backward to follow (an evaluation, torch.no_grad): each unit's forward leaves it as it found it,
  // resharded (ZeRO-3) and owing no backward. Between steps only: a unit with a backward pending is refused.
  void set_forward_only(bool on) { forward_only_ = on; }
  bool forward_only() const { return forward_only_; }
  // The units gathered ahead when unit i's forward (backward) begins. Default: the next prefetch_depth units in
  // forward order (in reverse for backward). A pipeline schedule sets its own.
  void set_forward_prefetch(int i, std::vector<int> units);
  void set_backward_prefetch(int i, std::vector<int> units);

  // The protocol, per micro-batch: begin/end_forward of a unit any number of times, then as many begin/end_backward.
  const std::vector<TensorView>& begin_forward(int i);
  void end_forward(int i);
  BackwardViews begin_backward(int i);
  void end_backward(int i);

  // What an optimizer updates: this rank's f32 shards and their gradients.
  ShardedParameters& parameters() { return *parameters_; }

 private:
  friend class ShardedParameters;
  struct UnitProtocol {
    TrainingState state = TrainingState::kIdle;
    int forwards = 0;  // forwards whose backward has not ended yet (1F1B keeps several)
    bool resharded = true;  // the trainer let it reshard since its last use (the step starts so)
    std::vector<int> forward_prefetch, backward_prefetch;
    std::int64_t span_start_us = 0;
  };
  ShardedModel(std::unique_ptr<DeviceMesh> mesh, std::vector<UnitSpec> units, const ShardingOptions& options);
  // The units over the resources (the allocating part of the constructor).
  void build_units();
  void check_unit(int i, const char* call) const;
  void prefetch(const std::vector<int>& units);
  // Waits for every reduction in flight (exposed communication).
  void finish_reductions();

  std::unique_ptr<DeviceMesh> owned_mesh_;     // the Runtime constructor's
  std::unique_ptr<ModelResources> resources_;  // before the units, which use it
  std::vector<std::unique_ptr<ShardedUnit>> units_;
  std::vector<UnitProtocol> protocol_;
  std::unique_ptr<ShardedParameters> parameters_;
  bool sync_grads_ = true;
  bool last_backward_ = true;
  bool reshard_after_backward_ = true;
  bool forward_only_ = false;
  int last_reduced_ = -1;  // the unit whose reduction may still be in flight (at most two are)
};

}  // namespace strata
