// GradNorm tests (CPU backend, np 1-4): the global norm of a ShardedModel's reduced gradients against a reference each
// rank computes from exact data, for ZeRO stages 0-3: the default mask, a slot replicated across an extra group and
// counted once, non-finite gradients seen by every rank, and ShardedAdamW's grad_norm with the same mask and groups.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/optim/grad_norm.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_model.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;
using test::verifiable_int;

// Two units with a frozen slot, a zero-size slot, and "shared": the slot a tensor-parallel trainer would replicate
// across its tp group (the same gradient on every tp rank).
std::vector<UnitSpec> norm_units() {
  return {{"a", {{"w", {5, 7}}, {"frozen", {3}, true, false}, {"shared", {6}}}},
          {"b", {{"v", {11}}, {"empty", {0}}, {"s", {}}}}};
}

// What world rank `rank` writes into element i of `slot` of unit u: small integers, different on every rank, except
// "shared", which depends only on the rank's data-parallel index (so the ranks of a tp group agree on it).
float grad_value(const DeviceMesh& mesh, int rank, int u, const ParamSlot& slot, std::size_t i) {
  const int who = slot.name == "shared" ? 1000 + mesh.shape().index(MeshDim::kDp, rank) : rank;
  return static_cast<float>(verifiable_int(10 + u, who, slot.offset + i));
}

// One micro-batch whose gradients are written directly into the backward views: forward every unit, then backward
// in reverse, writing grad(unit, slot, i) for this rank.
void backward_with(ShardedModel& model, const std::function<float(int, const ParamSlot&, std::size_t)>& grad) {
  for (int u = 0; u < model.num_units(); ++u) {
    model.begin_forward(u);
    model.end_forward(u);
  }
  for (int u = model.num_units() - 1; u >= 0; --u) {
    BackwardViews v = model.begin_backward(u);
    for (const TensorView& g : v.grads) {
      std::vector<float> values(g.numel());
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = grad(u, *g.slot, i);
      if (!values.empty()) model.resources().device().copy_from_host(g.data, values.data(), values.size() * 4);
    }
    model.end_backward(u);
  }
}

void backward_with_values(ShardedModel& model, const DeviceMesh& mesh) {
  const int rank = runtime().rank();
  backward_with(model, [&](int u, const ParamSlot& s, std::size_t i) { return grad_value(mesh, rank, u, s, i); });
}

// The reference: the sum of squares of the reduced (dp-averaged, f32) trainable gradients of every tp rank t, over
// the slots `counted(t, slot)` admits. The average of small integers over dp ranks is one f32 division (hybrid
// sharding's two steps give the same bits: its dp sizes are powers of two), and a float's square is exact in double.
double reference(const DeviceMesh& mesh, ShardedModel& model,
                 const std::function<bool(int, const ParamSlot&)>& counted) {
  const MeshShape& shape = mesh.shape();
  double total = 0;
  for (int t = 0; t < shape.tp(); ++t)
    for (int u = 0; u < model.num_units(); ++u)
      for (const ParamSlot& s : model.layout(u).slots()) {
        if (!s.trainable || !counted(t, s)) continue;
        for (std::size_t i = 0; i < s.numel; ++i) {
          float sum = 0;
          for (int r = 0; r < shape.dp_replicate(); ++r)
            for (int d = 0; d < shape.dp_shard(); ++d)
              sum += grad_value(mesh, shape.rank_of(MeshCoord{0, r, d, t}), u, s, i);
          const float avg = sum / static_cast<float>(shape.dp());
          total += static_cast<double>(avg) * avg;
        }
      }
  return total;
}

bool every_slot(int, const ParamSlot&) { return true; }
// "shared" counts on tp rank 0 only: once, since every tp rank holds the same values.
bool shared_once(int tp_rank, const ParamSlot& s) { return s.name != "shared" || tp_rank == 0; }
// The mask a rank passes for that: whether a slot counts on this rank.
NormMask shared_once_mask(const DeviceMesh& mesh) {
  const int tp_rank = mesh.tp().rank();
  return [tp_rank](int, const ParamSlot& s) { return shared_once(tp_rank, s); };
}

