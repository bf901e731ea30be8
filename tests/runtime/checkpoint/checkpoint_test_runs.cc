// The Checkpointer tests' runs, snapshots and directory (checkpoint_test_runs.h).
#include "tests/runtime/checkpoint/checkpoint_test_runs.h"

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "tests/support/mlp_training.h"
#include "tests/support/test_support.h"

namespace strata::test {

std::string Layout::describe() const {
  return fmt::format("ZeRO {} params {} offload {} dp_replicate {} align {}", stage, dtype_name(param_dtype),
                     offload_name(offload), dp_replicate, align);
}

MlpRun::MlpRun(const mlp::MlpConfig& c, const Layout& layout, std::uint64_t seed) : cfg(c) {
  ShardingOptions o;
  o.stage = zero_stage_from_int(layout.stage);
  o.mixed_precision.param_dtype = layout.param_dtype;
  o.offload = layout.offload;
  o.align_elements = layout.align;
  mesh = std::make_unique<DeviceMesh>(runtime(), MeshDims{1, layout.dp_replicate, -1, 1});
  model = std::make_unique<ShardedModel>(*mesh, mlp::mlp_units(cfg), o);
  optimizer = std::make_unique<ShardedAdamW>(*model, test_adamw());
  model->init(
      [seed](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, seed); });
}

StepOut train(MlpRun& run, int step) {
  const int world = runtime().world_size(), rows = kGlobalRows / world;
  run.model->set_requires_gradient_sync(true);
  run.model->set_is_last_backward(true);
  const auto first = static_cast<std::uint64_t>((step * world + runtime().rank()) * rows);
  StepOut out;
  out.loss = mlp::forward_backward(*run.model, run.cfg, mlp::make_batch(run.cfg, first, rows, kSeed),
                                   run.optimizer->loss_scale());
  const StepResult r = run.optimizer->step(test_adamw().lr);
  EXPECT_FALSE(r.skipped);
  out.grad_norm = r.grad_norm;
  return out;
}

Snapshot snapshot(MlpRun& run) {
  Snapshot s;
  ShardedParameters& params = run.model->parameters();
  params.stream().synchronize();
  for (int u = 0; u < run.model->num_units(); ++u) {
    s.params.push_back(run.model->parameters().gather_master(u));
    const UnitShard shard = params.unit(u);
    std::vector<float> m, v;
    for (const ShardSegment& seg : shard.segments) {  // host memory on the CPU backend, offloaded or not
      const float* pm = run.optimizer->exp_avg(u) + seg.shard_begin;
      const float* pv = run.optimizer->exp_avg_sq(u) + seg.shard_begin;
      m.insert(m.end(), pm, pm + seg.length);
      v.insert(v.end(), pv, pv + seg.length);
    }
    s.exp_avg.push_back(std::move(m));
    s.exp_avg_sq.push_back(std::move(v));
  }
  s.steps = run.optimizer->steps_taken();
  s.loss_scale = run.optimizer->loss_scale();
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_same_params(const Snapshot& got, const Snapshot& want, const std::string& what) {
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (std::size_t u = 0; u < want.params.size(); ++u)
    EXPECT_TRUE(same_bits(got.params[u], want.params[u])) << what << ": unit " << u << "'s parameters";
}

void expect_same_state(const Snapshot& got, const Snapshot& want, const std::string& what) {
  expect_same_params(got, want, what);
  ASSERT_EQ(got.exp_avg.size(), want.exp_avg.size()) << what;
  for (std::size_t u = 0; u < want.exp_avg.size(); ++u) {
    EXPECT_TRUE(same_bits(got.exp_avg[u], want.exp_avg[u])) << what << ": unit " << u << "'s exp_avg";
    EXPECT_TRUE(same_bits(got.exp_avg_sq[u], want.exp_avg_sq[u])) << what << ": unit " << u << "'s exp_avg_sq";
  }
  EXPECT_EQ(got.steps, want.steps) << what;
  EXPECT_EQ(got.loss_scale, want.loss_scale) << what;
}

CheckpointRoot::CheckpointRoot() {
  int root_pid = ::getpid();
  MPI_Bcast(&root_pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  path_ = (std::filesystem::temp_directory_path() / fmt::format("strata_ckpt_{}", root_pid)).string();
  if (runtime().rank() == 0) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  barrier();
}

CheckpointRoot::~CheckpointRoot() {
  barrier();
  std::error_code ec;
  if (runtime().rank() == 0) std::filesystem::remove_all(path_, ec);
  barrier();
}

CheckpointOptions checkpoint_options(const std::string& dir, int keep, bool async) {
  CheckpointOptions o;
  o.dir = dir;
  o.keep = keep;
  o.async = async;
  o.block_bytes = 4096;  // the smallest block: chunks of the larger MLPs span several
  return o;
}

void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

Thrown thrown_by(const std::function<void()>& fn) {
  Thrown t;
  t.code = error_code_of([&] {
    try {
      fn();
    } catch (const Error& e) {
      t.message = e.what();
      throw;
    }
  });
  return t;
}

}  // namespace strata::test
