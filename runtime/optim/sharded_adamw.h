// ShardedAdamW: the optimizer a trainer builds over a ShardedModel. Each step it waits for the gradients, takes the
// global norm (GradNorm), skips on non-finite gradients on any rank, clips, unscales (dynamic loss scaling), and
// runs AdamW (torch.optim.AdamW semantics) on this rank's f32 shards, where they live: the device, or the host under
// offload. It owns its moments m and v, one pair per unit shard. Non-finite values end training with an error
// (kNonFinite) that names the step and the parameter: a weight the update made non-finite, at once; gradients, after
// max_skipped_steps skipped steps in a row (docs/architecture.md, "During training").
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/optim/adamw.h"
#include "runtime/optim/adamw_kernel.h"
#include "runtime/optim/grad_norm.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/optimizer_state.h"
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
  // slots count on this rank (empty: all), and within them which runs of elements (empty: all).
  std::vector<Communicator*> norm_groups;
  NormMask counted;
  NormRuns counted_runs;
  // Consecutive steps skipped for non-finite gradients after which step() throws kNonFinite; 0: never. With dynamic
  // loss scaling, a skipped step counts only when the scale could not back off (it was already 1), as DeepSpeed
  // stops when the scale is at its minimum: the skips of the scale's search are normal. An update ends a run.
  int max_skipped_steps = 0;
  // After each update, one flag per slot set by the update kernel and one 8-byte all-reduce over the norm groups:
  // a non-finite weight is kNonFinite naming the step and the first (unit, slot, element) on any rank.
  bool check_updated_weights = true;
  void validate() const;  // kInvalidArgument naming the value
};

struct StepResult {
  std::int64_t step = 0;   // optimizer steps taken so far
  double grad_norm = 0;    // the global (unsharded) gradient norm, after unscaling, before clipping
  bool skipped = false;    // non-finite gradients: no update happened, on any rank
  float loss_scale = 1;    // the scale for the next step's loss
};

class ShardedAdamW : public OptimizerState {
 public:
  // Allocates m and v (zeroed) beside the model's master shards; over the device budget, the error carries the
  // planner's advice.
  ShardedAdamW(ShardedModel& model, const AdamWConfig& config, const OptimizerOptions& options = {});

  // One step at learning rate `lr`, after the micro-batches' backwards. Collective over the norm groups. `step_label`
  // is the caller's number for this step, which warnings and errors name (a trainer's step, which after a resume or
  // skipped steps is not the optimizer's own count); -1: the number of step() calls this optimizer has made.
  StepResult step(double lr, std::int64_t step_label = -1);
  // Scale the loss by this before backward (1 unless dynamic loss scaling is on).
  float loss_scale() const { return scaler_.scale(); }
  std::int64_t steps_taken() const override { return step_; }
  const AdamWConfig& config() const { return config_; }

  // Unit i's moments (shard_numel f32 in parameters().device() memory).
  float* exp_avg(int unit);
  float* exp_avg_sq(int unit);

  // OptimizerState, for checkpoints: "adamw", the moments exp_avg and exp_avg_sq, and the scalar state (the step
  // count, the loss scaler's scale and good steps, the configuration for the record).
  std::string kind() const override { return "adamw"; }
  std::vector<std::string> tensor_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  float* tensor_shard(std::size_t k, int unit) override { return k == 0 ? exp_avg(unit) : exp_avg_sq(unit); }
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;  // kIo when it is not AdamW's state

 private:
  // Collective: after the update of step `label`, throws kNonFinite when a kernel flagged a non-finite weight.
  void check_updated(std::int64_t label, double lr);

  ShardedParameters& params_;
  AdamWConfig config_;
  OptimizerOptions options_;
  std::unique_ptr<AdamWKernel> kernel_;
  std::unique_ptr<GradNorm> norm_;
  std::vector<Buffer> exp_avg_, exp_avg_sq_;  // per unit: Adam m and v [shard_numel]
  LossScaler scaler_;
  std::int64_t step_ = 0;
  std::int64_t calls_ = 0;            // step() calls: the default label
  Buffer flags_;                      // one float per slot, in parameters().device() memory, set by the update
  std::vector<std::size_t> slot_base_;  // per unit: its first slot's flag
  // The run of skipped steps under way: its length, how many of them could not back off the loss scale, and where
  // its first step found its first non-finite gradient.
  int skipped_run_ = 0, skipped_at_floor_ = 0;
  std::int64_t run_first_step_ = 0;
  NonFiniteAt run_first_at_;
};

}  // namespace strata
