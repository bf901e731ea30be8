// OptimizerState: what a checkpoint holds of an optimizer, whichever it is. An optimizer over a ShardedModel's shard
// views keeps, per trainable element, a few f32 values beside the master (AdamW's exp_avg and exp_avg_sq, momentum
// SGD's momentum_buffer: torch.optim's state_dict names), and a few scalars (its step count, a loss scale). It names
// its kind and its per-element tensors and hands out each unit's values; the Checkpointer saves them as
// "<tensor>/<slot>" beside the parameters and loads them at any layout, as it does the master
// (runtime/checkpoint/checkpointer.h). ShardedAdamW is one; examples/custom_trainer's momentum SGD another.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

class OptimizerState {
 public:
  virtual ~OptimizerState() = default;
  // The optimizer's kind ("adamw", "sgd"): a checkpoint of another kind is refused naming both.
  virtual std::string kind() const = 0;
  // Its per-element tensors, in a fixed order (may be empty: plain SGD keeps none).
  virtual std::vector<std::string> tensor_names() const = 0;
  // Unit `unit`'s values of tensor `k` (tensor_names()[k]): shard_numel f32 laid out as the unit's master shard, in
  // the same memory (ShardedParameters::device()).
  virtual float* tensor_shard(std::size_t k, int unit) = 0;
  // The scalars, as a JSON object with at least "step" (steps_taken()); a checkpoint stores them with the kind and
  // the tensor names, and load() gives them back to restore() (kIo when they are not this optimizer's).
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  // Updates made so far (the parameters' version after a load: ShardedParameters::finish_step).
  virtual std::int64_t steps_taken() const = 0;
};

}  // namespace strata
