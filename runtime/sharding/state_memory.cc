// predict_state_memory: ShardedModel's constructor and ShardedUnit's buffers, as arithmetic.
#include "runtime/sharding/state_memory.h"

#include <algorithm>

#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/sharded_unit.h"

namespace strata {

std::uint64_t total(const CategoryBytes& b) {
  std::uint64_t t = 0;
  for (std::uint64_t x : b) t += x;
  return t;
}

StateMemory predict_state_memory(const std::vector<UnitSpec>& units, const ShardingOptions& o, int world,
                                 int local_size) {
  const StagePlan plan = StagePlan::from(o);
  const std::uint64_t psz = dtype_size(o.mixed_precision.param_dtype);
  const std::uint64_t rsz = dtype_size(o.mixed_precision.reduce_dtype);
  const int shard = o.shard_group_size(world, local_size);
  std::uint64_t sum_p = 0, sum_s = 0, max_p = 0, max_s = 0;
  for (const UnitSpec& u : units) {
    ShardLayout l(u.slots, shard, o.align_elements);
    sum_p += l.padded_numel();
    sum_s += l.shard_numel();
    max_p = std::max<std::uint64_t>(max_p, l.padded_numel());
    max_s = std::max<std::uint64_t>(max_s, l.shard_numel());
  }
  auto slot = [](std::uint64_t bytes) { return std::max<std::uint64_t>(bytes, 64); };  // BufferPool's minimum
  const std::uint64_t in_flight = static_cast<std::uint64_t>(o.prefetch_depth) + 1;    // gathers at once
  StateMemory m;
  auto dev = [&](MemCategory c) -> std::uint64_t& { return m.device[static_cast<std::size_t>(c)]; };
  auto host = [&](MemCategory c) -> std::uint64_t& { return m.host[static_cast<std::size_t>(c)]; };
  // Parameter shards: on the device (ZeRO-3), or on the host with one staged copy per gather in flight.
  if (plan.offload_params) {
    host(MemCategory::kParamShard) = sum_s * psz;
    dev(MemCategory::kParamShard) = in_flight * slot(max_s * psz);
  } else if (plan.params_sharded) {
    dev(MemCategory::kParamShard) = sum_s * psz;
  }
  // Master, gradient shard and Adam state, where the optimizer runs.
  CategoryBytes& state = plan.offload_optimizer ? m.host : m.device;
  state[static_cast<std::size_t>(MemCategory::kMaster)] = plan.separate_master ? sum_s * 4 : 0;
  state[static_cast<std::size_t>(MemCategory::kGradShard)] = sum_s * 4;
  state[static_cast<std::size_t>(MemCategory::kOptimState)] = sum_s * 8;
  // Gathered parameters and unsharded gradients: persistent, or pools of largest-unit slots.
  dev(MemCategory::kUnshardedParams) = plan.params_sharded ? in_flight * slot(max_p * psz) : sum_p * psz;
  dev(MemCategory::kUnshardedGrads) = plan.grads_persist ? sum_p * psz : 2 * slot(max_p * psz);
  // Reduction staging: two reduce-output slots, two conversion slots when the dtypes differ, and the MPI lane's
  // grow-only scratch for the largest reduction (an all-to-all of a unit, or stage 0's padded all-reduce) or the
  // norm's f64 all-reduce.
  const std::uint64_t n = static_cast<std::uint64_t>(world);
  std::uint64_t lane = plan.reduce_is_all_reduce ? 2 * n * ((max_p + n - 1) / n) * rsz : n * max_s * rsz;
  if (shard > 1) lane = std::max<std::uint64_t>(lane, 2 * n * 8);
  const bool convert = o.mixed_precision.reduce_dtype != o.mixed_precision.param_dtype;
  dev(MemCategory::kCommBuffer) = 2 * slot(max_s * rsz) + (convert ? 2 * slot(max_p * rsz) : 0) + lane;
  dev(MemCategory::kWorkspace) = 8;  // the global norm's all-reduce
  if (plan.offload_optimizer) {
    // Landing slots for two returned gradient shards, and two upload slots when parameters are cast before the copy.
    const bool upload_slots = !plan.offload_params && o.mixed_precision.param_dtype != DType::kF32;
    host(MemCategory::kCommBuffer) = 2 * slot(max_s * rsz) + (upload_slots ? 2 * slot(max_s * psz) : 0);
  }
  return m;
}

}  // namespace strata
