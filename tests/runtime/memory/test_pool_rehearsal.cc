// rehearse_unit_protocol (runtime/memory/pool_rehearsal.h) against the pools of a real step: the same units over
// every rank (np 1, 2, 4) at ZeRO 2 and 3, micro-batches with and without gradient sync between them; the rehearsal on
// one-element units in one process counts the slots the real model's pools grew to. A pipeline rank's rehearsal under
// no-sync holds every one of its units' gradients; bad protocols are named.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/memory/pool_rehearsal.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_model.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

const std::vector<UnitSpec> kUnits = {{"a", {{"a.w", {37, 5}}, {"a.b", {5}, /*weight_decay=*/false}}},
                                      {"b", {{"b.w", {64}}}},
                                      {"c", {{"c.w", {3, 3}}, {"c.frozen", {7}, false, /*trainable=*/false}}},
                                      {"d", {{"d.w", {11}}, {"d.empty", {0, 4}}}}};

// A real step over every rank: each micro-batch's forward through the units, its backward in reverse.
PoolPeaks real_step(const ShardingOptions& o, const UnitProtocol& p) {
  DeviceMesh mesh(runtime(), MeshDims{1, 1, -1, 1});
  ShardedModel model(mesh, kUnits, o);
  model.init([](const ParamSlot&, std::size_t, std::size_t n, float* out) { std::fill(out, out + n, 0.5f); });
  Device& dev = runtime().device();
  for (int m = 0; m < p.micro_batches; ++m) {
    const bool last = m == p.micro_batches - 1;
    model.set_requires_gradient_sync(p.sync_every_micro_batch || last);
    model.set_is_last_backward(last);
    for (int u = 0; u < model.num_units(); ++u) {
      model.begin_forward(u);
      model.end_forward(u);
    }
    for (int u = model.num_units() - 1; u >= 0; --u) {
      BackwardViews v = model.begin_backward(u);
      for (const TensorView& g : v.grads) dev.fill_zero(g.data, g.numel() * dtype_size(g.dtype), dev.compute_stream());
      model.end_backward(u);
    }
  }
  model.parameters().wait_for_grads();
  return pool_slots(model);
}

TEST(PoolRehearsal, CountsTheSlotsARealStepHolds) {
  for (int stage : {2, 3})
    for (bool sync : {true, false})
      for (int depth : {0, 1, 2}) {
        SCOPED_TRACE(fmt::format("ZeRO {}, {}, prefetch depth {}", stage, sync ? "sync" : "no-sync", depth));
        ShardingOptions o;
        o.stage = zero_stage_from_int(stage);
        o.prefetch_depth = depth;
        UnitProtocol p;
        p.micro_batches = 3;
        p.sync_every_micro_batch = sync;
        const PoolPeaks real = real_step(o, p), rehearsed = rehearse_unit_protocol(kUnits, o, p);
        EXPECT_EQ(rehearsed.params, real.params);
        EXPECT_EQ(rehearsed.grads, real.grads);
        // Without sync every unit's gradient stays unsharded until its last backward.
        if (!sync) {
          EXPECT_EQ(rehearsed.grads, kUnits.size());
        }
      }
}

TEST(PoolRehearsal, APipelineRankUnderNoSyncHoldsEachOfItsUnitsGradients) {
  ShardingOptions o;
  o.stage = ZeroStage::kGradients;
  const PipelineSchedule schedule = PipelineSchedule::build(PipelineScheduleKind::kOneFOneB, 2, 4);
  UnitProtocol p;
  p.sync_every_micro_batch = false;
  for (int rank : {0, 1}) EXPECT_EQ(rehearse_unit_protocol(kUnits, o, p, &schedule, rank).grads, kUnits.size());
  p.sync_every_micro_batch = true;
  EXPECT_LT(rehearse_unit_protocol(kUnits, o, p, &schedule, 0).grads, kUnits.size());
  // The trainer's own settings apply to the rehearsal's model: one that keeps its parameters gathered after each
  // backward (FSDP2's reshard_after_backward false) holds every unit's at once.
  o.stage = ZeroStage::kParameters;
  const std::uint64_t resharding = rehearse_unit_protocol(kUnits, o, p, &schedule, 0).params;
  p.configure = [](ShardedModel& model) { model.set_reshard_after_backward(false); };
  EXPECT_LT(resharding, kUnits.size());
  EXPECT_EQ(rehearse_unit_protocol(kUnits, o, p, &schedule, 0).params, kUnits.size());
}

TEST(PoolRehearsal, BadProtocolsAreNamed) {
  ShardingOptions o;
  UnitProtocol p;
  p.chunk_first = {1, 2};
  try {
    rehearse_unit_protocol(kUnits, o, p);
    ADD_FAILURE() << "chunks starting at unit 1 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rehearse_unit_protocol: chunk 0 starts at unit 1"), std::string::npos)
        << e.what();
  }
  p.chunk_first = {0, 2};
  const PipelineSchedule schedule = PipelineSchedule::build(PipelineScheduleKind::kOneFOneB, 2, 4);
  try {
    rehearse_unit_protocol(kUnits, o, p, &schedule, 0);
    ADD_FAILURE() << "two chunks on a schedule of one per rank were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the schedule gives each rank 1 chunks; the protocol names 2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