// The sums are of the same doubles in another order: equal within a few ulps.
void expect_norm(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-12 * want) << what;
  EXPECT_GT(want, 0) << what;
}

struct Config {
  int stage;
  OffloadPolicy offload;
  std::string describe() const { return fmt::format("stage {} offload {}", stage, offload_name(offload)); }
  ShardingOptions options() const {
    ShardingOptions o;
    o.stage = zero_stage_from_int(stage);
    o.offload = offload;
    o.align_elements = 4;
    return o;
  }
};

std::vector<Config> configs() {
  std::vector<Config> out;
  for (int stage = 0; stage <= 3; ++stage)
    for (OffloadPolicy off : {OffloadPolicy::kNone, OffloadPolicy::kOptimizer}) out.push_back({stage, off});
  return out;
}

// A mesh with a tensor-parallel dimension to be the extra norm group: tp 2 at even world sizes (so at np 4 both the
// shard group and the tp group take part), the whole world at odd ones.
DeviceMesh tp_mesh() {
  const int world = runtime().world_size();
  return DeviceMesh(runtime(), MeshDims{1, 1, -1, world % 2 == 0 ? 2 : world});
}

// (a) The model's own partition groups and the default mask: the full norm, with or without hybrid sharding.
TEST(GradNorm, DefaultMaskEqualsTheFullNorm) {
  const int world = runtime().world_size();
  for (int replicate : {1, 2}) {
    if (world % replicate != 0) continue;
    DeviceMesh mesh(runtime(), MeshDims{1, replicate, -1, 1});
    for (const Config& c : configs()) {
      SCOPED_TRACE(c.describe() + fmt::format(", dp_replicate {}", replicate));
      ShardedModel model(mesh, norm_units(), c.options());
      GradNorm norm(model.parameters(), model.parameters().partition_groups());
      backward_with_values(model, mesh);
      model.parameters().wait_for_grads();
      const NormResult r = norm.compute();
      EXPECT_TRUE(r.finite);
      expect_norm(r.sum_squares, reference(mesh, model, every_slot), "default mask");
    }
  }
}

// (b) A slot replicated across the ranks of an extra group is counted once when only one rank of that group counts
// it: the tp ranks all hold "shared" (the same values), the other slots differ per tp rank and count everywhere.
TEST(GradNorm, ASlotReplicatedAcrossAnExtraGroupIsCountedOnce) {
  DeviceMesh mesh = tp_mesh();
  for (const Config& c : configs()) {
    SCOPED_TRACE(c.describe() + ", " + mesh.describe());
    ShardedModel model(mesh, norm_units(), c.options());
    std::vector<Communicator*> groups = model.parameters().partition_groups();
    groups.push_back(&mesh.tp());
    GradNorm once(model.parameters(), groups, shared_once_mask(mesh));
    GradNorm everywhere(model.parameters(), groups);
    backward_with_values(model, mesh);
    model.parameters().wait_for_grads();
    const double want_once = reference(mesh, model, shared_once);
    const double want_everywhere = reference(mesh, model, every_slot);
    expect_norm(once.compute().sum_squares, want_once, "shared counted on tp rank 0 only");
    expect_norm(everywhere.compute().sum_squares, want_everywhere, "shared counted on every tp rank");
    if (mesh.shape().tp() > 1) {
      EXPECT_GT(want_everywhere, want_once) << "the mask made no difference";
    }
  }
}

