// ModelResources: the communication context, offload's host memory, the pools, the element-wise operations and the
// step monitor of one ShardedModel.
#include "runtime/sharding/model_resources.h"

#include "core/device_registry.h"
#include "runtime/sharding/flat_ops.h"
#include "runtime/sharding/unit_placement.h"

namespace strata {

ModelResources::ModelResources(Device& device, const DataParallelGroups& groups, std::vector<UnitSpec> specs,
                               const ShardingOptions& options, std::uint64_t in_use_before)
    : device_(device), groups_(groups), specs_(std::move(specs)), options_(options), in_use_before_(in_use_before) {
  comm_ = std::make_unique<CommContext>(device_, groups_, options_.stage);
  std::vector<UnitPlacement> placements;
  std::vector<std::size_t> padded;
  for (const UnitSpec& spec : specs_) {
    ShardLayout layout(spec.slots, comm_->shard_size(), options_.align_elements);
    placements.emplace_back(layout, options_);
    padded.push_back(layout.padded_numel());
  }
  if (StagePlan::from(options_).offload_optimizer) {
    // Host memory gets its own Device, so its ledger is separate from the device's (on the CPU backend too).
    host_ = create_host_device(device_);
    upload_stream_ = device_.create_stream("upload");
    units_.host = host_.get();
    units_.upload = upload_stream_.get();
  }
  // Pools of largest-unit slots for the transient buffers; see docs/notes/prefetch.md.
  for (const PoolPlan& p : plan_pools(placements, options_)) {
    Device& where = p.memory == Memory::kHost ? *host_ : device_;
    pools_.push_back(
        std::make_unique<BufferPool>(where, unit_buffer_name(p.buffer), p.category, p.slot_bytes, p.initial_slots));
    units_.pools[static_cast<std::size_t>(p.buffer)] = pools_.back().get();
  }
  ops_ = create_flat_ops(device_);
  host_ops_ = create_host_flat_ops();
  units_.ops = ops_.get();
  units_.host_ops = host_ops_.get();
  monitor_ = std::make_unique<StepMonitor>(device_, options_, padded, comm_->shard_size());
}

ModelResources::~ModelResources() = default;

std::string ModelResources::over_budget_advice(int optimizer_floats) const {
  return model_fit_advice(device_, specs_, options_, groups_, optimizer_floats, in_use_before_);
}

std::string model_fit_advice(const Device& device, const std::vector<UnitSpec>& specs, const ShardingOptions& options,
                             const DataParallelGroups& groups, int optimizer_floats, std::uint64_t in_use_before) {
  const std::uint64_t budget = device.memory_budget();
  return state_fit_advice(specs, options, DataParallelSizes{groups.shard->size(), groups.replicate->size()},
                          optimizer_floats, budget > in_use_before ? budget - in_use_before : 0);
}

}  // namespace strata
