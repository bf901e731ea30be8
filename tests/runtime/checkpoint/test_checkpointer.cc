// Checkpointer tests (CPU backend, np 1-4, the MLP through ShardedModel + ShardedAdamW): a save loads back bitwise at
// the same layout and training goes on bitwise as without it (ZeRO 0-3, bf16, offload, hybrid); loads at other
// layouts (stages, hybrid, dtypes, offload, shard boundaries); the atomic commit and keep-K pruning; asynchronous
// saves; zero-size shards; an optimizer state other than AdamW's, at other layouts, and the refusal of another kind.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/memory_stats.h"
#include "runtime/checkpoint/chunk_file.h"
#include "tests/runtime/checkpoint/checkpoint_test_runs.h"
#include "tests/support/mlp_training.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::barrier;
using test::checkpoint_options;
using test::CheckpointRoot;
using test::kSeed;
using test::Layout;
using test::MlpRun;
using test::runtime;
using test::same_bits;
using test::small_config;
using test::snapshot;
using test::Snapshot;
using test::train;

// The layouts a save must load back bitwise at, and train on from bitwise.
std::vector<Layout> same_layout_cases(int world) {
  std::vector<Layout> cases;
  for (int stage = 0; stage <= 3; ++stage) cases.push_back(Layout{stage});
  cases.push_back(Layout{3, DType::kBF16});
  cases.push_back(Layout{1, DType::kBF16});
  cases.push_back(Layout{3, DType::kF32, OffloadPolicy::kOptimizer});
  cases.push_back(Layout{3, DType::kF32, OffloadPolicy::kOptimizerAndParams});
  if (world % 2 == 0) {
    cases.push_back(Layout{3, DType::kF32, OffloadPolicy::kNone, 2});
    cases.push_back(Layout{1, DType::kF32, OffloadPolicy::kNone, 2});
  }
  return cases;
}

// (a) Saved after 3 steps and loaded into a fresh model + optimizer initialised differently: parameters, moments and
// scalars are the saved ones bit for bit, and 3 more steps give the same losses, norms and parameters as the run that
// never stopped.
TEST(Checkpointer, LoadAtTheSameLayoutIsBitwiseAndTrainsOnBitwise) {
  CheckpointRoot root;
  int n = 0;
  for (const Layout& layout : same_layout_cases(runtime().world_size())) {
    const std::string what = layout.describe();
    SCOPED_TRACE(what);
    const std::string dir = root.dir(fmt::format("same_{}", n++));
    MlpRun a(small_config(), layout, kSeed);
    for (int s = 0; s < 3; ++s) train(a, s);
    Checkpointer saver(*a.model, *a.optimizer, runtime().world(), checkpoint_options(dir));
    saver.save(3, {{"next_step", 3}, {"note", what}});
    EXPECT_TRUE(saver.last_save().committed);
    EXPECT_EQ(saver.last_save().step, 3);
    EXPECT_EQ(saver.latest_step(), 3);
    const Snapshot saved = snapshot(a);

    MlpRun b(small_config(), layout, kSeed + 1);
    EXPECT_FALSE(same_bits(snapshot(b).params[1], saved.params[1])) << "the premise: b starts elsewhere";
    Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(dir));
    const nlohmann::json state = loader.load();
    EXPECT_EQ(state.value("next_step", -1), 3);
    EXPECT_EQ(state.value("note", ""), what);
    test::expect_same_state(snapshot(b), saved, what + ", after the load");

    for (int s = 3; s < 6; ++s) {
      const test::StepOut x = train(a, s), y = train(b, s);
      EXPECT_EQ(y.loss, x.loss) << what << " step " << s;
      EXPECT_EQ(y.grad_norm, x.grad_norm) << what << " step " << s;
    }
    test::expect_same_state(snapshot(b), snapshot(a), what + ", 3 steps after the load");
  }
}