// (b) The same with the replica group of hybrid sharding as the extra group: every slot is replicated across it, so
// counting on replica 0 only gives the full norm, and counting everywhere gives it once per replica.
TEST(GradNorm, ReplicasCountedOnceGiveTheFullNorm) {
  if (runtime().world_size() % 2 != 0) GTEST_SKIP() << "two replicas need an even world";
  DeviceMesh mesh(runtime(), MeshDims{1, 2, -1, 1});
  const bool first_replica = mesh.dp_replicate().rank() == 0;
  for (const Config& c : configs()) {
    SCOPED_TRACE(c.describe());
    ShardedModel model(mesh, norm_units(), c.options());
    std::vector<Communicator*> groups = model.parameters().partition_groups();
    groups.push_back(&mesh.dp_replicate());
    GradNorm once(model.parameters(), groups, [&](int, const ParamSlot&) { return first_replica; });
    GradNorm twice(model.parameters(), groups);
    backward_with_values(model, mesh);
    model.parameters().wait_for_grads();
    const double full = reference(mesh, model, every_slot);
    expect_norm(once.compute().sum_squares, full, "counted on replica 0");
    expect_norm(twice.compute().sum_squares, 2 * full, "counted on both replicas");
  }
}

// (c) A NaN written on one rank only, into a slot that rank does not count, still makes `finite` false on every rank,
// and leaves the counted sum alone; a non-finite gradient in a frozen slot is no gradient of the norm at all.
TEST(GradNorm, NonFiniteOnOneRankIsSeenByEveryRank) {
  DeviceMesh mesh = tp_mesh();
  const int rank = runtime().rank(), last = runtime().world_size() - 1;
  // Rank `last` has tp rank tp - 1: not 0 when tp > 1, so it does not count "shared".
  const bool not_counted_there = mesh.shape().tp() > 1;
  for (const Config& c : configs()) {
    for (const char* poisoned : {"shared", "frozen"}) {
      SCOPED_TRACE(c.describe() + ", non-finite in " + poisoned + ", " + mesh.describe());
      ShardedModel model(mesh, norm_units(), c.options());
      std::vector<Communicator*> groups = model.parameters().partition_groups();
      groups.push_back(&mesh.tp());
      GradNorm norm(model.parameters(), groups, shared_once_mask(mesh));
      backward_with(model, [&](int u, const ParamSlot& s, std::size_t i) {
        if (rank == last && s.name == poisoned && i == 1)
          return s.name == std::string("frozen") ? std::numeric_limits<float>::infinity() : std::nanf("");
        return grad_value(mesh, rank, u, s, i);
      });
      model.parameters().wait_for_grads();
      const NormResult r = norm.compute();
      const double want = reference(mesh, model, shared_once);
      if (std::string(poisoned) == "shared") {
        EXPECT_FALSE(r.finite) << "rank " << rank << " did not see the NaN of rank " << last;
        if (not_counted_there) expect_norm(r.sum_squares, want, "the counted sum");
      } else {
        EXPECT_TRUE(r.finite) << "a frozen slot's gradient made the norm non-finite";
        expect_norm(r.sum_squares, want, "the counted sum");
      }
    }
  }
}

// (d) ShardedAdamW with OptimizerOptions::counted and norm_groups reports the same masked norm (loss scale 1, no
// clipping: grad_norm is the square root of the counted sum) and takes the step.
TEST(GradNorm, ShardedAdamWReportsTheMaskedNorm) {
  DeviceMesh mesh = tp_mesh();
  for (const Config& c : configs()) {
    SCOPED_TRACE(c.describe() + ", " + mesh.describe());
    ShardedModel model(mesh, norm_units(), c.options());
    OptimizerOptions o;
    o.norm_groups = {&mesh.tp()};
    o.counted = shared_once_mask(mesh);
    ShardedAdamW optimizer(model, AdamWConfig{}, o);
    backward_with_values(model, mesh);
    const StepResult r = optimizer.step(1e-3);
    EXPECT_FALSE(r.skipped);
    EXPECT_EQ(r.step, 1);
    const double want = std::sqrt(reference(mesh, model, shared_once));
    expect_norm(r.grad_norm, want, "ShardedAdamW's grad_norm");
  }
}

}  // namespace
}  // namespace strata
