// UnitPlacement: where each of a unit's buffers lives under a ShardingOptions (category, device or host memory,
// elements, persistent or pooled). The one source of that decision: ShardedUnit allocates from it, ShardedModel sizes
// its pools from it, and predict_state_memory sums it.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/memory_stats.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/sharding_options.h"

namespace strata {

// Which buffers a stage keeps, and where. Derived from ShardingOptions; see docs/embedding.md, "What each ZeroStage
// keeps".
struct StagePlan {
  bool params_sharded;        // ZeRO-3: parameters live as shards and are gathered per unit
  bool grads_persist;         // stages 0-1: the unsharded gradient buffer lives across steps
  bool reduce_is_all_reduce;  // stage 0: gradients are all-reduced, the "shard" is the whole unit
  bool separate_master;       // the f32 master is its own buffer: param_dtype != f32, or offload keeps it on the host
                              // while the parameters it would alias stay on the device
  bool offload_optimizer;     // master and gradient shard (and the optimizer's state) in host memory
  bool offload_params;        // ZeRO-3 parameter shards in host memory, copied to the device before each gather
  static StagePlan from(const ShardingOptions& o);
};

// A unit's buffers (S = this rank's shard elements, P = the padded unit; S = P under stage 0).
enum class UnitBuffer {
  kParamShard,       // ZeRO-3: this rank's parameters [S], param dtype
  kMaster,           // the f32 master [S] when it is not the parameters themselves
  kGradShard,        // the f32 gradient accumulator [S]
  kUnshardedParams,  // the full parameters [P], param dtype: persistent (stages 0-2) or gathered per use (ZeRO-3)
  kUnshardedGrads,   // the full gradients [P], param dtype: persistent (stages 0-1) or per backward
  kReduceIn,         // the gradients converted to the reduce dtype [P], when it differs from the param dtype
  kReduceOut,        // the reduction's output [S], reduce dtype
  kStagedShard,      // offload of parameters: the shard copied to the device for its gather [S], param dtype
  kGradReturn,       // offload: the reduced shard copied to the host [S], reduce dtype
  kUploadSlot,       // offload of the optimizer with non-f32 parameters: the master cast for its upload [S]
};
constexpr std::size_t kNumUnitBuffers = 10;
const char* unit_buffer_name(UnitBuffer b);  // "param_shard", ...

enum class Memory { kDevice, kHost };  // the compute device's memory, or the offload host memory
enum class Lifetime {
  kPersistent,  // allocated with the unit, lives as long as it
  kPooled,      // a slot of a model-wide pool of largest-unit slots, borrowed while in use
};

struct BufferPlan {
  UnitBuffer buffer;
  MemCategory category;
  Memory memory;
  Lifetime lifetime;
  DType dtype;
  std::size_t elements;
  std::size_t bytes() const { return elements * dtype_size(dtype); }
};

class UnitPlacement {
 public:
  UnitPlacement(const ShardLayout& layout, const ShardingOptions& options);

  const StagePlan& stage() const { return stage_; }
  // The buffers this configuration has, in UnitBuffer order.
  const std::vector<BufferPlan>& buffers() const { return buffers_; }
  // nullptr when this configuration has no such buffer.
  const BufferPlan* find(UnitBuffer b) const;
  bool has(UnitBuffer b) const { return find(b) != nullptr; }
  // The buffer's plan; kInternal when the configuration has none.
  const BufferPlan& at(UnitBuffer b) const;

 private:
  StagePlan stage_;
  std::vector<BufferPlan> buffers_;
};

// A model-wide pool for one pooled buffer: slots of the largest unit's size, `initial_slots` allocated up front
// (what a trainer that keeps one unit open at a time needs; a pool grows in the first step when a trainer keeps more).
struct PoolPlan {
  UnitBuffer buffer;
  MemCategory category;
  Memory memory;
  std::size_t slot_bytes;  // the largest unit's buffer, at least BufferPool::kMinSlotBytes
  int initial_slots;
};
// One entry per pooled buffer of the units, in UnitBuffer order.
std::vector<PoolPlan> plan_pools(const std::vector<UnitPlacement>& units, const ShardingOptions& options);

}  // namespace strata
