// Sharding runtime tests (CPU backend, np 1-4): sharded training equals 1-rank unsharded training for every
// ZeroStage, hybrid sharding and both accumulation modes; clipping, non-finite gradients, the exact ledger, and
// bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/tracer.h"
#include "models/mlp/mlp.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_model.h"
#include "tests/support/mlp_training.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using mlp::MlpConfig;
using test::History;
using test::kGlobalRows;
using test::kSeed;
using test::max_rel_error;
using test::reference_training;
using test::runtime;
using test::sharded_training;
using test::small_config;
using test::test_adamw;
using test::train_step;
using test::TrainSetup;

struct Case {
  std::string name;
  TrainSetup setup;
};

std::vector<Case> f32_cases(int world) {
  std::vector<Case> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool no_sync : {false, true}) {
      for (int mb : {1, 2}) {
        if (mb == 1 && no_sync) continue;
        Case c;
        c.setup.sharding.stage = zero_stage_from_int(stage);
        c.setup.no_sync = no_sync;
        c.setup.grad_clip = 0.05;  // small enough to clip: exercises the global norm
        c.setup.micro_batches = mb;
        c.name = fmt::format("stage {} micro-batches {} {}", stage, mb, no_sync ? "no-sync" : "reduce-every");
        cases.push_back(c);
      }
    }
  }
  int k = world % 2 == 0 ? 2 : 1;  // a shard group size that divides the world
  for (int stage : {1, 3}) {
    Case c;
    c.setup.sharding.stage = zero_stage_from_int(stage);
    c.setup.dp_replicate = world / k;
    c.setup.grad_clip = 0.05;
    c.setup.micro_batches = 2;
    c.name = fmt::format("stage {} hybrid: {} replicas of {} shards", stage, world / k, k);
    cases.push_back(c);
  }
  Case keep;
  keep.setup.sharding.stage = ZeroStage::kParameters;
  keep.setup.sharding.reshard_after_forward = false;
  keep.name = "stage 3 without reshard after forward";
  cases.push_back(keep);
  return cases;
}

TEST(Sharding, F32EqualsOneRankUnshardedTrainingForEveryStage) {
  const MlpConfig cfg = small_config();
  const int steps = 4;
  for (const Case& c : f32_cases(runtime().world_size())) {
    SCOPED_TRACE(c.name);
    History want = reference_training(cfg, steps, c.setup.micro_batches, c.setup.grad_clip);
    History got = sharded_training(cfg, c.setup, steps);
    EXPECT_LE(max_rel_error(got, want, 1e-3), 1e-6) << c.name;
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(got.losses[static_cast<std::size_t>(s)], want.losses[static_cast<std::size_t>(s)],
                  1e-6 * want.losses[static_cast<std::size_t>(s)]) << c.name << " step " << s;
      EXPECT_NEAR(got.norms[static_cast<std::size_t>(s)], want.norms[static_cast<std::size_t>(s)],
                  1e-6 * want.norms[static_cast<std::size_t>(s)]) << c.name << " step " << s << " (global norm)";
    }
  }
}

// bf16 parameters and reductions against the f32 reference: bf16 keeps 8 significant bits, so parameters agree
// within 2e-2 relative (floor 1e-2) after 4 steps; the f32 master weights keep the drift from compounding. An f32 run
// meets that bar too (its distance is f32 round-off, below 1e-6), so the bf16 run must also be further than 1e-5.
TEST(Sharding, Bf16StaysWithinStatedToleranceOfF32) {
  const MlpConfig cfg = small_config();
  const int steps = 4;
  History want = reference_training(cfg, steps, 1, 0.05);
  for (int stage : {0, 3}) {
    for (DType reduce : {DType::kF32, DType::kBF16}) {
      TrainSetup setup;
      setup.sharding.stage = zero_stage_from_int(stage);
      setup.sharding.mixed_precision = {DType::kBF16, reduce};
      setup.grad_clip = 0.05;
      History got = sharded_training(cfg, setup, steps);
      const double err = max_rel_error(got, want, 1e-2);
      EXPECT_LE(err, 2e-2) << "stage " << stage << " reduce " << dtype_name(reduce);
      EXPECT_GT(err, 1e-5) << "stage " << stage << " reduce " << dtype_name(reduce)
                           << ": bf16 changed nothing beyond f32 round-off";
      if (runtime().rank() == 0)
        std::printf("bf16 parameters, stage %d, reduce %s: parameters %.3g from the f32 reference\n", stage,
                    dtype_name(reduce), err);
    }
  }
}

