// ShardedUnit tests (CPU backend, np 1-4): each verb of one unit against an all-reduce-and-slice reference that every
// rank computes locally from exact data, for ZeRO stages 0-3, param dtype f32 / bf16, reduce dtype f32 / bf16, with
// and without hybrid sharding and offload; and UnitState's transition table.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/device_registry.h"
#include "core/error.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/comm_context.h"
#include "runtime/sharding/flat_ops.h"
#include "runtime/sharding/sharded_unit.h"
#include "runtime/sharding/unit_state.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::element;
using test::runtime;
using test::verifiable_int;

// 50 elements that pad unevenly at every world size (align 4), with a zero-size and a frozen slot.
std::vector<SlotSpec> unit_slots() {
  return {{"w", {5, 7}, true, true},
          {"empty", {0}, true, true},
          {"frozen", {3}, false, false},
          {"b", {11}, false, true},
          {"s", {}, true, true}};
}

// Parameter values: a pure function of (version, flat element).
float param_value(int version, std::size_t j) { return static_cast<float>(verifiable_int(100 + version, 0, j)); }

// Rank r's gradient at flat element j for micro-batch `seed`; the padding (j >= numel) holds none.
float grad_value(int seed, int r, std::size_t j, std::size_t numel) {
  return j < numel ? static_cast<float>(verifiable_int(seed, r, j)) : 0.0f;
}

float zero(std::size_t) { return 0.0f; }

float round_to(float x, DType t) { return t == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x)) : x; }

// The reduction's result at flat element j: every dp rank's gradients of `seeds` (summed unsharded on each rank),
// averaged over the dp ranks as the MPI backend does it (an exact f32 sum of small integers, one division, one
// rounding to the reduce dtype). Hybrid sharding averages in two steps, shards then replicas; at the dp sizes it runs
// at (2, 4) every intermediate is a small multiple of 1/4, exact in bf16, so it rounds the same.
float reduced_value(const std::vector<int>& seeds, std::size_t j, std::size_t numel, DType reduce_dtype) {
  const int world = runtime().world_size();
  float sum = 0;
  for (int r = 0; r < world; ++r)
    for (int s : seeds) sum += grad_value(s, r, j, numel);
  return round_to(sum / static_cast<float>(world), reduce_dtype);
}

std::vector<float> read_view(Device& dev, const TensorView& v) {
  std::vector<unsigned char> raw(v.numel() * dtype_size(v.dtype));
  if (!raw.empty()) dev.copy_to_host(raw.data(), v.data, raw.size());
  std::vector<float> out(v.numel());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(element(raw.data(), i, v.dtype));
  return out;
}

