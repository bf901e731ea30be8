// The MLP training runs the sharding and offload tests compare: a plain one-rank reference without Strata, and
// the same training through a ShardedModel on every rank of the world (same global batch at np 1-4).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/mlp/mlp.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/sharding/sharded_model.h"
#include "runtime/sharding/sharding_options.h"

namespace strata::test {

constexpr int kGlobalRows = 12;  // divisible by 1, 2, 3 and 4: every rank count sees the same global batch
constexpr std::uint64_t kSeed = 7;

mlp::MlpConfig small_config();
AdamWConfig test_adamw();

struct History {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> params;  // by slot name, full values
};

// How a sharded run trains, beyond the model's sharding options.
struct TrainSetup {
  ShardingOptions sharding;
  int dp_replicate = 1;  // the mesh: dp_replicate x dp_shard (world / dp_replicate)
  double grad_clip = 0;
  bool no_sync = false;  // gradients stay unsharded until the last micro-batch
  int micro_batches = 1;
  std::string describe() const;
};

// The reference: one rank, no Strata, the whole global batch, plain AdamW per parameter.
History reference_training(const mlp::MlpConfig& cfg, int steps, int micro_batches, double clip);
// The same training through Strata (ShardedAdamW) on every rank of the world.
History sharded_training(const mlp::MlpConfig& cfg, const TrainSetup& setup, int steps);
// One step of small_config()'s data (the global rows of `step`, this rank's share) through `model` and `optimizer`.
StepResult train_step(ShardedModel& model, ShardedAdamW& optimizer, int step, int micro_batches, bool no_sync = false);
// The largest tensor-wise relative error over the parameters: max_k |a_k - b_k| / max(max_k |b_k|, floor) for each
// parameter tensor (the norm-wise relative error, so elements passing near zero are judged at their tensor's scale);
// infinite on any non-finite value.
double max_rel_error(const History& got, const History& want, double floor);

}  // namespace strata::test