TEST(Sharding, NonFiniteGradientOnOneRankSkipsTheStepOnAll) {
  Runtime& rt = runtime();
  const MlpConfig cfg = small_config();
  for (int stage : {0, 3}) {
    ShardingOptions o;
    o.stage = zero_stage_from_int(stage);
    ShardedModel model(rt, mlp::mlp_units(cfg), o);
    ShardedAdamW optimizer(model, test_adamw());
    model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    std::vector<float> before = model.parameters().gather_master(1);
    const int rows = kGlobalRows / rt.world_size();
    auto batch = mlp::make_batch(cfg, static_cast<std::uint64_t>(rt.rank() * rows), rows, kSeed);
    // Forward and backward by hand so the last rank can poison one gradient element.
    mlp::Activations acts(runtime().device());
    std::vector<float> x = batch.x;
    std::vector<mlp::LayerParams> lp;
    for (int i = 0; i < cfg.num_layers(); ++i) {
      lp.push_back(mlp::read_layer(model.begin_forward(i)));
      x = mlp::layer_forward(cfg, i, lp.back(), x, rows, acts);
      model.end_forward(i);
    }
    std::vector<float> dy;
    mlp::mse_loss(x, batch.t, dy, 1.0f);
    for (int i = cfg.num_layers() - 1; i >= 0; --i) {
      BackwardViews v = model.begin_backward(i);
      std::vector<float> dw, db;
      dy = mlp::layer_backward(cfg, i, lp[static_cast<std::size_t>(i)], acts, dy, rows, dw, db);
      if (i == 1 && rt.rank() == rt.world_size() - 1) dw[5] = std::nanf("");
      for (const TensorView& g : v.grads) {
        if (g.slot->name.ends_with(".weight")) mlp::add_into(g, dw);
        else if (g.slot->name.ends_with(".bias")) mlp::add_into(g, db);
      }
      model.end_backward(i);
    }
    StepResult r = optimizer.step(1e-2);
    EXPECT_TRUE(r.skipped) << "stage " << stage;
    EXPECT_FALSE(std::isfinite(r.grad_norm));
    EXPECT_EQ(r.step, 0);
    EXPECT_EQ(model.parameters().gather_master(1), before) << "a skipped step changed the parameters";
    // Nothing is corrupted: the next, clean step trains normally.
    auto clean = mlp::make_batch(cfg, static_cast<std::uint64_t>(rt.rank() * rows), rows, kSeed);
    mlp::forward_backward(model, cfg, clean, 1.0f);
    StepResult next = optimizer.step(1e-2);
    EXPECT_FALSE(next.skipped);
    EXPECT_TRUE(std::isfinite(next.grad_norm));
    EXPECT_EQ(next.step, 1);
  }
}

// Each unit's padded numel as the layout rules say, computed here independently of ShardLayout: its slots' elements
// rounded up to a multiple of 16 x the shard group (`shard_world`).
std::vector<std::size_t> padded_by_hand(const std::vector<UnitSpec>& units, std::size_t shard_world) {
  const std::size_t quantum = shard_world * 16;
  std::vector<std::size_t> P;
  for (const UnitSpec& u : units) {
    std::size_t n = 0;
    for (const SlotSpec& s : u.slots) n += shape_numel(s.shape);
    P.push_back((n + quantum - 1) / quantum * quantum);
  }
  return P;
}