// (b) A checkpoint loads at any layout: saved at ZeRO 3 loaded at 0, 1, 2; saved hybrid loaded plain; saved with bf16
// parameters loaded with f32. A wider MLP, so chunks span several 4096-byte blocks and every load reads from the
// middle of chunks. The parameters are the saved ones bit for bit; the optimizer's step goes on.
TEST(Checkpointer, LoadsAtOtherLayouts) {
  CheckpointRoot root;
  const int world = runtime().world_size();
  const mlp::MlpConfig wide{7, 70, 3, 2};
  struct Case {
    Layout saved, loaded;
  };
  std::vector<Case> cases;
  for (int stage : {0, 1, 2}) cases.push_back({Layout{3}, Layout{stage}});
  cases.push_back({Layout{0}, Layout{3}});
  cases.push_back({Layout{3, DType::kBF16}, Layout{3}});
  cases.push_back({Layout{2, DType::kBF16}, Layout{0}});
  cases.push_back({Layout{3}, Layout{3, DType::kF32, OffloadPolicy::kOptimizerAndParams}});
  // Other shard boundaries at any rank count: each rank's shard starts in the middle of a saved chunk.
  cases.push_back({Layout{3}, Layout{3, DType::kF32, OffloadPolicy::kNone, 1, 4}});
  cases.push_back(
      {Layout{1, DType::kF32, OffloadPolicy::kNone, 1, 64}, Layout{2, DType::kF32, OffloadPolicy::kNone, 1, 4}});
  if (world % 2 == 0) {
    cases.push_back({Layout{3, DType::kF32, OffloadPolicy::kNone, 2}, Layout{3}});
    cases.push_back({Layout{3}, Layout{1, DType::kF32, OffloadPolicy::kNone, 2}});
  }
  int n = 0;
  for (const Case& c : cases) {
    const std::string what = c.saved.describe() + " loaded at " + c.loaded.describe();
    SCOPED_TRACE(what);
    const std::string dir = root.dir(fmt::format("other_{}", n++));
    MlpRun a(wide, c.saved, kSeed);
    for (int s = 0; s < 3; ++s) train(a, s);
    {
      Checkpointer saver(*a.model, *a.optimizer, runtime().world(), checkpoint_options(dir));
      saver.save(3, {{"next_step", 3}});
    }
    const Snapshot saved = snapshot(a);
    MlpRun b(wide, c.loaded, kSeed + 1);
    Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(dir));
    // A load holds this rank's shards and one bounded staging block (the ledger's checkpoint category), no more.
    Device& dev = runtime().device();
    dev.memory_stats().reset_peaks();
    EXPECT_EQ(loader.load().value("next_step", -1), 3);
    EXPECT_LE(dev.memory_stats().peak(MemCategory::kCheckpoint), checkpoint_options(dir).block_bytes);
    EXPECT_EQ(dev.memory_stats().current(MemCategory::kCheckpoint), 0u);
    EXPECT_EQ(loader.last_load().step, 3);
    const Snapshot loaded = snapshot(b);
    test::expect_same_params(loaded, saved, what);
    EXPECT_EQ(loaded.steps, 3);
    // Training goes on from the same state: the next steps agree with the saved run's within float round-off (the
    // reductions differ between layouts), far closer than a restart of Adam's moments would be.
    if (c.saved.param_dtype == c.loaded.param_dtype)
      for (int s = 3; s < 5; ++s) {
        const test::StepOut x = train(a, s), y = train(b, s);
        EXPECT_NEAR(y.loss, x.loss, 1e-5 * std::abs(x.loss)) << what << " step " << s;
        EXPECT_NEAR(y.grad_norm, x.grad_norm, 1e-5 * x.grad_norm) << what << " step " << s;
      }
  }
}