void write_view(Device& dev, const TensorView& v, const std::vector<float>& values) {
  std::vector<unsigned char> raw(v.numel() * dtype_size(v.dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (v.dtype == DType::kF32) {
      std::memcpy(raw.data() + 4 * i, &values[i], 4);
    } else {
      const std::uint16_t h = v.dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
  }
  if (!raw.empty()) dev.copy_from_host(v.data, raw.data(), raw.size());
}

// Every element of `got` equals want(k) bitwise (as floats); a failure reports the first few and the count.
template <typename Want>
void expect_values(const std::string& what, const std::vector<float>& got, Want want) {
  int wrong = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const float w = want(k);
    if (got[k] != w) {
      if (wrong < 3) ADD_FAILURE() << what << ": element " << k << " is " << got[k] << ", expected " << w;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": elements that differ from the reference";
}

struct UnitCase {
  ZeroStage stage = ZeroStage::kParameters;
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  OffloadPolicy offload = OffloadPolicy::kNone;
  ShardingOptions options() const {
    ShardingOptions o;
    o.stage = stage;
    o.mixed_precision = {param_dtype, reduce_dtype};
    o.offload = offload;
    o.align_elements = 4;
    return o;
  }
  std::string describe() const {
    return fmt::format("stage {} param {} reduce {} offload {}", static_cast<int>(stage), dtype_name(param_dtype),
                       dtype_name(reduce_dtype), offload_name(offload));
  }
};

// One unit with what ShardedModel::build gives its units: pools from plan_pools, the flat operations, and under
// offload a host device and an upload stream.
class UnitRig {
 public:
  UnitRig(CommContext& comm, const ShardingOptions& o) : comm_(comm) {
    o.validate();
    const std::vector<UnitPlacement> placements{
        UnitPlacement(ShardLayout(unit_slots(), comm.shard_size(), o.align_elements), o)};
    if (StagePlan::from(o).offload_optimizer) {
      host_ = create_host_device(comm.device());
      upload_ = comm.device().create_stream("upload");
      resources_.host = host_.get();
      resources_.upload = upload_.get();
    }
    for (const PoolPlan& p : plan_pools(placements, o)) {
      Device& where = p.memory == Memory::kHost ? *host_ : comm.device();
      pools_.push_back(
          std::make_unique<BufferPool>(where, unit_buffer_name(p.buffer), p.category, p.slot_bytes, p.initial_slots));
      resources_.pools[static_cast<std::size_t>(p.buffer)] = pools_.back().get();
    }
    ops_ = create_flat_ops(comm.device());
    host_ops_ = create_host_flat_ops();
    resources_.ops = ops_.get();
    resources_.host_ops = host_ops_.get();
    unit_ = std::make_unique<ShardedUnit>("probe", unit_slots(), comm, o, resources_, stats_);
  }

  ShardedUnit& unit() { return *unit_; }
  CommStats& stats() { return stats_; }
  Device& device() { return comm_.device(); }
  // Slots of b's pool in use (0 when b is not pooled in this configuration).
  int in_use(UnitBuffer b) const {
    const BufferPool* p = resources_.pools[static_cast<std::size_t>(b)];
    return p ? p->in_use() : 0;
  }
  // The master and the gradient shard live in the state memory: the host under offload, else the device.
  std::vector<float> read_state(const float* p, std::size_t n) {
    std::vector<float> out(n);
    if (n) state_device().copy_to_host(out.data(), p, n * 4);
    return out;
  }
  void write_state(float* p, const std::vector<float>& v) {
    if (!v.empty()) state_device().copy_from_host(p, v.data(), v.size() * 4);
  }
  std::vector<float> params_of_slot(std::size_t s) { return read_view(device(), params()[s]); }
  // The unit's verbs that return its views, kept here so the checks can read them: the gathered parameters (valid
  // until reshard, then empty) and the gradients the trainer adds into.
  void wait_for_unshard() { params_ = &unit_->wait_for_unshard(); }
  void prepare_grads() { grads_ = &unit_->prepare_grads(); }
  const std::vector<TensorView>& params() const { return params_ ? *params_ : none_; }
  const std::vector<TensorView>& grads() const { return grads_ ? *grads_ : none_; }
  Stream* upload() { return upload_.get(); }

 private:
  Device& state_device() { return host_ ? *host_ : comm_.device(); }
  CommContext& comm_;
  std::unique_ptr<Device> host_;
  std::unique_ptr<Stream> upload_;
  std::vector<std::unique_ptr<BufferPool>> pools_;
  std::unique_ptr<FlatOps> ops_, host_ops_;
  UnitResources resources_;
  CommStats stats_;
  std::unique_ptr<ShardedUnit> unit_;  // declared last: it goes first, returning its slots while the pools exist
  const std::vector<TensorView>* params_ = nullptr;
  const std::vector<TensorView>* grads_ = nullptr;
  const std::vector<TensorView> none_;
};

// The gathered views hold every slot's full values of `version`.
void expect_params(UnitRig& rig, int version, const std::string& when) {
  const std::vector<TensorView>& views = rig.params();
  EXPECT_EQ(views.size(), unit_slots().size()) << when;
  for (std::size_t s = 0; s < views.size(); ++s) {
    const ParamSlot& slot = *views[s].slot;
    expect_values(when + ", slot " + slot.name, rig.params_of_slot(s),
                  [&](std::size_t i) { return param_value(version, slot.offset + i); });
  }
}

// Adds rank `rank`'s gradients of micro-batch `seed` into the unsharded gradient views.
void add_grads(UnitRig& rig, int seed, int rank) {
  const std::size_t numel = rig.unit().layout().numel();
  for (const TensorView& v : rig.grads()) {
    std::vector<float> g = read_view(rig.device(), v);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] += grad_value(seed, rank, v.slot->offset + i, numel);
    write_view(rig.device(), v, g);
  }
}

// Every verb of one unit, in the order a step uses them, each against the reference.
void check_verbs(CommContext& comm, const UnitCase& c) {
  SCOPED_TRACE(c.describe());
  const int rank = runtime().rank();
  UnitRig rig(comm, c.options());
  ShardedUnit& u = rig.unit();
  const ShardLayout& l = u.layout();
  const std::size_t N = l.numel(), P = l.padded_numel(), S = l.shard_numel();
  const std::size_t offset = l.shard_offset(comm.shard_rank());
  const bool zero3 = c.stage == ZeroStage::kParameters, grads_persist = static_cast<int>(c.stage) <= 1;
  const std::uint64_t psz = dtype_size(c.param_dtype), rsz = dtype_size(c.reduce_dtype);
  std::atomic<std::uint64_t>& reduce_bytes =
      c.stage == ZeroStage::kNone ? rig.stats().all_reduce_bytes : rig.stats().reduce_scatter_bytes;
  EXPECT_EQ(S * static_cast<std::size_t>(comm.shard_size()), P);
  EXPECT_EQ(S, c.stage == ZeroStage::kNone ? P : P / static_cast<std::size_t>(comm.shard_size()));
  EXPECT_EQ(u.state().params(), zero3 ? ParamState::kSharded : ParamState::kUnsharded);

  // init asks each rank for exactly its shard's slot runs, then publishes.
  std::vector<ShardSegment> asked;
  u.init([&](const ParamSlot& slot, std::size_t begin, std::size_t count, float* out) {
    asked.push_back(ShardSegment{l.find(slot.name), begin, 0, count});
    for (std::size_t k = 0; k < count; ++k) out[k] = param_value(0, slot.offset + begin + k);
  });
  u.finish_upload();
  const std::vector<ShardSegment> mine = l.segments(comm.shard_rank());
  EXPECT_EQ(asked.size(), mine.size());
  for (std::size_t k = 0; k < std::min(asked.size(), mine.size()); ++k) {
    EXPECT_EQ(asked[k].slot, mine[k].slot);
    EXPECT_EQ(asked[k].slot_begin, mine[k].slot_begin);
    EXPECT_EQ(asked[k].length, mine[k].length);
  }
  expect_values("master", rig.read_state(u.shard().master, S),
                [&](std::size_t k) { return offset + k < N ? param_value(0, offset + k) : 0.0f; });

  // unshard / wait_for_unshard: the concatenation of every rank's shard.
  const std::uint64_t gathered = rig.stats().all_gather_bytes;
  u.unshard();
  if (zero3) {
    EXPECT_EQ(u.state().params(), ParamState::kGathering);
    EXPECT_EQ(rig.stats().all_gather_bytes, gathered + P * psz);
  }
  rig.wait_for_unshard();
  EXPECT_EQ(u.state().params(), ParamState::kUnsharded);
  expect_params(rig, 0, "after init");
  EXPECT_EQ(rig.in_use(UnitBuffer::kUnshardedParams), zero3 ? 1 : 0);
  EXPECT_EQ(rig.in_use(UnitBuffer::kStagedShard), 0) << "the staged shard returns once its gather has read it";
  expect_values("gather_master", u.gather_master(), [](std::size_t j) { return param_value(0, j); });

  // reduce_grads(sync) + finish_reduce: this rank's slice of the dp average.
  rig.prepare_grads();
  EXPECT_EQ(u.state().grads(), GradState::kHeld);
  EXPECT_EQ(rig.in_use(UnitBuffer::kUnshardedGrads), grads_persist ? 0 : 1);
  for (const TensorView& v : rig.grads()) expect_values("prepared " + v.slot->name, read_view(rig.device(), v), zero);
  add_grads(rig, 1, rank);
  std::uint64_t reduced = reduce_bytes;
  u.reduce_grads(true);
  EXPECT_EQ(u.state().grads(), GradState::kReducing);
  u.finish_reduce();
  EXPECT_EQ(reduce_bytes, reduced + P * rsz);
  EXPECT_EQ(u.state().grads(), grads_persist ? GradState::kHeld : GradState::kNone);
  for (UnitBuffer b :
       {UnitBuffer::kUnshardedGrads, UnitBuffer::kReduceIn, UnitBuffer::kReduceOut, UnitBuffer::kGradReturn})
    EXPECT_EQ(rig.in_use(b), 0) << unit_buffer_name(b) << " still borrowed after finish_reduce";
  auto want_one = [&](std::size_t k) { return reduced_value({1}, offset + k, N, c.reduce_dtype); };
  expect_values("grad shard after one reduction", rig.read_state(u.shard().grad, S), want_one);
  if (grads_persist) {
    for (const TensorView& v : rig.grads()) expect_values("re-zeroed " + v.slot->name, read_view(rig.device(), v), zero);
  } else {
    EXPECT_TRUE(rig.grads().empty());
  }

  // A second reduction adds to the shard.
  rig.prepare_grads();
  add_grads(rig, 2, rank);
  u.reduce_grads(true);
  u.finish_reduce();
  expect_values("grad shard after two reductions", rig.read_state(u.shard().grad, S),
                [&](std::size_t k) { return want_one(k) + reduced_value({2}, offset + k, N, c.reduce_dtype); });

  // zero_grad_shard; then no-sync: the gradients stay unsharded, the shard untouched, and the next sync reduces the
  // sum of both micro-batches.
  u.zero_grad_shard();
  expect_values("zeroed grad shard", rig.read_state(u.shard().grad, S), zero);
  rig.prepare_grads();
  add_grads(rig, 3, rank);
  reduced = reduce_bytes;
  u.reduce_grads(false);
  EXPECT_EQ(u.state().grads(), GradState::kHeld);
  EXPECT_EQ(reduce_bytes, reduced) << "a no-sync reduce_grads reduced";
  EXPECT_EQ(rig.in_use(UnitBuffer::kUnshardedGrads), grads_persist ? 0 : 1);
  for (const TensorView& v : rig.grads())
    expect_values("unsharded after no-sync " + v.slot->name, read_view(rig.device(), v),
                  [&](std::size_t i) { return grad_value(3, rank, v.slot->offset + i, N); });
  expect_values("shard after no-sync", rig.read_state(u.shard().grad, S), zero);
  rig.prepare_grads();
  add_grads(rig, 4, rank);
  u.reduce_grads(true);
  u.finish_reduce();
  expect_values("grad shard after no-sync then sync", rig.read_state(u.shard().grad, S), [&](std::size_t k) {
    return reduced_value({3, 4}, offset + k, N, c.reduce_dtype);
  });

  // An update: begin_update, write the master, end_update (which publishes); the next gather (ZeRO-3) or the refresh gather (stages
  // 1-2) delivers the new values.
  u.zero_grad_shard();
  u.begin_update();
  if (zero3) {
    EXPECT_EQ(u.state().params(), ParamState::kSharded) << "begin_update keeps a stale gathered copy";
    EXPECT_EQ(rig.in_use(UnitBuffer::kUnshardedParams), 0);
  }
  std::vector<float> next(S);
  for (std::size_t k = 0; k < S; ++k) next[k] = offset + k < N ? param_value(1, offset + k) : 0.0f;
  rig.write_state(u.shard().master, next);
  const std::uint64_t before_publish = rig.stats().all_gather_bytes;
  u.end_update();
  u.finish_upload();
  EXPECT_EQ(rig.in_use(UnitBuffer::kUploadSlot), 0);
  EXPECT_EQ(u.state().shard_write(),
            zero3 && c.offload == OffloadPolicy::kNone ? ShardWrite::kOnCompute : ShardWrite::kNone);
  EXPECT_EQ(rig.stats().all_gather_bytes,
            before_publish + (!zero3 && comm.shard_size() > 1 ? P * psz : 0));  // stages 1-2 refresh
  u.unshard();
  rig.wait_for_unshard();
  expect_params(rig, 1, "after the update");
  expect_values("updated master", u.gather_master(), [](std::size_t j) { return param_value(1, j); });

  // reshard: ZeRO-3 returns the gathered slot to its pool; other stages keep their parameters.
  const int in_use = rig.in_use(UnitBuffer::kUnshardedParams);
  u.reshard();
  if (zero3) {
    EXPECT_EQ(in_use, 1);
    EXPECT_EQ(rig.in_use(UnitBuffer::kUnshardedParams), 0);
    EXPECT_EQ(u.state().params(), ParamState::kSharded);
    EXPECT_TRUE(rig.params().empty());
  } else {
    EXPECT_EQ(u.state().params(), ParamState::kUnsharded);
    EXPECT_EQ(rig.params().size(), unit_slots().size());
  }
}

std::vector<UnitCase> unit_cases() {
  std::vector<UnitCase> cases;
  for (int stage = 0; stage <= 3; ++stage)
    for (DType pdt : {DType::kF32, DType::kBF16})
      for (DType rdt : {DType::kF32, DType::kBF16})
        for (OffloadPolicy off :
             {OffloadPolicy::kNone, OffloadPolicy::kOptimizer, OffloadPolicy::kOptimizerAndParams}) {
          if (off == OffloadPolicy::kOptimizerAndParams && stage != 3) continue;  // ShardingOptions::validate
          cases.push_back(UnitCase{zero_stage_from_int(stage), pdt, rdt, off});
        }
  return cases;
}

void check_all_cases(DeviceMesh& mesh) {
  for (int stage = 0; stage <= 3; ++stage) {
    CommContext comm(mesh.device(), DataParallelGroups::of(mesh), zero_stage_from_int(stage));
    EXPECT_EQ(comm.shard_size(), stage == 0 ? 1 : mesh.shape().dp_shard() * mesh.shape().cp());
    EXPECT_EQ(comm.replica_group() != nullptr, stage != 0 && mesh.shape().dp_replicate() > 1);
    for (const UnitCase& c : unit_cases())
      if (static_cast<int>(c.stage) == stage) check_verbs(comm, c);
  }
}

TEST(ShardedUnit, EveryVerbMatchesTheReference) {
  DeviceMesh mesh(runtime(), MeshDims{1, 1, -1, 1});
  check_all_cases(mesh);
}

TEST(ShardedUnit, EveryVerbMatchesTheReferenceUnderHybridSharding) {
  const int world = runtime().world_size();
  if (world % 2 != 0) GTEST_SKIP() << "hybrid sharding with 2 replicas needs an even world";
  DeviceMesh mesh(runtime(), MeshDims{1, 2, -1, 1});
  check_all_cases(mesh);
}

// Context-parallel ranks hold the same parameters: the unit shards over dp_shard x cp and averages over dp x cp.
TEST(ShardedUnit, EveryVerbMatchesTheReferenceOverDpShardTimesCp) {
  const int world = runtime().world_size();
  if (world % 2 != 0) GTEST_SKIP() << "cp 2 needs an even world";
  DeviceMesh mesh(runtime(), MeshDims{1, 1, -1, 1, 2});
  EXPECT_EQ(DataParallelGroups::of(mesh).shard->size(), world);
  EXPECT_EQ(DataParallelGroups::of(mesh).dp->size(), world);
  check_all_cases(mesh);
}

// Under optimizer offload, end_update copies the master to the device on the upload stream. Where no gather
// follows (stage 0, or stages 1-2 with a one-rank shard group) wait_for_unshard() itself orders the compute stream
// after that copy, so the gathered views show the new values before finish_upload(). The upload stream is held busy so the copy
// is late.
TEST(ShardedUnit, WaitForUnshardOrdersAfterTheUploadWithoutAGather) {
  DeviceMesh mesh(runtime(), MeshDims{1, 1, -1, 1});
  for (int stage = 0; stage <= 3; ++stage) {
    CommContext comm(mesh.device(), DataParallelGroups::of(mesh), zero_stage_from_int(stage));
    for (DType pdt : {DType::kF32, DType::kBF16}) {
      const UnitCase c{zero_stage_from_int(stage), pdt, DType::kF32, OffloadPolicy::kOptimizer};
      SCOPED_TRACE(c.describe());
      UnitRig rig(comm, c.options());
      ShardedUnit& u = rig.unit();
      const ShardLayout& l = u.layout();
      u.init([&](const ParamSlot& slot, std::size_t begin, std::size_t count, float* out) {
        for (std::size_t k = 0; k < count; ++k) out[k] = param_value(0, slot.offset + begin + k);
      });
      u.finish_upload();
      u.unshard();
      rig.wait_for_unshard();
      u.begin_update();
      const std::size_t S = l.shard_numel(), offset = l.shard_offset(comm.shard_rank());
      std::vector<float> next(S);
      for (std::size_t k = 0; k < S; ++k) next[k] = offset + k < l.numel() ? param_value(1, offset + k) : 0.0f;
      rig.write_state(u.shard().master, next);
      rig.upload()->enqueue_host([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
      u.end_update();
      u.unshard();
      rig.wait_for_unshard();
      expect_params(rig, 1, "after wait_for_unshard, before finish_upload");
      u.finish_upload();
    }
  }
}

// ShardingOptions::validate refuses a param dtype the flat operations cannot cast to (f64), up front.
TEST(ShardedUnit, F64ParamDtypeIsRefusedByValidate) {
  ShardingOptions o;
  o.mixed_precision.param_dtype = DType::kF64;
  EXPECT_EQ(test::error_code_of([&] { o.validate(); }), ErrorCode::kInvalidArgument);
}

// ---- UnitState ------------------------------------------------------------------------------------------------------

template <typename Fn>
void expect_illegal(Fn&& fn, const std::string& from_to) {
  try {
    fn();
    ADD_FAILURE() << from_to << " was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInternal) << what;
    EXPECT_NE(what.find("unit 'u7'"), std::string::npos) << what;
    EXPECT_NE(what.find(from_to), std::string::npos) << what;
  }
}

TEST(UnitState, ParameterTransitions) {
  UnitState s("u7", ParamState::kSharded);
  expect_illegal([&] { s.to(ParamState::kUnsharded); }, "from sharded to unsharded");
  EXPECT_EQ(s.params(), ParamState::kSharded) << "a refused transition changed the state";
  expect_illegal([&] { s.to(ParamState::kSharded); }, "from sharded to sharded");
  s.to(ParamState::kGathering);
  expect_illegal([&] { s.to(ParamState::kSharded); }, "from gathering to sharded");
  expect_illegal([&] { s.to(ParamState::kGathering); }, "from gathering to gathering");
  s.to(ParamState::kUnsharded);
  expect_illegal([&] { s.to(ParamState::kUnsharded); }, "from unsharded to unsharded");
  s.to(ParamState::kGathering);  // stages 0-2: the refresh gather
  s.to(ParamState::kUnsharded);
  s.to(ParamState::kSharded);
  EXPECT_EQ(s.params(), ParamState::kSharded);
}

TEST(UnitState, GradientTransitions) {
  UnitState s("u7", ParamState::kUnsharded);
  EXPECT_EQ(s.grads(), GradState::kNone);
  expect_illegal([&] { s.to(GradState::kReducing); }, "from none to reducing");
  expect_illegal([&] { s.to(GradState::kNone); }, "from none to none");
  s.to(GradState::kHeld);
  expect_illegal([&] { s.to(GradState::kNone); }, "from held to none");
  s.to(GradState::kReducing);
  expect_illegal([&] { s.to(GradState::kReducing); }, "from reducing to reducing");
  s.to(GradState::kHeld);  // stages 0-1: the buffer persists
  s.to(GradState::kReducing);
  s.to(GradState::kNone);  // stages 2-3: it returns to its pool
  EXPECT_EQ(s.grads(), GradState::kNone);
}

// A backward without gradient sync leaves the buffer held without a transition (unit_state.h): held -> held is not one.
TEST(UnitState, NoSyncIsNotATransition) {
  UnitState s("u7", ParamState::kUnsharded);
  s.to(GradState::kHeld);
  expect_illegal([&] { s.to(GradState::kHeld); }, "from held to held");
}

TEST(UnitState, ShardWriteTransitions) {
  UnitState s("u7", ParamState::kSharded);
  expect_illegal([&] { s.to(ShardWrite::kNone); }, "from none to none");
  s.to(ShardWrite::kOnCompute);
  expect_illegal([&] { s.to(ShardWrite::kUploading); }, "from on the compute stream to uploading");
  expect_illegal([&] { s.to(ShardWrite::kOnCompute); }, "from on the compute stream to on the compute stream");
  s.to(ShardWrite::kNone);
  s.to(ShardWrite::kUploading);
  expect_illegal([&] { s.to(ShardWrite::kOnCompute); }, "from uploading to on the compute stream");
  s.to(ShardWrite::kNone);
  EXPECT_EQ(s.shard_write(), ShardWrite::kNone);
}

}  // namespace
}  // namespace strata
