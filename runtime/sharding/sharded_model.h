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
  const ShardingOptions& options() const { return options_; }
  // The units as declared (names, slots, shapes, flags).
  const std::vector<UnitSpec>& declaration() const { return specs_; }
  // The data-parallel groups the model shards and reduces over.
  const DataParallelGroups& groups() const { return groups_; }
  Device& device() const { return device_; }
  // Offload: the host memory holding the master and gradient shards, with its own ledger; else nullptr.
  Device* host_device() const { return host_.get(); }

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

  // Collective: unit i's full f32 parameters (master values), for tests and checkpoints.
  std::vector<float> gather_unit(int i);
  // The last step's communication summary.
  const StepSummary& last_step_summary() const { return monitor_->last(); }
  // When the device budget is exceeded: the planner's advice for this model's state with an optimizer that keeps
  // `optimizer_floats` f32 values per shard element, given the bytes in use before the model was built.
  std::string over_budget_advice(int optimizer_floats) const;

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
  // The allocating part of the constructor (its kOutOfMemory gets the planner's advice appended).
  void build();
  void check_unit(int i, const char* call) const;
  void check_same_across_ranks();
  void prefetch(const std::vector<int>& units);
  // Waits for every reduction in flight (exposed communication).
  void finish_reductions();

  std::unique_ptr<DeviceMesh> owned_mesh_;  // the Runtime constructor's
  Device& device_;
  DataParallelGroups groups_;
  ShardingOptions options_;
  std::vector<UnitSpec> specs_;
  std::uint64_t in_use_before_ = 0;  // device bytes in use before the model allocated anything
  std::unique_ptr<CommContext> comm_;
  std::unique_ptr<Device> host_;  // offload only; declared before the pools and units that allocate from it
  std::unique_ptr<Stream> upload_stream_;
  std::vector<std::unique_ptr<BufferPool>> pools_;
  std::unique_ptr<FlatOps> ops_, host_ops_;  // before the units, which use them
  std::unique_ptr<StepMonitor> monitor_;
  std::vector<std::unique_ptr<ShardedUnit>> units_;
  std::vector<UnitProtocol> protocol_;
  std::unique_ptr<ShardedParameters> parameters_;
  bool sync_grads_ = true;
  bool last_backward_ = true;
  bool reshard_after_backward_ = true;
  int last_reduced_ = -1;  // the unit whose reduction may still be in flight (at most two are)
};

}  // namespace strata
