// ShardedModel protocol tests (CPU backend, np 1-4), with the MLP and ShardedAdamW: out-of-order calls are clear
// errors that leave the model usable; a 1F1B-style order (every micro-batch's forward, then every backward), no-sync
// accumulation across it, explicit prefetch lists and set_is_last_backward give bitwise the results of the plain
// order; the StepSummary's measured bytes equal its prediction in the 1F1B order.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "collectives/rank_values.h"
#include "core/error.h"
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
using test::runtime;
using test::sharded_training;
using test::small_config;
using test::test_adamw;
using test::TrainSetup;

// One micro-batch between its forward and its backward (a pipeline schedule keeps several).
struct MicroBatch {
  mlp::Batch batch;
  mlp::Activations acts{runtime().device()};
  std::vector<float> dy;
  double loss = 0;
};

// This rank's rows of micro-batch a of `step`: the rows sharded_training gives it.
MicroBatch micro_batch(int step, int a, int micro_batches) {
  Runtime& rt = runtime();
  const int rows = kGlobalRows / rt.world_size();
  MicroBatch m;
  m.batch = mlp::make_batch(
      small_config(), static_cast<std::uint64_t>(((step * micro_batches + a) * rt.world_size() + rt.rank()) * rows),
      rows, kSeed);
  return m;
}

void forward(ShardedModel& model, MicroBatch& m, float grad_scale) {
  const MlpConfig cfg = small_config();
  std::vector<float> x = m.batch.x;
  for (int i = 0; i < cfg.num_layers(); ++i) {
    x = mlp::layer_forward(cfg, i, mlp::read_layer(model.begin_forward(i)), x, m.batch.rows, m.acts);
    model.end_forward(i);
  }
  m.loss = mlp::mse_loss(x, m.batch.t, m.dy, grad_scale);
}

void backward(ShardedModel& model, MicroBatch& m) {
  const MlpConfig cfg = small_config();
  for (int i = cfg.num_layers() - 1; i >= 0; --i) {
    BackwardViews v = model.begin_backward(i);
    std::vector<float> dw, db;
    m.dy = mlp::layer_backward(cfg, i, mlp::read_layer(v.params), m.acts, m.dy, m.batch.rows, dw, db);
    for (const TensorView& g : v.grads) {
      if (g.slot->name.ends_with(".weight"))
        mlp::add_into(g, dw);
      else if (g.slot->name.ends_with(".bias"))
        mlp::add_into(g, db);
    }
    model.end_backward(i);
  }
}

// Plain: each micro-batch's forward then its backward. 1F1B-style: every micro-batch's forward, then every backward
// in the same micro-batch order, so each unit has several forwards outstanding.
enum class Order { kPlain, kOneFOneB };

struct Protocol {
  TrainSetup setup;  // the mesh, sharding, micro-batches, no-sync and clipping, as test::sharded_training reads them
  Order order = Order::kPlain;
  bool mark_last_backward = true;  // set_is_last_backward(false) before every micro-batch's backward but the last's
                                   // (true); else never called, so the default (true) holds
  std::function<void(ShardedModel&)> configure;                    // before init (prefetch lists)
  std::function<void(ShardedModel&, ShardedAdamW&)> before_first;  // before step 0's first micro-batch
  std::function<void(ShardedModel&)> before_optimizer;             // after each step's backwards
  std::string describe() const {
    return setup.describe() + (order == Order::kOneFOneB ? ", 1F1B order" : ", plain order") +
           (mark_last_backward ? "" : ", is_last_backward left at its default");
  }
};

struct TrainedRun {
  History history;
  std::vector<StepSummary> summaries;
};