// The ledger equals the bytes the layout implies, computed here independently of ShardLayout.
TEST(Sharding, LedgerMatchesTheLayoutExactly) {
  Runtime& rt = runtime();
  Device& dev = rt.device();
  const MlpConfig cfg = small_config();
  const std::size_t W = static_cast<std::size_t>(rt.world_size());
  for (DType pdt : {DType::kF32, DType::kBF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(fmt::format("stage {} param dtype {}", stage, dtype_name(pdt)));
      auto units = mlp::mlp_units(cfg);
      const std::size_t shard_world = stage == 0 ? 1 : W, psz = dtype_size(pdt);
      const std::vector<std::size_t> P = padded_by_hand(units, shard_world);
      std::size_t sumP = 0, maxP = 0;
      for (std::size_t i = 0; i < P.size(); ++i) {
        sumP += P[i];
        maxP = std::max(maxP, P[i]);
      }
      const std::size_t sumS = sumP / shard_world;
      auto cur = [&](MemCategory c) { return dev.memory_stats().current(c); };
      ASSERT_EQ(cur(MemCategory::kParamShard) + cur(MemCategory::kMaster) + cur(MemCategory::kGradShard) +
                    cur(MemCategory::kOptimState) + cur(MemCategory::kUnshardedParams) +
                    cur(MemCategory::kUnshardedGrads),
                0u)
          << "a previous model leaked";
      ShardingOptions o;
      o.stage = zero_stage_from_int(stage);
      o.mixed_precision.param_dtype = pdt;
      ShardedModel model(rt, units, o);
      ShardedAdamW optimizer(model, test_adamw());
      model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
      const bool sharded_params = stage == 3, persist_grads = stage <= 1, separate_master = pdt != DType::kF32;
      // Transient unit buffers come from fixed pools of largest-unit slots: gathered parameters for the unit that
      // computes and the one prefetched (depth 1), gradients for the unit that computes and the one reducing.
      const std::size_t param_pool = sharded_params ? 2 * maxP * psz : 0, grad_pool = persist_grads ? 0 : 2 * maxP * psz;
      EXPECT_EQ(cur(MemCategory::kParamShard), sharded_params ? sumS * psz : 0);
      EXPECT_EQ(cur(MemCategory::kMaster), separate_master ? sumS * 4 : 0);
      EXPECT_EQ(cur(MemCategory::kGradShard), sumS * 4);
      EXPECT_EQ(cur(MemCategory::kOptimState), sumS * 8);
      EXPECT_EQ(cur(MemCategory::kUnshardedParams), sharded_params ? param_pool : sumP * psz);
      EXPECT_EQ(cur(MemCategory::kUnshardedGrads), persist_grads ? sumP * psz : grad_pool);
      // Over steps the pools do not grow (peak == current): no unit buffer is allocated inside a step.
      dev.memory_stats().reset_peaks();
      const int rows = kGlobalRows / rt.world_size();
      for (int step = 0; step < 2; ++step) {
        mlp::forward_backward(
            model, cfg, mlp::make_batch(cfg, static_cast<std::uint64_t>(rt.rank() * rows), rows, kSeed), 1.0f);
        optimizer.step(1e-2);
      }
      EXPECT_EQ(dev.memory_stats().peak(MemCategory::kUnshardedParams), cur(MemCategory::kUnshardedParams));
      EXPECT_EQ(dev.memory_stats().peak(MemCategory::kUnshardedGrads), cur(MemCategory::kUnshardedGrads));
      EXPECT_EQ(cur(MemCategory::kUnshardedGrads), persist_grads ? sumP * psz : grad_pool);
    }
  }
}

TEST(Sharding, ShapesThatDifferAcrossRanksAreAClearError) {
  Runtime& rt = runtime();
  if (rt.world_size() < 2) GTEST_SKIP() << "needs two ranks";
  MlpConfig cfg = small_config();
  if (rt.rank() == rt.world_size() - 1) cfg.hidden = 14;
  try {
    ShardedModel model(rt, mlp::mlp_units(cfg), ShardingOptions{});
    ADD_FAILURE() << "mismatched declarations were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find(fmt::format("ranks {} declare a different unit 0", rt.world_size() - 1)),
              std::string::npos)
        << e.what();
  }
}

TEST(Sharding, HybridReplicationThatDoesNotDivideTheWorldIsAClearError) {
  Runtime& rt = runtime();
  const int replicas = rt.world_size() == 3 ? 2 : 3;
  if (rt.world_size() % replicas == 0) GTEST_SKIP();
  try {
    DeviceMesh mesh(rt, MeshDims{1, replicas, -1, 1});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the world size"), std::string::npos) << e.what();
  }
}

