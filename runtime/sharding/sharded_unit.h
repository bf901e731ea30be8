// ShardedUnit (FSDP2's FSDPParamGroup): one unit's flat parameters, their shards, gradients and optimizer state,
// and the verbs unshard / wait_for_unshard / reshard / reduce_grads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "runtime/optim/adamw.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/comm_context.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/sharding_options.h"

namespace strata {

enum class ShardedState { kSharded, kUnsharded };
enum class TrainingState { kIdle, kForward, kBackward };

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

// Which buffers a stage keeps, and where. Derived from ShardingOptions; see docs/notes/zero-stages.md.
struct StagePlan {
  bool params_sharded;        // ZeRO-3: parameters live as shards and are gathered per unit
  bool grads_persist;         // stages 0-1: the unsharded gradient buffer lives across steps
  bool reduce_is_all_reduce;  // stage 0: gradients are all-reduced, the "shard" is the whole unit
  bool separate_master;       // the f32 master is its own buffer: param_dtype != f32, or offload keeps it on the host
                              // while the parameters it would alias stay on the device
  bool offload_optimizer;     // master, gradient shard and Adam m, v in host memory; AdamW runs on the host
  bool offload_params;        // ZeRO-3 parameter shards in host memory, copied to the device before each gather
  static StagePlan from(const ShardingOptions& o);
};

// What a model's collectives moved and how long they ran (filled by its units, read per step).
struct CommStats {
  std::atomic<std::uint64_t> all_gather_bytes{0};      // gathered (output) bytes
  std::atomic<std::uint64_t> reduce_scatter_bytes{0};  // reduced (input) bytes
  std::atomic<std::uint64_t> all_reduce_bytes{0};
  std::atomic<std::int64_t> comm_ns{0};  // wall time of the collectives on the communication streams
  std::atomic<std::uint64_t> to_device_bytes{0};  // offload: host -> device copies
  std::atomic<std::uint64_t> to_host_bytes{0};    // offload: device -> host copies
  void reset() {
    to_device_bytes = 0;
    to_host_bytes = 0;
    all_gather_bytes = 0;
    reduce_scatter_bytes = 0;
    all_reduce_bytes = 0;
    comm_ns = 0;
  }
};

class ShardedUnit {
 public:
  ShardedUnit(std::string name, const std::vector<SlotSpec>& slots, CommContext& comm, const ShardingOptions& options,
              const UnitPools& pools, CommStats& stats);
  ~ShardedUnit();
  ShardedUnit(const ShardedUnit&) = delete;
  ShardedUnit& operator=(const ShardedUnit&) = delete;

  const std::string& name() const { return name_; }
  const ShardLayout& layout() const { return layout_; }
  ShardedState sharded_state() const { return sharded_state_; }
  TrainingState training_state() const { return training_state_; }
  void set_training_state(TrainingState s) { training_state_ = s; }

  // Initialisation: fill this rank's master elements (all of them under stage 0), then publish the parameters.
  void init(const SlotInit& fill);

  // Starts the all-gather of the parameters into the unsharded buffer (allocated on demand) on the all-gather
  // stream. Stages 0-2 keep full parameters, so only the refresh after a step is waited for.
  void unshard();
  // The compute stream waits for the gather (CPU: the caller blocks, bounded).
  void wait_for_unshard();
  // ZeRO-3: frees the unsharded parameters. Other stages: nothing.
  void reshard();
  // Gathered parameters; valid between wait_for_unshard() and reshard().
  const std::vector<TensorView>& params() const { return param_views_; }

  // Allocates (and zeroes) the unsharded gradient buffer if there is none; the trainer adds into it.
  void prepare_grads();
  const std::vector<TensorView>& grads() const { return grad_views_; }
  // Reduces the unsharded gradients (average over the data-parallel ranks) into the f32 gradient shard, on the
  // reduce-scatter stream. With sync = false (no-sync accumulation) the gradients stay unsharded instead.
  void reduce_grads(bool sync);
  // Waits for the last reduce_grads and frees what it no longer needs.
  void finish_reduce();

