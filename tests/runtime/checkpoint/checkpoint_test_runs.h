// What the Checkpointer tests share: an MLP trained through ShardedModel + ShardedAdamW at a chosen layout, its
// state as a snapshot to compare bitwise, and a checkpoint directory under the system's temp directory named by rank
// 0's pid (every rank sees the same one).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/mlp/mlp.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_model.h"

namespace strata::test {

// The layout a run trains at.
struct Layout {
  int stage = 3;
  DType param_dtype = DType::kF32;
  OffloadPolicy offload = OffloadPolicy::kNone;
  int dp_replicate = 1;
  std::size_t align = 16;  // ShardingOptions::align_elements: another value moves every shard boundary
  std::string describe() const;
};

// An MLP, its model and optimizer over a mesh of dp_replicate x (world / dp_replicate), initialised from `seed`.
struct MlpRun {
  MlpRun(const mlp::MlpConfig& cfg, const Layout& layout, std::uint64_t seed);
  mlp::MlpConfig cfg;
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<ShardedModel> model;
  std::unique_ptr<ShardedAdamW> optimizer;
};

struct StepOut {
  double loss = 0;  // this rank's
  double grad_norm = 0;
};
// One step of the MLP's data set (global rows of `step`, this rank's share), the same at every layout.
StepOut train(MlpRun& run, int step);

// A run's state: every unit's gathered parameters (collective), this rank's moments over its shard's segments, the
// optimizer's scalars.
struct Snapshot {
  std::vector<std::vector<float>> params, exp_avg, exp_avg_sq;
  std::int64_t steps = -1;
  float loss_scale = 0;
};
Snapshot snapshot(MlpRun& run);
// Bitwise comparisons of the parts (a +0 / -0 or NaN difference counts).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);
void expect_same_params(const Snapshot& got, const Snapshot& want, const std::string& what);
void expect_same_state(const Snapshot& got, const Snapshot& want, const std::string& what);

// DIR = temp/strata_ckpt_<rank 0's pid>: created by rank 0, removed with its contents at the end (collective).
class CheckpointRoot {
 public:
  CheckpointRoot();
  ~CheckpointRoot();
  std::string dir(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

CheckpointOptions checkpoint_options(const std::string& dir, int keep = 2, bool async = false);
void barrier();
// The message and code of the strata::Error `fn` throws (code nullopt and a test failure when none).
struct Thrown {
  std::optional<ErrorCode> code;
  std::string message;
};
Thrown thrown_by(const std::function<void()>& fn);

}  // namespace strata::test
