// ShardedUnit (FSDP2's FSDPParamGroup): one unit's flat parameters, their shards and gradients, with the verbs
// unshard / wait_for_unshard / reshard / reduce_grads, and the f32 shard an optimizer updates.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/event_timer.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/comm_context.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/unit_buffers.h"
#include "runtime/sharding/sharding_options.h"
#include "runtime/sharding/unit_placement.h"
#include "runtime/sharding/unit_state.h"

namespace strata {

class FlatOps;

// A parameter (or its gradient) as the trainer sees it inside a gathered unit.
struct TensorView {
  const ParamSlot* slot = nullptr;
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::size_t numel() const { return slot->numel; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Fills `count` f32 values of `slot`, elements [begin, begin + count), into `out`: each rank asks only for its
// shard's elements, so no rank materialises the whole model.
using SlotInit = std::function<void(const ParamSlot& slot, std::size_t begin, std::size_t count, float* out)>;

// What a model's collectives moved and how long they ran (filled by its units, read per step).
struct CommStats {
  std::atomic<std::uint64_t> all_gather_bytes{0};      // gathered (output) bytes
  std::atomic<std::uint64_t> reduce_scatter_bytes{0};  // reduced (input) bytes
  std::atomic<std::uint64_t> all_reduce_bytes{0};
  // Times the collectives on the communication streams (events around each; null: not timed).
  EventTimer* comm_timer = nullptr;
  std::atomic<std::uint64_t> to_device_bytes{0};  // offload: host -> device copies
  std::atomic<std::uint64_t> to_host_bytes{0};    // offload: device -> host copies
  void reset() {
    to_device_bytes = 0;
    to_host_bytes = 0;
    all_gather_bytes = 0;
    reduce_scatter_bytes = 0;
    all_reduce_bytes = 0;
  }
};

class ShardedUnit {
 public:
  // Allocates the persistent buffers of `placement` (zeroed); pooled ones are borrowed while in use.
  ShardedUnit(std::string name, const std::vector<SlotSpec>& slots, CommContext& comm, const ShardingOptions& options,
              const UnitResources& resources, CommStats& stats);
  ~ShardedUnit();
  ShardedUnit(const ShardedUnit&) = delete;
  ShardedUnit& operator=(const ShardedUnit&) = delete;

  const std::string& name() const { return name_; }
  const ShardLayout& layout() const { return layout_; }
  const UnitState& state() const { return state_; }
  // The optimizer's side, on the f32 shard in the state memory (the device, or the host under offload): this rank's
  // master elements, the reduced gradients (averaged over dp, summed over micro-batches) and the slot runs inside
  // the shard (ShardLayout::segments of its shard rank).
  UnitShard shard();

  // Fills this rank's master elements (all of them under stage 0), then publishes the parameters.
  void init(const SlotInit& fill);

  // Starts the all-gather of the parameters into a gathered-parameters slot on the all-gather stream (ZeRO-3; a
  // no-op when they are gathered already or persist).
  void unshard();
  // The compute stream waits for the gather in flight, if any (CPU: the caller blocks, bounded). Returns the
  // gathered parameters, valid until reshard() (the reference stays this unit's: empty while resharded).
  const std::vector<TensorView>& wait_for_unshard();
  // ZeRO-3: returns the gathered parameters to their pool. Other stages: nothing.
  void reshard();

  // Takes (and zeroes) a gradient buffer if the unit holds none, and returns its views: the trainer adds into them.
  // Waits for a reduction of the previous micro-batch that still reads it. The reference stays this unit's (empty
  // once finish_reduce returned a transient buffer).
  const std::vector<TensorView>& prepare_grads();
  // Reduces the unsharded gradients (average over the data-parallel ranks) into the f32 gradient shard, on the
  // reduce-scatter stream. With sync = false (no-sync accumulation) the gradients stay unsharded instead.
  void reduce_grads(bool sync);
  // Waits for the reduction in flight, if any, and returns what it no longer needs.
  void finish_reduce();

  // An update of the master: begin_update() waits on the host until it may be written (the previous upload read it,
  // the refresh gather sent it); end_update() zeroes the gradient shard and makes the parameters match the master
  // (the cast, the copy to the device under offload, and the all-gather refresh for stages 1-2).
  void begin_update();
  void end_update();
  void zero_grad_shard();
  // Offload: waits for publish_params' copy to the device and returns its staging slot.
  void finish_upload();

  // Collective over the shard group: the unit's full f32 master values (numel elements), for tests and saving.
  std::vector<float> gather_master();

 private:
  float* master();      // this rank's f32 master elements [shard_numel]
  float* grad_shard();  // the reduced f32 gradients
  void publish_params();  // end_update's (and init's) publication
  Device& state_device();  // where the master and the gradient shard live
  FlatOps& state_ops();    // the element-wise operations on that memory
  void* param_shard_ptr();  // this rank's slice of the parameters in param dtype
  void make_views(std::vector<TensorView>& views, void* base, DType dtype);
  void upload_params();  // publish_params under optimizer offload
  // Runs on `stream` around a collective: accumulates its wall time into stats_ (CPU streams).
  void time_on(Stream& stream, const std::function<void()>& enqueue_collective);
  PooledBuffer& buffer(UnitBuffer b) { return mem_[b]; }

  std::string name_;
  CommContext& comm_;
  ShardingOptions options_;
  ShardLayout layout_;
  UnitPlacement placement_;
  std::vector<ShardSegment> segments_;
  const StagePlan& plan_;  // placement_.stage()
  DType param_dtype_;
  DType reduce_dtype_;
  UnitResources resources_;
  CommStats& stats_;
  UnitState state_;
  UnitBuffers mem_;  // the buffers by UnitBuffer and the events ordering the streams' work on them
  std::vector<TensorView> param_views_;
  std::vector<TensorView> grad_views_;
};

}  // namespace strata