// (c) A directory left as step-N.tmp (a crash mid-save; here even a complete-looking one) is never loaded, and the
// next save removes it; a directory without COMMITTED is no checkpoint; keep-K keeps exactly the newest K.
TEST(Checkpointer, OnlyCommittedCheckpointsLoadAndOldOnesArePruned) {
  CheckpointRoot root;
  const std::string dir = root.dir("commit");
  const CheckpointDir cdir(dir);
  MlpRun a(small_config(), Layout{3}, kSeed);
  train(a, 0);
  Checkpointer ck(*a.model, *a.optimizer, runtime().world(), checkpoint_options(dir, 3));
  ck.save(1, {{"next_step", 1}});
  const Snapshot at1 = snapshot(a);
  if (runtime().rank() == 0) {
    fs::copy(cdir.step_path(1), cdir.tmp_path(2), fs::copy_options::recursive);  // COMMITTED and index.json too
    fs::copy(cdir.step_path(1), cdir.step_path(7), fs::copy_options::recursive);
    fs::remove(cdir.step_path(7) + "/COMMITTED");
    std::ofstream(dir + "/latest") << "step-00000007\n";  // names a directory that is not committed
  }
  barrier();
  EXPECT_EQ(cdir.committed_steps(), std::vector<std::int64_t>{1});
  EXPECT_EQ(cdir.latest_step(), 1) << "neither step-00000002.tmp nor the uncommitted step-00000007";
  EXPECT_EQ(test::thrown_by([&] { cdir.read_index(7); }).code, ErrorCode::kIo);
  {
    MlpRun b(small_config(), Layout{3}, kSeed + 1);
    Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(dir));
    EXPECT_EQ(loader.load().value("next_step", -1), 1);
    test::expect_same_state(snapshot(b), at1, "loaded past the leftovers");
  }
  barrier();
  train(a, 1);
  train(a, 2);
  ck.save(3, {{"next_step", 3}});
  EXPECT_FALSE(fs::exists(cdir.tmp_path(2))) << "the next save prunes the abandoned step-00000002.tmp";
  EXPECT_TRUE(fs::exists(cdir.step_path(7))) << "not a checkpoint, not .tmp: left alone";
  EXPECT_EQ(cdir.committed_steps(), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(read_text_file(dir + "/latest"), "step-00000003\n");

  for (int keep : {1, 2, 3}) {
    SCOPED_TRACE(fmt::format("keep {}", keep));
    const std::string kdir = root.dir(fmt::format("keep_{}", keep));
    const CheckpointDir kc(kdir);
    MlpRun r(small_config(), Layout{2}, kSeed);
    Checkpointer saver(*r.model, *r.optimizer, runtime().world(), checkpoint_options(kdir, keep));
    for (int s = 1; s <= 4; ++s) {
      train(r, s - 1);
      saver.save(s, {{"next_step", s}});
      std::vector<std::int64_t> want;
      for (int k = std::max(1, s - keep + 1); k <= s; ++k) want.push_back(k);
      EXPECT_EQ(kc.committed_steps(), want) << "after the save of step " << s;
      EXPECT_EQ(read_text_file(kdir + "/latest"), CheckpointDir::step_name(s) + "\n");
      EXPECT_EQ(kc.latest_step(), s);
      std::size_t entries = 0;
      for ([[maybe_unused]] const auto& e : fs::directory_iterator(kdir)) ++entries;
      EXPECT_EQ(entries, want.size() + 2) << "the kept checkpoints, latest and the lock, nothing else";
    }
    barrier();
    MlpRun b(small_config(), Layout{2}, kSeed + 1);
    Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(kdir));
    EXPECT_EQ(loader.load().value("next_step", -1), 4);
    test::expect_same_state(snapshot(b), snapshot(r), "the newest of the kept");
  }
}

// (f) An asynchronous save copies the state to host staging (in the ledger as kCheckpoint) and returns; training goes
// on; poll() commits once every rank has written, and the staging is freed. The files are the synchronous save's.
TEST(Checkpointer, AsynchronousSaveEqualsTheSynchronousOne) {
  CheckpointRoot root;
  const std::string sync_dir = root.dir("sync"), async_dir = root.dir("async");
  MemoryStats& ledger = runtime().device().memory_stats();
  for (const Layout& layout : {Layout{3}, Layout{0}, Layout{3, DType::kF32, OffloadPolicy::kOptimizer}}) {
    const std::string what = layout.describe();
    SCOPED_TRACE(what);
    MlpRun a(small_config(), layout, kSeed);
    for (int s = 0; s < 3; ++s) train(a, s);
    const Snapshot saved = snapshot(a);
    {
      Checkpointer sync(*a.model, *a.optimizer, runtime().world(), checkpoint_options(sync_dir));
      sync.save(3, {{"next_step", 3}});
    }
    Checkpointer async(*a.model, *a.optimizer, runtime().world(), checkpoint_options(async_dir, 2, true));
    const std::size_t before = ledger.current(MemCategory::kCheckpoint);
    EXPECT_EQ(before, 0u) << "no other checkpoint memory is live";
    async.save(3, {{"next_step", 3}});
    EXPECT_FALSE(async.last_save().committed) << "save() returns before the commit";
    const std::size_t staged = ledger.current(MemCategory::kCheckpoint) - before;
    std::size_t owned = 0;  // this rank's f32 master and moments
    for (int u = 0; u < a.model->num_units(); ++u)
      for (const ShardSegment& seg : a.model->parameters().owned_segments(u))
        owned += seg.length * 4 * (a.model->layout(u).slots()[seg.slot].trainable ? 3 : 1);
    EXPECT_GE(staged, owned) << "the staged copy is in the ledger while the save is in flight";
    EXPECT_GT(owned, 0u);
    // Steps of this MLP take microseconds, the write an fsync: poll once a step for up to 30 s (every rank runs the
    // same number of polls, as poll() is collective: rank 0 decides when to stop).
    int steps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int go = 1; go != 0; ++steps) {
      train(a, 3 + steps % 20);
      async.poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      go = !async.last_save().committed && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30);
      MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    EXPECT_TRUE(async.last_save().committed) << "not committed after " << steps << " steps of polling";
    EXPECT_GE(steps, 1);
    EXPECT_EQ(ledger.current(MemCategory::kCheckpoint), before) << "the staging is freed after the commit";
    EXPECT_GT(async.last_save().write_ms, 0.0);
    // The same bytes as the synchronous save's, file by file and in the index.
    const CheckpointIndex si = CheckpointDir(sync_dir).read_index(3), ai = CheckpointDir(async_dir).read_index(3);
    EXPECT_EQ(ai.to_json(), si.to_json());
    const std::string mine = CheckpointDir::rank_file(runtime().rank());
    if (fs::exists(CheckpointDir(sync_dir).step_path(3) + "/" + mine)) {
      EXPECT_EQ(read_text_file(CheckpointDir(async_dir).step_path(3) + "/" + mine),
                read_text_file(CheckpointDir(sync_dir).step_path(3) + "/" + mine))
          << "this rank's data file";
    }
    MlpRun b(small_config(), layout, kSeed + 1);
    Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(async_dir));
    EXPECT_EQ(loader.load().value("next_step", -1), 3);
    test::expect_same_state(snapshot(b), saved, what + ": the asynchronous save, loaded");
    barrier();
  }
}

