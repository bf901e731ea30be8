// The MLP training runs the sharding and offload tests compare: a plain one-rank reference without Strata, and
// the same training through a ShardedModel on every rank of the world (same global batch at np 1-4).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/mlp/mlp.h"
#include "runtime/optim/adamw.h"
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

// The reference: one rank, no Strata, the whole global batch, plain AdamW per parameter.
History reference_training(const mlp::MlpConfig& cfg, int steps, int micro_batches, double clip);
// The same training through Strata on every rank of the world.
History sharded_training(const mlp::MlpConfig& cfg, ShardingOptions opts, int steps, int micro_batches);
// The largest tensor-wise relative error over the parameters: max_k |a_k - b_k| / max(max_k |b_k|, floor) for each
// parameter tensor (the norm-wise relative error, so elements passing near zero are judged at their tensor's scale).
double max_rel_error(const History& got, const History& want, double floor);

}  // namespace strata::test