TEST(Sharding, BackwardBeforeForwardIsAClearError) {
  Runtime& rt = runtime();
  ShardedModel model(rt, mlp::mlp_units(small_config()), ShardingOptions{});
  ShardedAdamW optimizer(model, test_adamw());
  model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
  try {
    model.begin_backward(1);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("begin_backward(1) before any forward of unit 'layer1'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model.end_forward(0), Error);
  EXPECT_THROW(model.begin_forward(7), Error);
  // The model is still usable after the errors.
  const int rows = kGlobalRows / rt.world_size();
  mlp::forward_backward(model, small_config(),
                        mlp::make_batch(small_config(), static_cast<std::uint64_t>(rt.rank() * rows), rows, kSeed), 1.0f);
  EXPECT_FALSE(optimizer.step(1e-2).skipped);
}

// init_from_rank0: rank 0 fills whole slots and broadcasts them; every rank ends with the same parameters as a
// per-shard init of the same values, and no other rank is asked for any.
TEST(Sharding, InitFromRankZeroEqualsPerShardInit) {
  Runtime& rt = runtime();
  for (int stage : {0, 3}) {
    ShardingOptions o;
    o.stage = zero_stage_from_int(stage);
    ShardedModel by_shard(rt, mlp::mlp_units(small_config()), o);
    by_shard.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    ShardedModel by_root(rt, mlp::mlp_units(small_config()), o);
    int calls = 0;
    by_root.init_from_rank0([&](const ParamSlot& s, float* out) {
      ++calls;
      mlp::mlp_init(s, 0, s.numel, out, kSeed);
    });
    EXPECT_EQ(calls > 0, rt.rank() == 0) << "only rank 0 fills";
    for (int u = 0; u < by_root.num_units(); ++u)
      EXPECT_EQ(by_root.parameters().gather_master(u), by_shard.parameters().gather_master(u))
          << "stage " << stage << " unit " << u;
  }
}

// After the first step, a step allocates nothing of Strata's: every buffer comes from the pools or persistent state.
// (The MLP keeps its activations in ledger memory it allocates per micro-batch: the trainer's, not counted.)
TEST(Sharding, NoAllocationInsideAStepAfterTheFirst) {
  Runtime& rt = runtime();
  for (bool no_sync : {false, true}) {
    ShardingOptions o;
    o.mixed_precision = {DType::kBF16, DType::kF32};  // exercises the conversion staging too
    ShardedModel model(rt, mlp::mlp_units(small_config()), o);
    ShardedAdamW optimizer(model, test_adamw());
    model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    const MemoryStats& stats = rt.device().memory_stats();
    auto strata_allocations = [&] { return stats.allocations() - stats.allocations(MemCategory::kActivations); };
    std::size_t after_first = 0;
    for (int step = 0; step < 4; ++step) {
      train_step(model, optimizer, step, 2, no_sync);
      if (step == 0) after_first = strata_allocations();
    }
    EXPECT_GT(stats.allocations(MemCategory::kActivations), 0u) << "the premise: the MLP's activations are counted";
    EXPECT_EQ(strata_allocations(), after_first) << "steps 2-4 allocated";
  }
}

// Prefetch changes when gathers happen, never what is computed: identical parameters for every depth.
TEST(Sharding, PrefetchDepthDoesNotChangeResults) {
  const MlpConfig cfg = small_config();
  std::vector<History> runs;
  for (int depth : {0, 1, 2, 3}) {
    TrainSetup setup;
    setup.sharding.prefetch_depth = depth;
    setup.grad_clip = 0.05;
    setup.micro_batches = 2;
    runs.push_back(sharded_training(cfg, setup, 3));
  }
  for (std::size_t k = 1; k < runs.size(); ++k) {
    EXPECT_EQ(runs[k].losses, runs[0].losses) << "depth " << k;
    EXPECT_EQ(runs[k].params, runs[0].params) << "depth " << k;
  }
}

// The bytes each step moved equal the layout's prediction, and both equal what each stage's protocol implies, counted
// here from the units' sizes (padded_by_hand): ZeRO-3 gathers every unit before its forward and again before its
// backward, in each of the 2 micro-batches; stages 1-2 gather once per step, after the update, where the shard group
// has more than one rank; every micro-batch's backward reduces each unit, in f32: a reduce-scatter at stages 1-3, an
// all-reduce at stage 0.
TEST(Sharding, BytesMovedEqualThePrediction) {
  Runtime& rt = runtime();
  const MlpConfig cfg = small_config();
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType pdt : {DType::kF32, DType::kBF16}) {
      ShardingOptions o;
      o.stage = zero_stage_from_int(stage);
      o.mixed_precision.param_dtype = pdt;
      ShardedModel model(rt, mlp::mlp_units(cfg), o);
      ShardedAdamW optimizer(model, test_adamw());
      model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
      train_step(model, optimizer, 0, 2);
      const StepSummary& s = model.resources().last_step_summary();
      SCOPED_TRACE(s.describe());
      const std::size_t W = static_cast<std::size_t>(rt.world_size());
      std::uint64_t padded = 0;
      for (std::size_t p : padded_by_hand(mlp::mlp_units(cfg), stage == 0 ? 1 : W)) padded += p;
      const std::uint64_t psz = dtype_size(pdt), micro_batches = 2;
      EXPECT_EQ(s.all_gather_bytes, s.predicted_all_gather_bytes);
      EXPECT_EQ(s.reduce_scatter_bytes, s.predicted_reduce_scatter_bytes);
      EXPECT_EQ(s.all_reduce_bytes, s.predicted_all_reduce_bytes);
      const std::uint64_t gathers = stage == 3 ? 2 * micro_batches : (stage >= 1 && W > 1 ? 1 : 0);
      EXPECT_EQ(s.all_gather_bytes, gathers * padded * psz);
      EXPECT_EQ(s.reduce_scatter_bytes, stage >= 1 ? micro_batches * padded * 4 : 0);
      EXPECT_EQ(s.all_reduce_bytes, stage == 0 ? micro_batches * padded * 4 : 0);
      EXPECT_GE(s.step_ms, s.exposed_comm_ms);
    }
  }
}