// (g) Units smaller than the rank count: an MLP of 1 x 1 x 1 (units of 3 and 2 elements), where at np > 1 only rank
// 0 owns elements and the others write no file. Saves and loads at np 1-4, bitwise, and at another stage.
TEST(Checkpointer, ZeroSizeShardsSaveAndLoad) {
  CheckpointRoot root;
  const mlp::MlpConfig tiny{1, 1, 1, 1};
  int n = 0;
  for (int stage : {3, 0, 1}) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    const std::string dir = root.dir(fmt::format("tiny_{}", n++));
    MlpRun a(tiny, Layout{stage}, kSeed);
    for (int s = 0; s < 2; ++s) train(a, s);
    Checkpointer saver(*a.model, *a.optimizer, runtime().world(), checkpoint_options(dir));
    saver.save(2, {{"next_step", 2}});
    const Snapshot saved = snapshot(a);
    const CheckpointIndex index = CheckpointDir(dir).read_index(2);
    ASSERT_EQ(index.files.size(), 1u) << "only rank 0 owns elements";
    EXPECT_EQ(index.files[0].name, "rank-00000.bin");
    EXPECT_EQ(index.coverage_problem(), "");
    EXPECT_EQ(index.tensor("params/layer0.unused").chunks.size(), 0u) << "a zero-size parameter has no chunk";
    for (int loaded_stage : {stage, 3 - stage}) {
      MlpRun b(tiny, Layout{loaded_stage}, kSeed + 1);
      Checkpointer loader(*b.model, *b.optimizer, runtime().world(), checkpoint_options(dir));
      EXPECT_EQ(loader.load().value("next_step", -1), 2);
      if (loaded_stage == stage) {
        test::expect_same_state(snapshot(b), saved, "the same stage");
        for (int s = 2; s < 4; ++s) {
          const test::StepOut x = train(a, s), y = train(b, s);
          EXPECT_EQ(y.loss, x.loss) << "step " << s;
        }
        test::expect_same_state(snapshot(b), snapshot(a), "2 steps after the load");
      } else {
        test::expect_same_params(snapshot(b), saved, fmt::format("loaded at stage {}", loaded_stage));
      }
    }
  }
}

// An optimizer of the test's own, as a trainer would write one: one per-element tensor, "trace", whose value at every
// element is a function of the slot and the element's place in it (a segment's slot_begin is its global place: no
// tp here), and a scalar.
class TraceOptimizer : public OptimizerState {
 public:
  explicit TraceOptimizer(ShardedModel& model) : params_(model.parameters()) {
    for (int u = 0; u < params_.num_units(); ++u) trace_.emplace_back(params_.unit(u).numel(), -1.0f);
  }
  static float value(const std::string& slot, std::size_t element) {
    return static_cast<float>(slot.size()) + 0.25f * static_cast<float>(element);
  }
  void fill(std::int64_t steps) {
    steps_ = steps;
    for (int u = 0; u < params_.num_units(); ++u) {
      const UnitShard shard = params_.unit(u);
      for (const ShardSegment& seg : shard.segments)
        for (std::size_t i = 0; i < seg.length; ++i)
          trace_[u][seg.shard_begin + i] = value(shard.layout->slots()[seg.slot].name, seg.slot_begin + i);
    }
  }
  // The first element of a trainable slot whose value is not value(): "" when none.
  std::string mismatch() {
    for (int u = 0; u < params_.num_units(); ++u) {
      const UnitShard shard = params_.unit(u);
      for (const ShardSegment& seg : shard.segments) {
        const ParamSlot& slot = shard.layout->slots()[seg.slot];
        for (std::size_t i = 0; slot.trainable && i < seg.length; ++i)
          if (trace_[u][seg.shard_begin + i] != value(slot.name, seg.slot_begin + i))
            return fmt::format("{} element {}: {}", slot.name, seg.slot_begin + i, trace_[u][seg.shard_begin + i]);
      }
    }
    return "";
  }
  std::string kind() const override { return "trace"; }
  std::vector<std::string> tensor_names() const override { return {"trace"}; }
  float* tensor_shard(std::size_t, int unit) override { return trace_[static_cast<std::size_t>(unit)].data(); }
  nlohmann::json state() const override { return {{"step", steps_}, {"config", {{"kept", "for the record"}}}}; }
  void restore(const nlohmann::json& s) override { steps_ = s.at("step").get<std::int64_t>(); }
  std::int64_t steps_taken() const override { return steps_; }