  // Optimizer side, on the f32 shard (after finish_reduce), on the memory that holds it (the device, or the host
  // under offload): kernels on the compute stream, or host loops.
  // *out += the sum of squares of the trainable gradient elements; `out` is in that same memory.
  void add_grad_sum_squares(double* out);
  void scale_grads(float factor);
  void zero_grad_shard();
  void adamw_step(const AdamWConfig& cfg, double lr, std::int64_t t);
  // Makes the parameters match the master after an update (cast, the copy to the device under offload, and the
  // all-gather refresh for stages 1-2).
  void publish_params();
  // Offload: waits for publish_params' copy to the device and returns its staging slot.
  void finish_upload();

  // Collective over the shard group: the unit's full f32 master values (numel elements), for tests and saving.
  std::vector<float> gather_master();

 private:
  std::size_t master_numel() const;  // S, or P under stage 0
  float* master();                   // this rank's f32 master elements (host memory under offload)
  Device& state_device();            // where the master, gradient shard and Adam state live
  FlatOps& state_ops();              // the element-wise operations on that memory (its compute stream orders them;
                                     // the host's runs inline)
  void* param_shard_ptr();           // this rank's slice of the parameters in param dtype
  void make_views(std::vector<TensorView>& views, void* base, DType dtype);
  // Runs on `stream` around a collective: accumulates its wall time into stats_ (CPU streams).
  void time_on(Stream& stream, const std::function<void()>& enqueue_collective);
  std::vector<ShardSegment> master_segments() const;

  std::string name_;
  CommContext& comm_;
  ShardingOptions options_;
  StagePlan plan_;
  ShardLayout layout_;
  DType param_dtype_;
  DType reduce_dtype_;
  ShardedState sharded_state_ = ShardedState::kSharded;
  TrainingState training_state_ = TrainingState::kIdle;

  Buffer param_shard_;        // ZeRO-3: [S] param dtype (kParamShard)
  Buffer master_;             // [S or P] f32 when separate (kMaster)
  Buffer grad_shard_;         // [S or P] f32 (kGradShard)
  Buffer exp_avg_;            // Adam m (kOptimState)
  Buffer exp_avg_sq_;         // Adam v (kOptimState)
  PooledBuffer unsharded_params_;  // [P] param dtype: owned (stages 0-2) or a pool slot (ZeRO-3)
  PooledBuffer unsharded_grads_;   // [P] param dtype: owned (stages 0-1) or a pool slot
  PooledBuffer reduce_in_;         // [P] reduce dtype when it differs from param dtype (pool)
  PooledBuffer reduce_out_;        // [S or P] reduce dtype (pool)
  PooledBuffer staged_shard_;      // offload params: [S] param dtype on the device, the gather's input (pool)
  PooledBuffer grad_return_;       // offload: [S or P] reduce dtype on the host (pool)
  PooledBuffer upload_slot_;       // offload: [S] param dtype on the host (pool)
  UnitPools pools_;
  CommStats& stats_;
  std::unique_ptr<Event> unsharded_event_;
  std::unique_ptr<Event> grads_ready_event_;
  std::unique_ptr<Event> reduced_event_;
  std::unique_ptr<Event> staged_event_;  // offload params: the shard's copy to the device
  std::unique_ptr<Event> upload_event_;  // offload: publish_params' copy to the device
  std::unique_ptr<Event> computed_event_;  // the compute stream's work before a collective reads it
  bool reduce_pending_ = false;
  bool upload_pending_ = false;
  bool shard_updated_ = false;  // ZeRO-3: the compute stream updated the shard since its last gather
  bool gather_pending_ = false;
  std::vector<TensorView> param_views_;
  std::vector<TensorView> grad_views_;
};

}  // namespace strata
