// ModelResources: what describes a ShardedModel and what its units share. The description: the declared units, the
// sharding options, the data-parallel groups and the device. The shared buffers and streams: the communication
// context (its gather and reduction streams), offload's host memory and upload stream, the buffer pools of the
// transient unit buffers, the element-wise operations, and the step monitor that counts and times the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/comm_context.h"
#include "runtime/sharding/sharded_unit.h"
#include "runtime/sharding/sharding_options.h"
#include "runtime/sharding/state_memory.h"
#include "runtime/sharding/step_monitor.h"

namespace strata {

class FlatOps;

class ModelResources {
 public:
  // Builds the buffers and streams for `specs` (the pools' initial slots are allocated now). `in_use_before`: the
  // device bytes in use before the model allocated anything (the budget's advice counts from there).
  ModelResources(Device& device, const DataParallelGroups& groups, std::vector<UnitSpec> specs,
                 const ShardingOptions& options, std::uint64_t in_use_before);
  ~ModelResources();
  ModelResources(const ModelResources&) = delete;
  ModelResources& operator=(const ModelResources&) = delete;

  // The units as declared (names, slots, shapes, flags), the options, the data-parallel groups the model shards and
  // reduces over, and its device.
  const std::vector<UnitSpec>& declaration() const { return specs_; }
  const ShardingOptions& options() const { return options_; }
  const DataParallelGroups& groups() const { return groups_; }
  Device& device() const { return device_; }
  // Offload: the host memory holding the master and gradient shards, with its own ledger; else nullptr.
  Device* host_device() const { return host_.get(); }
  // The last step's communication summary.
  const StepSummary& last_step_summary() const { return monitor_->last(); }
  // When the device budget is exceeded: the planner's advice for this model's state with an optimizer that keeps
  // `optimizer_floats` f32 values per shard element.
  std::string over_budget_advice(int optimizer_floats) const;

  // What the units are built with, and the monitor the protocol reports to.
  const UnitResources& for_units() const { return units_; }
  CommContext& comm() { return *comm_; }
  StepMonitor& monitor() { return *monitor_; }

 private:
  Device& device_;
  DataParallelGroups groups_;
  std::vector<UnitSpec> specs_;
  ShardingOptions options_;
  std::uint64_t in_use_before_;
  std::unique_ptr<CommContext> comm_;
  std::unique_ptr<Device> host_;  // offload only; declared before the pools that allocate from it
  std::unique_ptr<Stream> upload_stream_;
  std::vector<std::unique_ptr<BufferPool>> pools_;
  std::unique_ptr<FlatOps> ops_, host_ops_;
  std::unique_ptr<StepMonitor> monitor_;
  UnitResources units_;
};

// The same advice before any ModelResources exists (an allocation of its own failed).
std::string model_fit_advice(const Device& device, const std::vector<UnitSpec>& specs, const ShardingOptions& options,
                             const DataParallelGroups& groups, int optimizer_floats, std::uint64_t in_use_before);

}  // namespace strata