 private:
  ShardedParameters& params_;
  std::vector<std::vector<float>> trace_;
  std::int64_t steps_ = 0;
};

// (f) Any OptimizerState: its tensors are saved as "trace/<slot>" and load at other stages and hybrid layouts, each
// element where it belongs, its scalars restored; a checkpoint of AdamW is refused by it and its checkpoint by AdamW,
// on every rank, naming both kinds and their tensors.
TEST(Checkpointer, AnyOptimizerStateLoadsAtOtherLayoutsAndAnotherKindIsRefused) {
  CheckpointRoot root;
  const std::string dir = root.dir("trace"), adamw_dir = root.dir("adamw");
  MlpRun a(small_config(), Layout{3}, kSeed);
  train(a, 0);
  TraceOptimizer saved(*a.model);
  saved.fill(7);
  Checkpointer(*a.model, saved, runtime().world(), checkpoint_options(dir)).save(7, {{"next_step", 7}});
  Checkpointer(*a.model, *a.optimizer, runtime().world(), checkpoint_options(adamw_dir)).save(1, {{"next_step", 1}});
  const CheckpointIndex index = CheckpointDir(dir).read_index(7);
  EXPECT_TRUE(index.has_tensor("trace/layer0.weight"));
  EXPECT_FALSE(index.has_tensor("exp_avg/layer0.weight"));
  EXPECT_FALSE(index.has_tensor("trace/layer0.input_scale")) << "a frozen slot has no optimizer state";
  EXPECT_EQ(index.state["optimizer"]["name"], "trace");
  EXPECT_EQ(index.state["optimizer"]["tensors"], nlohmann::json::array({"trace"}));
  const Snapshot want = snapshot(a);

  std::vector<Layout> layouts = {Layout{3}, Layout{0}, Layout{1}};
  if (runtime().world_size() % 2 == 0) layouts.push_back(Layout{3, DType::kF32, OffloadPolicy::kNone, 2});
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.describe());
    MlpRun b(small_config(), layout, kSeed + 1);
    TraceOptimizer loaded(*b.model);
    Checkpointer loader(*b.model, loaded, runtime().world(), checkpoint_options(dir));
    EXPECT_EQ(loader.load().value("next_step", -1), 7);
    EXPECT_EQ(loaded.steps_taken(), 7);
    EXPECT_EQ(loaded.mismatch(), "");
    test::expect_same_params(snapshot(b), want, layout.describe());
  }

  MlpRun c(small_config(), Layout{3}, kSeed + 1);
  TraceOptimizer other(*c.model);
  const test::Thrown by_trace =
      test::thrown_by([&] { Checkpointer(*c.model, other, runtime().world(), checkpoint_options(adamw_dir)).load(); });
  EXPECT_EQ(by_trace.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(by_trace.message.find("holds the state of optimizer 'adamw' (per-element tensors: exp_avg, exp_avg_sq); "
                                  "this run's optimizer is 'trace' (trace)"),
            std::string::npos)
      << by_trace.message;
  const test::Thrown by_adamw =
      test::thrown_by([&] { Checkpointer(*c.model, *c.optimizer, runtime().world(), checkpoint_options(dir)).load(); });
  EXPECT_EQ(by_adamw.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(by_adamw.message.find("holds the state of optimizer 'trace' (per-element tensors: trace); this run's "
                                  "optimizer is 'adamw' (exp_avg, exp_avg_sq)"),
            std::string::npos)
      << by_adamw.message;
}

}  // namespace
}  // namespace strata
