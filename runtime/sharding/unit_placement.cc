// UnitPlacement: the buffer plan of each ZeRO stage, precision and offload policy, and the pools it implies.
#include "runtime/sharding/unit_placement.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

StagePlan StagePlan::from(const ShardingOptions& o) {
  StagePlan p;
  p.params_sharded = o.stage == ZeroStage::kParameters;
  p.grads_persist = o.stage == ZeroStage::kNone || o.stage == ZeroStage::kOptimizerState;
  p.reduce_is_all_reduce = o.stage == ZeroStage::kNone;
  p.offload_optimizer = o.offload != OffloadPolicy::kNone;
  p.offload_params = o.offload == OffloadPolicy::kOptimizerAndParams;
  // The master aliases the f32 parameters only where the optimizer runs: on the device without offload, in host
  // memory when the parameter shards live there too (FSDP2's CPU offload).
  p.separate_master = o.mixed_precision.param_dtype != DType::kF32 || (p.offload_optimizer && !p.offload_params);
  return p;
}

const char* unit_buffer_name(UnitBuffer b) {
  switch (b) {
    case UnitBuffer::kParamShard: return "param_shard";
    case UnitBuffer::kMaster: return "master";
    case UnitBuffer::kGradShard: return "grad_shard";
    case UnitBuffer::kUnshardedParams: return "unsharded_params";
    case UnitBuffer::kUnshardedGrads: return "unsharded_grads";
    case UnitBuffer::kReduceIn: return "reduce_in";
    case UnitBuffer::kReduceOut: return "reduce_out";
    case UnitBuffer::kStagedShard: return "staged_shard";
    case UnitBuffer::kGradReturn: return "grad_return";
    case UnitBuffer::kUploadSlot: return "upload_slot";
  }
  return "?";
}

UnitPlacement::UnitPlacement(const ShardLayout& layout, const ShardingOptions& o) : stage_(StagePlan::from(o)) {
  const StagePlan& p = stage_;
  const std::size_t S = layout.shard_numel(), P = layout.padded_numel();
  const DType pdt = o.mixed_precision.param_dtype, rdt = o.mixed_precision.reduce_dtype;
  const Memory state = p.offload_optimizer ? Memory::kHost : Memory::kDevice;  // master and gradient shard
  auto add = [&](UnitBuffer b, MemCategory c, Memory m, Lifetime l, DType t, std::size_t n) {
    buffers_.push_back(BufferPlan{b, c, m, l, t, n});
  };
  using L = Lifetime;
  if (p.params_sharded)
    add(UnitBuffer::kParamShard, MemCategory::kParamShard, p.offload_params ? Memory::kHost : Memory::kDevice,
        L::kPersistent, pdt, S);
  if (p.separate_master) add(UnitBuffer::kMaster, MemCategory::kMaster, state, L::kPersistent, DType::kF32, S);
  add(UnitBuffer::kGradShard, MemCategory::kGradShard, state, L::kPersistent, DType::kF32, S);
  add(UnitBuffer::kUnshardedParams, MemCategory::kUnshardedParams, Memory::kDevice,
      p.params_sharded ? L::kPooled : L::kPersistent, pdt, P);
  add(UnitBuffer::kUnshardedGrads, MemCategory::kUnshardedGrads, Memory::kDevice,
      p.grads_persist ? L::kPersistent : L::kPooled, pdt, P);
  if (rdt != pdt) add(UnitBuffer::kReduceIn, MemCategory::kCommBuffer, Memory::kDevice, L::kPooled, rdt, P);
  add(UnitBuffer::kReduceOut, MemCategory::kCommBuffer, Memory::kDevice, L::kPooled, rdt, S);
  if (p.offload_params) add(UnitBuffer::kStagedShard, MemCategory::kParamShard, Memory::kDevice, L::kPooled, pdt, S);
  if (p.offload_optimizer) add(UnitBuffer::kGradReturn, MemCategory::kCommBuffer, Memory::kHost, L::kPooled, rdt, S);
  if (p.offload_optimizer && !p.offload_params && pdt != DType::kF32)
    add(UnitBuffer::kUploadSlot, MemCategory::kCommBuffer, Memory::kHost, L::kPooled, pdt, S);
}

const BufferPlan* UnitPlacement::find(UnitBuffer b) const {
  for (const BufferPlan& p : buffers_)
    if (p.buffer == b) return &p;
  return nullptr;
}

const BufferPlan& UnitPlacement::at(UnitBuffer b) const {
  const BufferPlan* p = find(b);
  STRATA_CHECK_CODE(ErrorCode::kInternal, p != nullptr, "this configuration has no {} buffer", unit_buffer_name(b));
  return *p;
}

std::vector<PoolPlan> plan_pools(const std::vector<UnitPlacement>& units, const ShardingOptions& o) {
  // Slots in use at once when the trainer keeps one unit open at a time (docs/notes/prefetch.md): the gathers in
  // flight (the computing unit and its prefetched ones), two gradient buffers (one computing, one reducing), two
  // reductions in flight, and under offload two uploads (unit k's while unit k+1 updates).
  const int gathers = o.prefetch_depth + 1;
  auto initial = [&](UnitBuffer b) {
    switch (b) {
      case UnitBuffer::kUnshardedParams:
      case UnitBuffer::kStagedShard: return gathers;
      default: return 2;
    }
  };
  std::vector<PoolPlan> pools;
  for (std::size_t k = 0; k < kNumUnitBuffers; ++k) {
    const UnitBuffer b = static_cast<UnitBuffer>(k);
    const BufferPlan* first = nullptr;
    std::size_t largest = 0;
    for (const UnitPlacement& u : units) {
      const BufferPlan* p = u.find(b);
      if (!p || p->lifetime != Lifetime::kPooled) continue;
      if (!first) first = p;
      largest = std::max(largest, p->bytes());
    }
    if (first)
      pools.push_back(PoolPlan{b, first->category, first->memory, std::max(largest, BufferPool::kMinSlotBytes),
                               initial(b)});
  }
  return pools;
}

}  // namespace strata