// test::sharded_training's loop with the order and the micro-batch controls of `p`.
TrainedRun train(const Protocol& p, int steps) {
  Runtime& rt = runtime();
  const int world = rt.world_size(), mb = p.setup.micro_batches;
  DeviceMesh mesh(rt, MeshDims{1, p.setup.dp_replicate, -1, 1});
  ShardedModel model(mesh, mlp::mlp_units(small_config()), p.setup.sharding);
  OptimizerOptions o;
  o.grad_clip = p.setup.grad_clip;
  ShardedAdamW optimizer(model, test_adamw(), o);
  if (p.configure) p.configure(model);
  model.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
  TrainedRun run;
  for (int step = 0; step < steps; ++step) {
    if (step == 0 && p.before_first) p.before_first(model, optimizer);
    const float grad_scale = optimizer.loss_scale() / static_cast<float>(mb);
    auto controls = [&](int a) {
      const bool last = a == mb - 1;
      model.set_requires_gradient_sync(!p.setup.no_sync || last);
      if (p.mark_last_backward) model.set_is_last_backward(last);
    };
    std::vector<MicroBatch> batches;
    for (int a = 0; a < mb; ++a) batches.push_back(micro_batch(step, a, mb));
    for (int a = 0; a < mb; ++a) {
      if (p.order == Order::kPlain) controls(a);
      forward(model, batches[static_cast<std::size_t>(a)], grad_scale);
      if (p.order == Order::kPlain) backward(model, batches[static_cast<std::size_t>(a)]);
    }
    if (p.order == Order::kOneFOneB)
      for (int a = 0; a < mb; ++a) {
        controls(a);
        backward(model, batches[static_cast<std::size_t>(a)]);
      }
    if (p.before_optimizer) p.before_optimizer(model);
    double loss = 0;
    for (const MicroBatch& m : batches) loss += m.loss / mb;
    const StepResult r = optimizer.step(test_adamw().lr);
    EXPECT_FALSE(r.skipped);
    run.history.losses.push_back(sum_over_ranks(rt.world(), loss) / world);
    run.history.norms.push_back(r.grad_norm);
    run.summaries.push_back(model.resources().last_step_summary());
  }
  for (int i = 0; i < model.num_units(); ++i) {
    const std::vector<float> full = model.parameters().gather_master(i);
    for (const ParamSlot& s : model.layout(i).slots())
      run.history.params[s.name] = std::vector<float>(full.begin() + static_cast<std::ptrdiff_t>(s.offset),
                                                      full.begin() + static_cast<std::ptrdiff_t>(s.offset + s.numel));
  }
  return run;
}

// Bitwise: the same losses, norms and parameters.
void expect_same(const History& got, const History& want, const std::string& what) {
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_EQ(got.norms, want.norms) << what;
  EXPECT_EQ(got.params, want.params) << what;
}

TrainSetup two_micro_batches(int stage) {
  TrainSetup s;
  s.sharding.stage = zero_stage_from_int(stage);
  s.micro_batches = 2;
  s.grad_clip = 0.05;  // small enough to clip: the global norm takes part
  return s;
}

// Stages 0-3, ZeRO-3 keeping parameters after forward, both offload policies, and hybrid ZeRO-3 at even world sizes.
std::vector<TrainSetup> setups() {
  std::vector<TrainSetup> out;
  for (int stage = 0; stage <= 3; ++stage) out.push_back(two_micro_batches(stage));
  TrainSetup keep = two_micro_batches(3);
  keep.sharding.reshard_after_forward = false;
  out.push_back(keep);
  TrainSetup offload_optimizer = two_micro_batches(1), offload_params = two_micro_batches(3);
  offload_optimizer.sharding.offload = OffloadPolicy::kOptimizer;
  offload_params.sharding.offload = OffloadPolicy::kOptimizerAndParams;
  out.push_back(offload_optimizer);
  out.push_back(offload_params);
  if (runtime().world_size() % 2 == 0) {
    TrainSetup hybrid = two_micro_batches(3);
    hybrid.dp_replicate = 2;
    out.push_back(hybrid);
  }
  return out;
}

constexpr int kSteps = 3;

