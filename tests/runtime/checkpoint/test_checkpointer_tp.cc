// Checkpointer tests of tensor-parallel slots (CPU backend, np 1-4): a model with a slot of every kind of split
// (padded vocabulary rows, q|k|v parts large enough to span blocks, a padded inner dimension, replicated and frozen
// slots) saved at each tp degree that divides the world loads at each other one, at other ZeRO stages and
// synchronously or not: every master and moment element holds its global value, padding 0. The index declares the
// global model, and a Checkpointer given no mesh refuses a split model.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/memory_stats.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "tests/runtime/checkpoint/checkpoint_test_runs.h"
#include "tests/support/mlp_training.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::checkpoint_options;
using test::CheckpointRoot;
using test::runtime;

// The model at tp degree `tp`: its slots' local shapes are their slices.
std::vector<UnitSpec> tp_units(int tp) {
  auto slot = [tp](std::string name, std::vector<std::int64_t> g, int dim = -1, int parts = 1, bool trainable = true) {
    SlotSpec s;
    s.name = std::move(name);
    s.shape = g;
    s.trainable = trainable;
    if (dim >= 0) {
      s.tp = TpSplit{dim, parts, g};
      s.shape = s.tp.local_shape(tp);
    }
    return s;
  };
  return {UnitSpec{"embed", {slot("wte", {7, 12}, 0), slot("wpe", {5, 12})}},
          UnitSpec{
              "block",
              {slot("ln", {12}), slot("qkv", {48, 144}, 1, 3), slot("qkv_bias", {144}, 0, 3), slot("proj", {48, 12}, 0),
               slot("fc", {12, 10}, 1), slot("fc_bias", {10}, 0), slot("frozen", {5}, -1, 1, false)}}};
}

// The value of global element g of slot `name` in state k (0 master, 1 exp_avg, 2 exp_avg_sq): exact in f32.
float value(const std::string& name, int k, std::size_t g) {
  static const std::map<std::string, int> ids = [] {
    std::map<std::string, int> m;
    for (const UnitSpec& u : tp_units(1))
      for (const SlotSpec& s : u.slots) m.emplace(s.name, static_cast<int>(m.size()));
    return m;
  }();
  return static_cast<float>(ids.at(name) * 100000 + static_cast<int>(g)) + 0.25f * static_cast<float>(k);
}

// The global index of local element `l` of `slot` on tp rank `rank` of `tp`, or -1 for padding, written out for each
// kind of split in tp_units from what the split means, not through TpSplit's own map (for_each_global_run), so a wrong
// map fails here instead of being used alike by the save and the load:
//   replicated (wpe, ln, frozen): local == global;
//   rows (wte: a padded vocabulary; proj: row-parallel): rank r holds rows [r * rows, (r + 1) * rows) of ceil(R / tp);
//   columns (fc, fc_bias: a padded column-parallel width): rank r holds columns [r * cols, (r + 1) * cols);
//   q|k|v (qkv, qkv_bias): each third of the width cut alike, rank r holding its columns of q, then of k, then of v.
std::int64_t global_index_by_hand(const std::string& slot, int tp, int rank, std::size_t l) {
  const auto L = static_cast<std::int64_t>(l), r = static_cast<std::int64_t>(rank), t = static_cast<std::int64_t>(tp);
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  auto rows = [&](std::int64_t R, std::int64_t width) {  // [R, width] cut along the rows
    const std::int64_t local_rows = ceil_div(R, t), row = r * local_rows + L / width;
    return row < R ? row * width + L % width : -1;
  };
  auto cols = [&](std::int64_t W) {  // [*, W] cut along the columns (or a vector of W)
    const std::int64_t local_cols = ceil_div(W, t), col = r * local_cols + L % local_cols;
    return col < W ? (L / local_cols) * W + col : -1;
  };
  auto qkv = [&](std::int64_t W) {  // [*, W] with W = 3 parts, each cut into tp pieces
    const std::int64_t part = W / 3, piece = part / t, local_cols = 3 * piece, c = L % local_cols;
    return (L / local_cols) * W + (c / piece) * part + r * piece + c % piece;
  };
  if (slot == "wte") return rows(7, 12);
  if (slot == "proj") return rows(48, 12);
  if (slot == "fc") return cols(10);
  if (slot == "fc_bias") return cols(10);
  if (slot == "qkv" || slot == "qkv_bias") return qkv(144);
  return L;  // wpe, ln, frozen: replicated
}