// The profiler ranges (NVTX on CUDA) nest: every unit's forward and backward and the optimizer step push one range
// and pop it on the same thread. Communication threads push ranges of their own (each collective's span), so the
// hooks are thread-safe and keep one depth per thread.
std::mutex g_ranges_mutex;
std::vector<std::pair<std::thread::id, std::string>> g_ranges;
thread_local int t_depth = 0;

TEST(Sharding, ProfilerRangesBracketEveryUnitAndTheStep) {
  Runtime& rt = runtime();
  Tracer::global().set_range_hooks(
      [](const char* name) {
        ++t_depth;
        std::lock_guard<std::mutex> lock(g_ranges_mutex);
        g_ranges.emplace_back(std::this_thread::get_id(), name);
      },
      [] { --t_depth; });
  {
    ShardedModel model(rt, mlp::mlp_units(small_config()), ShardingOptions{});
    ShardedAdamW optimizer(model, test_adamw());
    model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    {
      std::lock_guard<std::mutex> lock(g_ranges_mutex);
      g_ranges.clear();
    }
    const int rows = kGlobalRows / rt.world_size();
    mlp::forward_backward(model, small_config(),
                          mlp::make_batch(small_config(), static_cast<std::uint64_t>(rt.rank() * rows), rows, kSeed),
                          1.0f);
    optimizer.step(1e-2);
    const int units = model.num_units();
    EXPECT_EQ(t_depth, 0) << "a range was left open on the caller's thread";
    int forward = 0, backward = 0, steps = 0;
    std::lock_guard<std::mutex> lock(g_ranges_mutex);
    for (const auto& [thread, r] : g_ranges) {
      if (thread != std::this_thread::get_id()) continue;  // a communication thread's collective
      forward += r.rfind("forward ", 0) == 0;
      backward += r.rfind("backward ", 0) == 0;
      steps += r == "optimizer step";
    }
    EXPECT_EQ(forward, units);
    EXPECT_EQ(backward, units);
    EXPECT_EQ(steps, 1);
  }
  Tracer::global().set_range_hooks(nullptr, nullptr);
}

}  // namespace
}  // namespace strata
