// predict_state_memory: UnitPlacement and the pools, summed; the over-budget advice built on it.
#include "runtime/sharding/state_memory.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/byte_units.h"
#include "runtime/sharding/unit_placement.h"

namespace strata {

std::uint64_t total(const CategoryBytes& b) {
  std::uint64_t t = 0;
  for (std::uint64_t x : b) t += x;
  return t;
}

std::uint64_t all_reduce_staging(std::uint64_t n, std::uint64_t g, std::uint64_t esz) {
  return 2 * g * ((n + g - 1) / g) * esz;
}

StateMemory predict_state_memory(const std::vector<UnitSpec>& units, const ShardingOptions& o,
                                 const DataParallelSizes& groups, int optimizer_floats, bool slot_flags) {
  const StagePlan plan = StagePlan::from(o);
  const int shard = o.stage == ZeroStage::kNone ? 1 : groups.shard;
  StateMemory m;
  auto at = [&](Memory where, MemCategory c) -> std::uint64_t& {
    return (where == Memory::kHost ? m.host : m.device)[static_cast<std::size_t>(c)];
  };
  std::vector<UnitPlacement> placements;
  std::uint64_t sum_s = 0, max_s = 0, max_p = 0, slots = 0;
  for (const UnitSpec& u : units) {
    slots += u.slots.size();
    ShardLayout layout(u.slots, shard, o.align_elements);
    placements.emplace_back(layout, o);
    sum_s += layout.shard_numel();
    max_s = std::max<std::uint64_t>(max_s, layout.shard_numel());
    max_p = std::max<std::uint64_t>(max_p, layout.padded_numel());
    for (const BufferPlan& b : placements.back().buffers())
      if (b.lifetime == Lifetime::kPersistent) at(b.memory, b.category) += b.bytes();
  }
  m.pools = plan_pools(placements, o);
  for (const PoolPlan& p : m.pools)
    at(p.memory, p.category) += static_cast<std::uint64_t>(p.initial_slots) * p.slot_bytes;
  // The optimizer's state where the master is; the global norm's sum of squares (two doubles) on the device.
  at(plan.offload_optimizer ? Memory::kHost : Memory::kDevice, MemCategory::kOptimState) +=
      static_cast<std::uint64_t>(optimizer_floats) * sum_s * 4;
  at(Memory::kDevice, MemCategory::kWorkspace) += 16;
  // ShardedAdamW's non-finite flags, one float per slot, beside the master.
  if (slot_flags) at(plan.offload_optimizer ? Memory::kHost : Memory::kDevice, MemCategory::kWorkspace) += 4 * slots;
  // The MPI backend's staging, one grow-only buffer per (group, stream) lane, sized by its largest reduction: stage 0
  // all-reduces a padded unit over dp; stages 1-3 reduce-scatter into shards over dp_shard (and all-reduce the norm
  // over it), then all-reduce each shard across dp_replicate. An all-reduce of n elements over g ranks stages
  // 2 g ceil(n / g); a reduce-scatter to n elements stages g n.
  const std::uint64_t rsz = dtype_size(o.mixed_precision.reduce_dtype);
  std::uint64_t staging = 0;
  if (plan.reduce_is_all_reduce) {
    staging = all_reduce_staging(max_p, static_cast<std::uint64_t>(groups.dp()), rsz);
  } else {
    const std::uint64_t k = static_cast<std::uint64_t>(shard);
    staging = k * max_s * rsz;
    if (k > 1) staging = std::max(staging, all_reduce_staging(2, k, 8));
    if (groups.replicate > 1) staging += all_reduce_staging(max_s, static_cast<std::uint64_t>(groups.replicate), rsz);
  }
  at(Memory::kDevice, MemCategory::kCommBuffer) += staging;
  return m;
}

std::string state_fit_advice(const std::vector<UnitSpec>& units, const ShardingOptions& o,
                             const DataParallelSizes& groups, int optimizer_floats, std::uint64_t budget) {
  auto size = [](std::uint64_t x) {
    if (x >= (1u << 20)) return fmt::format("{:.1f} MiB", mib(static_cast<double>(x)));
    if (x >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(x) / 1024.0);
    return fmt::format("{} bytes", x);
  };
  auto bytes = [&](const ShardingOptions& c) {
    return total(predict_state_memory(units, c, groups, optimizer_floats).device);
  };
  const std::uint64_t now = bytes(o);
  struct Change {
    const char* what;
    ZeroStage stage;
    OffloadPolicy offload;
  };
  // strata-plan's order (fit_changes), without what is the trainer's to change (recomputation).
  const Change changes[] = {{"shard parameters too (ZeRO stage 3)", ZeroStage::kParameters, o.offload},
                            {"offload the optimizer to host memory", o.stage, OffloadPolicy::kOptimizer},
                            {"ZeRO stage 3 and optimizer offload", ZeroStage::kParameters, OffloadPolicy::kOptimizer},
                            {"ZeRO stage 3 and optimizer and parameter offload", ZeroStage::kParameters,
                             OffloadPolicy::kOptimizerAndParams}};
  for (const Change& c : changes) {
    if (c.stage == o.stage && c.offload == o.offload) continue;
    if (c.offload == OffloadPolicy::kOptimizerAndParams && c.stage != ZeroStage::kParameters) continue;
    ShardingOptions t = o;
    t.stage = c.stage;
    t.offload = c.offload;
    const std::uint64_t need = bytes(t);
    if (need <= budget)
      return fmt::format("needs {} per rank against the {} the budget left it; the "
                         "cheapest change that fits: {} ({}, before your activations)",
                         size(now), size(budget), c.what, size(need));
  }
  return fmt::format("needs {} per rank against the {} the budget left it, and no change "
                     "of ZeRO stage or offload fits: use more ranks or more memory",
                     size(now), size(budget));
}

}  // namespace strata