struct TpRun {
  TpRun(int tp, int stage) : tp(tp) {
    ShardingOptions o;
    o.stage = zero_stage_from_int(stage);
    mesh = std::make_unique<DeviceMesh>(runtime(), MeshDims{1, 1, -1, tp});
    model = std::make_unique<ShardedModel>(*mesh, tp_units(tp), o);
    optimizer = std::make_unique<ShardedAdamW>(*model, test::test_adamw());
  }
  // Calls fn(slot, global index or -1 for padding, state k, element) for each element of this rank's shards.
  template <typename Fn>
  void for_each_element(Fn&& fn) {
    ShardedParameters& params = model->parameters();
    const int rank = mesh->tp().rank();
    for (int u = 0; u < model->num_units(); ++u) {
      const UnitShard shard = params.unit(u);
      float* state[3] = {shard.master, optimizer->exp_avg(u), optimizer->exp_avg_sq(u)};
      for (const ShardSegment& seg : shard.segments) {
        const ParamSlot& slot = shard.layout->slots()[seg.slot];
        for (int k = 0; k < (slot.trainable ? 3 : 1); ++k)
          for (std::size_t i = 0; i < seg.length; ++i)
            fn(slot, global_index_by_hand(slot.name, tp, rank, seg.slot_begin + i), k, state[k][seg.shard_begin + i]);
      }
    }
  }
  int tp;
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<ShardedModel> model;
  std::unique_ptr<ShardedAdamW> optimizer;
};

std::vector<int> tp_degrees() {
  std::vector<int> out;
  for (int t = 1; t <= runtime().world_size(); ++t)
    if (runtime().world_size() % t == 0) out.push_back(t);
  return out;
}

TEST(CheckpointerTp, SavedAtOneTpDegreeLoadsAtEveryOther) {
  CheckpointRoot root;
  int n = 0;
  for (int saved_tp : tp_degrees())
    for (int loaded_tp : tp_degrees()) {
      const int saved_stage = n % 2 == 0 ? 3 : 0, loaded_stage = n % 3 == 0 ? 1 : 3;
      const bool async = n % 2 == 1;
      const std::string what = fmt::format("saved at tp {} ZeRO {}{}, loaded at tp {} ZeRO {}", saved_tp, saved_stage,
                                           async ? " (async)" : "", loaded_tp, loaded_stage);
      SCOPED_TRACE(what);
      const std::string dir = root.dir(fmt::format("tp_{}", n++));
      {
        TpRun a(saved_tp, saved_stage);
        a.for_each_element([](const ParamSlot& s, std::int64_t g, int k, float& x) {
          x = g < 0 ? 0.0f : value(s.name, k, static_cast<std::size_t>(g));
        });
        Checkpointer saver(*a.model, *a.optimizer, *a.mesh, checkpoint_options(dir, 2, async));
        saver.save(3, {{"next_step", 3}});
        saver.wait();
      }
      // The index holds the global model, whatever tp saved it.
      const CheckpointIndex index = CheckpointDir(dir).read_index(3);
      EXPECT_EQ(index.coverage_problem(), "");
      EXPECT_EQ(index.tensor("params/qkv").shape, (std::vector<std::int64_t>{48, 144}));
      EXPECT_EQ(index.tensor("exp_avg/wte").shape, (std::vector<std::int64_t>{7, 12}));
      EXPECT_EQ(index.units[1].slots[1].shape, (std::vector<std::int64_t>{48, 144}));
      EXPECT_EQ(index.layout["mesh"]["tp"], saved_tp);
      EXPECT_FALSE(index.has_tensor("exp_avg/frozen"));

      TpRun b(loaded_tp, loaded_stage);
      b.for_each_element([](const ParamSlot&, std::int64_t, int, float& x) { x = -3.0f; });  // not what it loads
      Checkpointer loader(*b.model, *b.optimizer, *b.mesh, checkpoint_options(dir));
      Device& dev = runtime().device();
      dev.memory_stats().reset_peaks();
      EXPECT_EQ(loader.load().value("next_step", -1), 3);
      EXPECT_LE(dev.memory_stats().peak(MemCategory::kCheckpoint), checkpoint_options(dir).block_bytes)
          << "one staging block, however the slices are cut";
      int wrong = 0;
      std::string first;
      b.for_each_element([&](const ParamSlot& s, std::int64_t g, int k, float& x) {
        const float want = g < 0 ? 0.0f : value(s.name, k, static_cast<std::size_t>(g));
        if (x != want && wrong++ == 0)
          first = fmt::format("slot '{}' state {} global element {}: {}, expected {}", s.name, k, g, x, want);
      });
      EXPECT_EQ(wrong, 0) << first;
    }
}

TEST(CheckpointerTp, RefusesASplitModelWithoutItsMesh) {
  if (runtime().world_size() % 2 != 0) GTEST_SKIP() << "tp 2 needs an even world";
  CheckpointRoot root;
  TpRun a(2, 3);
  const test::Thrown t = test::thrown_by(
      [&] { Checkpointer c(*a.model, *a.optimizer, runtime().world(), checkpoint_options(root.dir("no_mesh"))); });
  EXPECT_EQ(t.code, ErrorCode::kInvalidArgument) << t.message;
  EXPECT_NE(t.message.find("slot 'wte' (dim 0 in 1 part of [7, 12]) has shape [4, 12], not its slice at "
                           "tensor-parallel degree 1 ([7, 12])"),
            std::string::npos)
      << t.message;
}

}  // namespace
}  // namespace strata
