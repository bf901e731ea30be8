// ShardedAdamW: the optimizer a trainer builds over a ShardedModel. Each step it waits for the gradients, takes the
// global norm (GradNorm), skips on non-finite gradients on any rank, clips, unscales (dynamic loss scaling), and
// runs AdamW (torch.optim.AdamW semantics) on this rank's f32 shards, where they live: the device, or the host under
// offload. It owns its moments m and v, one pair per unit shard.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/optim/adamw.h"
#include "runtime/optim/adamw_kernel.h"
#include "runtime/optim/grad_norm.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/sharding/sharded_model.h"

namespace strata {

struct OptimizerOptions {
  // Global gradient-norm clipping threshold; <= 0 disables clipping (the norm is still computed and returned).
  double grad_clip = 0.0;
  // Dynamic loss scaling (f16): initial scale, growth every `loss_scale_window` good steps, halving on overflow.
  bool dynamic_loss_scale = false;
  float initial_loss_scale = 65536.0f;
  int loss_scale_window = 1000;
  // Groups the norm is reduced over besides the model's own (the tensor- and pipeline-parallel groups), and which
  // slots count on this rank (empty: all).
  std::vector<Communicator*> norm_groups;
  NormMask counted;
  void validate() const;  // kInvalidArgument naming the value
};

struct StepResult {
  std::int64_t step = 0;   // optimizer steps taken so far
  double grad_norm = 0;    // the global (unsharded) gradient norm, after unscaling, before clipping
  bool skipped = false;    // non-finite gradients: no update happened, on any rank
  float loss_scale = 1;    // the scale for the next step's loss
};

class ShardedAdamW {
 public:
  // Allocates m and v (zeroed) beside the model's master shards; over the device budget, the error carries the
  // planner's advice.
  ShardedAdamW(ShardedModel& model, const AdamWConfig& config, const OptimizerOptions& options = {});

  // One step at learning rate `lr`, after the micro-batches' backwards. Collective over the norm groups.
  StepResult step(double lr);
  // Scale the loss by this before backward (1 unless dynamic loss scaling is on).
  float loss_scale() const { return scaler_.scale(); }
  std::int64_t steps_taken() const { return step_; }
  const AdamWConfig& config() const { return config_; }

  // For checkpoints: unit i's moments (shard_numel f32 in parameters().device() memory) and the scalar state (the
  // step count, the loss scaler's scale and good steps, the configuration for the record).
  float* exp_avg(int unit);
  float* exp_avg_sq(int unit);
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);  // kIo when it is not AdamW's state

 private:
  ShardedParameters& params_;
  AdamWConfig config_;
  OptimizerOptions options_;
  std::unique_ptr<AdamWKernel> kernel_;
  std::unique_ptr<GradNorm> norm_;
  std::vector<Buffer> exp_avg_, exp_avg_sq_;  // per unit: Adam m and v [shard_numel]
  LossScaler scaler_;
  std::int64_t step_ = 0;
};

}  // namespace strata