template <typename Fn>
void expect_invalid(Fn&& fn, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "accepted; expected an error saying: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

// Every error is thrown before any collective, on every rank alike, and leaves nothing behind: the training that
// follows is bitwise the training of a model that never saw them.
TEST(Protocol, OutOfOrderCallsAreClearErrorsThatLeaveTheModelUsable) {
  for (int stage : {1, 3}) {
    Protocol clean;
    clean.setup = two_micro_batches(stage);
    Protocol provoked = clean;
    provoked.before_first = [](ShardedModel& model, ShardedAdamW& optimizer) {
      const int n = model.num_units();
      expect_invalid([&] { model.end_forward(0); }, "end_forward(0) without begin_forward(0)");
      expect_invalid([&] { model.begin_backward(1); }, "begin_backward(1) before any forward of unit 'layer1'");
      expect_invalid([&] { model.end_backward(0); }, "end_backward(0) without begin_backward(0)");
      model.begin_forward(0);
      expect_invalid([&] { model.begin_forward(0); }, "begin_forward(0): unit 'layer0' is already in forward");
      model.end_forward(0);
      model.begin_forward(0);  // a forward outstanding: the unit may take a backward once this forward ends
      expect_invalid([&] { model.begin_backward(0); }, "begin_backward(0): unit 'layer0' is still in forward");
      expect_invalid([&] { optimizer.step(1e-2); }, "an optimizer step while unit 'layer0' is still in forward");
      model.end_forward(0);
      const std::string units = fmt::format("the model has units 0..{}", n - 1);
      expect_invalid([&] { model.begin_forward(-1); }, "begin_forward(-1): " + units);
      expect_invalid([&] { model.begin_forward(n); }, units);
      expect_invalid([&] { model.end_forward(n); }, units);
      expect_invalid([&] { model.begin_backward(n); }, units);
      expect_invalid([&] { model.end_backward(-1); }, units);
      expect_invalid([&] { model.layout(n); }, units);
      expect_invalid([&] { model.parameters().gather_master(n); }, units);
      expect_invalid([&] { model.parameters().unit(n); }, units);
      expect_invalid([&] { model.parameters().begin_update(-1); }, units);
      EXPECT_EQ(optimizer.steps_taken(), 0);
    };
    const TrainedRun want = train(clean, kSteps), got = train(provoked, kSteps);
    expect_same(got.history, want.history, "stage " + std::to_string(stage) + " after the errors");
  }
}

// The 1F1B order computes what the plain order computes in the same arithmetic order: the same forward values (no
// update in between), each unit's gradients zeroed, filled and reduced once per micro-batch, and the reductions
// added to the f32 shard in micro-batch order. So it is bitwise equal, not just close. The model counts each unit's
// outstanding forwards: after both backwards a third is an error.
TEST(Protocol, OneFOneBOrderEqualsThePlainOrderBitwise) {
  for (const TrainSetup& setup : setups()) {
    Protocol p;
    p.setup = setup;
    p.order = Order::kOneFOneB;
    p.before_optimizer = [](ShardedModel& model) {
      for (int i = 0; i < model.num_units(); ++i)
        expect_invalid([&] { model.begin_backward(i); }, "before any forward");
    };
    SCOPED_TRACE(p.describe());
    expect_same(train(p, kSteps).history, sharded_training(small_config(), setup, kSteps), "1F1B vs plain");
  }
}

// set_requires_gradient_sync(false) for the first micro-batch and true for the last: the unsharded gradients sum
// both micro-batches and are reduced once, in either order; bitwise test::sharded_training's no-sync accumulation.
TEST(Protocol, NoSyncThenSyncEqualsNoSyncAccumulationInEitherOrder) {
  for (TrainSetup setup : setups()) {
    setup.no_sync = true;
    const History want = sharded_training(small_config(), setup, kSteps);
    for (Order order : {Order::kPlain, Order::kOneFOneB}) {
      Protocol p;
      p.setup = setup;
      p.order = order;
      SCOPED_TRACE(p.describe());
      expect_same(train(p, kSteps).history, want, "no-sync");
    }
  }
}

// set_is_last_backward only decides when the model waits for the reductions, never what they compute.
TEST(Protocol, IsLastBackwardFalseThenTrueEqualsTheDefault) {
  for (const TrainSetup& setup : setups())
    for (Order order : {Order::kPlain, Order::kOneFOneB}) {
      Protocol marked;
      marked.setup = setup;
      marked.order = order;
      Protocol unmarked = marked;
      unmarked.mark_last_backward = false;
      SCOPED_TRACE(marked.describe());
      expect_same(train(marked, kSteps).history, train(unmarked, kSteps).history, "is_last_backward");
    }
}

// Explicit prefetch lists change which gathers run ahead, never what is computed: none, the next two units, every
// unit in reverse order, and the units behind (prefetches a forward never uses soon).
TEST(Protocol, ExplicitPrefetchListsNeverChangeResults) {
  using Lists = std::function<std::vector<int>(int unit, int units, bool forward)>;
  const std::vector<std::pair<std::string, Lists>> lists = {
      {"empty", [](int, int, bool) { return std::vector<int>{}; }},
      {"next two",
       [](int i, int n, bool fwd) {
         std::vector<int> out;
         for (int k = 1; k <= 2; ++k) {
           const int j = fwd ? i + k : i - k;
           if (j >= 0 && j < n) out.push_back(j);
         }
         return out;
       }},
      {"every unit in reverse",
       [](int, int n, bool) {
         std::vector<int> out;
         for (int j = n - 1; j >= 0; --j) out.push_back(j);
         return out;
       }},
      {"the units behind",
       [](int i, int n, bool fwd) {
         std::vector<int> out;
         for (int k = 1; k <= 2; ++k) {
           const int j = fwd ? i - k : i + k;
           if (j >= 0 && j < n) out.push_back(j);
         }
         return out;
       }},
  };
  for (const TrainSetup& setup : setups()) {
    if (setup.sharding.stage == ZeroStage::kNone) continue;  // nothing to gather
    for (Order order : {Order::kPlain, Order::kOneFOneB}) {
      Protocol p;
      p.setup = setup;
      p.order = order;
      const History want = train(p, kSteps).history;
      for (const auto& [name, list] : lists) {
        p.configure = [&list](ShardedModel& model) {
          for (int i = 0; i < model.num_units(); ++i) {
            model.set_forward_prefetch(i, list(i, model.num_units(), true));
            model.set_backward_prefetch(i, list(i, model.num_units(), false));
          }
        };
        SCOPED_TRACE(p.describe() + ", prefetch lists: " + name);
        expect_same(train(p, kSteps).history, want, name);
      }
    }
  }
}

TEST(Protocol, PrefetchListNamingABadUnitIsAnInvalidArgument) {
  ShardingOptions o;
  ShardedModel model(runtime(), mlp::mlp_units(small_config()), o);
  const int n = model.num_units();
  expect_invalid([&] { model.set_forward_prefetch(0, {1, n}); }, "set_forward_prefetch: prefetched unit");
  expect_invalid([&] { model.set_backward_prefetch(1, {-1}); }, "set_backward_prefetch: prefetched unit");
  expect_invalid([&] { model.set_forward_prefetch(n, {}); }, fmt::format("set_forward_prefetch({})", n));
  expect_invalid([&] { model.set_backward_prefetch(-1, {0}); }, "set_backward_prefetch(-1)");
}

// The summary predicts the bytes from what the trainer did (forwards per unit, synchronised reductions); with several
// forwards outstanding per unit the measured bytes still equal it, step after step.
TEST(Protocol, StepSummaryBytesEqualThePredictionInOneFOneBOrder) {
  for (TrainSetup setup : setups())
    for (DType pdt : {DType::kF32, DType::kBF16})
      for (bool no_sync : {false, true}) {
        setup.sharding.mixed_precision.param_dtype = pdt;
        setup.no_sync = no_sync;
        Protocol p;
        p.setup = setup;
        p.order = Order::kOneFOneB;
        SCOPED_TRACE(p.describe());
        const TrainedRun run = train(p, 2);
        for (const StepSummary& s : run.summaries) {
          SCOPED_TRACE(s.describe());
          EXPECT_EQ(s.all_gather_bytes, s.predicted_all_gather_bytes);
          EXPECT_EQ(s.reduce_scatter_bytes, s.predicted_reduce_scatter_bytes);
          EXPECT_EQ(s.all_reduce_bytes, s.predicted_all_reduce_bytes);
          EXPECT_GT(s.reduce_scatter_bytes + s.all_reduce_bytes, 0u);
          if (setup.sharding.stage == ZeroStage::kParameters) {
            EXPECT_GT(s.all_gather_bytes, 0u);
          }
        }
      }
}

}  // namespace
}  // namespace strata
