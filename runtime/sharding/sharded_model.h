// ShardedModel: the embedding API. A trainer describes its model as ordered units of named parameters and, per
// step, brackets each unit's forward and backward with begin/end calls; Strata gathers, reduces and optimizes.
// See docs/embedding.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/sharding/comm_context.h"
#include "runtime/sharding/sharded_unit.h"

namespace strata {

class FlatOps;
class Runtime;

struct UnitSpec {
  std::string name;
  std::vector<SlotSpec> slots;
};

struct StepResult {
  std::int64_t step = 0;   // optimizer steps taken so far
  double grad_norm = 0;    // the global (unsharded) gradient norm, after unscaling, before clipping
  bool skipped = false;    // non-finite gradients: no update happened, on any rank
  float loss_scale = 1;    // the scale for the next step's loss
};

// One step's communication, measured beside what the layout predicts (ZeRO-3: two all-gathers of the parameters
// per micro-batch in param dtype, one reduce-scatter of the gradients in reduce dtype).
struct StepSummary {
  std::int64_t step = 0;
  double step_ms = 0;         // from the first begin_* after the previous step() to the end of this one
  double compute_ms = 0;      // step_ms - exposed_comm_ms
  double comm_ms = 0;         // wall time of the collectives on the communication streams (NaN on CUDA: not timed yet)
  double exposed_comm_ms = 0; // time the caller waited on communication (compute could not proceed; NaN on CUDA)
  std::uint64_t all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0;
  std::uint64_t predicted_all_gather_bytes = 0, predicted_reduce_scatter_bytes = 0, predicted_all_reduce_bytes = 0;
  std::uint64_t to_device_bytes = 0, to_host_bytes = 0;  // offload copies
  std::string describe() const;  // one line
};

struct BackwardViews {
  const std::vector<TensorView>& params;
  const std::vector<TensorView>& grads;  // zeroed by Strata; the trainer adds its gradients into them
};

class ShardedModel {
 public:
  // Collective over `world`: checks that every rank declares the same units, shapes and options.
  ShardedModel(Device& device, Communicator& world, int local_size, std::vector<UnitSpec> units,
               const ShardingOptions& options, const AdamWConfig& adamw);
  ShardedModel(Runtime& runtime, std::vector<UnitSpec> units, const ShardingOptions& options,
               const AdamWConfig& adamw);
  ~ShardedModel();

  int num_units() const { return static_cast<int>(units_.size()); }
  ShardedUnit& unit(int i);
  const ShardingOptions& options() const { return options_; }
  CommContext& comm() { return *comm_; }
  // Offload: the host memory holding the optimizer (and parameter) shards, with its own ledger; else nullptr.
  Device* host_device() const { return host_.get(); }
  std::int64_t steps_taken() const { return step_; }
  float loss_scale() const { return scaler_.scale(); }

  // Each rank fills only its shard's elements of every slot.
  void init(const SlotInit& fill);
  // Small models: rank 0 fills whole slots (`fill(slot, out)` with slot.numel values), the rest receive them.
  void init_from_rank0(const std::function<void(const ParamSlot& slot, float* out)>& fill);

  // Micro-batch `index` of `count` in this step. Under GradAccumulation::kNoSync gradients are reduced only in
  // the last one. Without a call, every backward reduces.
  void begin_micro_batch(int index, int count);

  const std::vector<TensorView>& begin_forward(int i);
  void end_forward(int i);
  BackwardViews begin_backward(int i);
  void end_backward(int i);
  // Finishes the reductions, clips by the global norm, skips on non-finite gradients, runs AdamW at `lr`.
  StepResult step(double lr);

  // Collective: unit i's full f32 parameters (master values), for tests and checkpoints.
  std::vector<float> gather_unit(int i);

  // The last step's communication summary.
  const StepSummary& last_step_summary() const { return summary_; }
  // Allocations the device has made for the unsharded-buffer and staging pools (constant after the first step).
  int pool_allocations() const;

 private:
  // The allocating part of the constructor (its kOutOfMemory gets the planner's advice appended).
  void build(int local_size);
  void check_unit(int i, const char* call) const;
  void check_same_across_ranks();
  void mark_step_start();
  // Runs fn, counting the time as exposed communication (the caller is blocked on it).
  template <typename Fn>
  void exposed(Fn&& fn);
  void prefetch(int i, int direction);
  void finish_summary();

  Device& device_;
  Communicator& world_;
  ShardingOptions options_;
  AdamWConfig adamw_;
  std::vector<UnitSpec> specs_;
  std::unique_ptr<CommContext> comm_;
  std::unique_ptr<BufferPool> params_pool_, grads_pool_, reduce_in_pool_, reduce_out_pool_;
  std::unique_ptr<Device> host_;  // offload only; declared before the pools and units that allocate from it
  std::unique_ptr<Stream> upload_stream_;
  std::unique_ptr<BufferPool> staged_shards_pool_, grad_return_pool_, param_upload_pool_;
  CommStats stats_;
  std::unique_ptr<FlatOps> ops_, host_ops_;  // before the units, which use them
  Buffer norm_buffer_;  // the global gradient norm's all-reduce
  std::unique_ptr<Event> norm_event_;
  StepSummary summary_;
  std::vector<std::int64_t> span_start_us_;  // per unit, for trace spans
  bool step_started_ = false;
  std::chrono::steady_clock::time_point step_start_;
  double exposed_ms_ = 0;
  int micro_batches_ = 1;
  bool skipped_last_ = false;
  std::vector<std::unique_ptr<ShardedUnit>> units_;
  std::vector<bool> forward_done_;
  int last_reduced_ = -1;
  bool sync_grads_ = true;
  std::int64_t step_ = 0;
  LossScaler scaler_;
};

}  // namespace strata
