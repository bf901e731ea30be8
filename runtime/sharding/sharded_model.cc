// ShardedModel: construction (declaration check, pools, units), the begin/end protocol and prefetch.
#include "runtime/sharding/sharded_model.h"

#include <cstring>

#include "core/error.h"
#include "core/hash.h"
#include "core/logging.h"
#include "core/tracer.h"
#include "runtime/bootstrap/runtime.h"
#include "runtime/sharding/flat_ops.h"

namespace strata {
namespace {

std::string describe_unit(const UnitSpec& u) {
  std::string s = u.name + "{";
  for (const SlotSpec& slot : u.slots)
    s += fmt::format("{}:{}:{}:{}:{};", slot.name, shape_string(slot.shape), slot.weight_decay, slot.trainable,
                     slot.tp.describe());
  return s + "}";
}

const char* state_name(TrainingState s) {
  switch (s) {
    case TrainingState::kIdle: return "idle";
    case TrainingState::kForward: return "forward";
    case TrainingState::kBackward: return "backward";
  }
  return "?";
}

// Collective over dp: every rank declares the same units and options (rank 0's are the reference).
void check_same_across_ranks(Device& device, Communicator& dp, const std::vector<UnitSpec>& specs,
                             const ShardingOptions& options) {
  // Each rank hashes its declaration (per unit, and the options); rank 0's is the reference.
  std::vector<std::int64_t> mine;
  mine.push_back(static_cast<std::int64_t>(fnv1a(options.describe())));
  for (const UnitSpec& u : specs) mine.push_back(static_cast<std::int64_t>(fnv1a(describe_unit(u))));
  // Exchanged through device memory (NCCL reads nothing else), copied in and out, on the compute stream.
  Stream& stream = device.compute_stream();
  const std::size_t n = static_cast<std::size_t>(dp.size());
  auto all_gather_i64 = [&](const std::vector<std::int64_t>& values) {
    Buffer send = device.allocate(values.size() * 8, MemCategory::kWorkspace);
    Buffer recv = device.allocate(n * values.size() * 8, MemCategory::kWorkspace);
    device.copy_from_host(send.data(), values.data(), values.size() * 8);
    dp.all_gather(send.data(), recv.data(), values.size(), DType::kI64, stream);
    stream.synchronize();
    std::vector<std::int64_t> out(n * values.size());
    device.copy_to_host(out.data(), recv.data(), out.size() * 8);
    return out;
  };
  const std::int64_t my_count = static_cast<std::int64_t>(mine.size());
  const std::vector<std::int64_t> counts = all_gather_i64({my_count});
  for (std::size_t r = 0; r < n; ++r)
    STRATA_CHECK_CODE(ErrorCode::kMismatch, counts[r] == my_count, "rank {} declares {} units but rank {} declares {}",
                      dp.rank(), specs.size(), r, counts[r] - 1);
  const std::vector<std::int64_t> all = all_gather_i64(mine);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    std::vector<int> differ;
    for (std::size_t r = 1; r < n; ++r)
      if (all[r * mine.size() + k] != all[k]) differ.push_back(static_cast<int>(r));
    if (differ.empty()) continue;
    std::string what = k == 0 ? fmt::format("sharding options (this rank: {})", options.describe())
                              : fmt::format("unit {} (this rank declares {})", k - 1, describe_unit(specs[k - 1]));
    STRATA_THROW(ErrorCode::kMismatch, "ranks {} declare a different {} than rank 0", fmt::join(differ, ","), what);
  }
}

}  // namespace

ShardedModel::ShardedModel(Device& device, const DataParallelGroups& groups, std::vector<UnitSpec> units,
                           const ShardingOptions& options) {
  options.validate();
  STRATA_CHECK(!units.empty(), "a model needs at least one unit");
  STRATA_CHECK(groups.dp && groups.shard && groups.replicate,
               "a sharded model needs its dp, dp_shard and dp_replicate groups (DataParallelGroups::of(mesh))");
  check_same_across_ranks(device, *groups.dp, units, options);
  const std::uint64_t in_use_before = device.memory_stats().current_total();
  try {
    resources_ = std::make_unique<ModelResources>(device, groups, units, options, in_use_before);
    build_units();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory || device.memory_budget() == 0) throw;
    throw Error(ErrorCode::kOutOfMemory, std::string(e.what()) + "\nmemory planner (Strata's own state): " +
                                             model_fit_advice(device, units, options, groups, 0, in_use_before));
  }
  logger("shard").debug("sharded model: {} units, {}; shard group {} of {}", units_.size(), options.describe(),
                       resources_->comm().shard_rank(), resources_->comm().shard_size());
}

ShardedModel::ShardedModel(DeviceMesh& mesh, std::vector<UnitSpec> units, const ShardingOptions& options)
    : ShardedModel(mesh.device(), DataParallelGroups::of(mesh), std::move(units), options) {}

ShardedModel::ShardedModel(std::unique_ptr<DeviceMesh> mesh, std::vector<UnitSpec> units,
                           const ShardingOptions& options)
    : ShardedModel(*mesh, std::move(units), options) {
  owned_mesh_ = std::move(mesh);
}

ShardedModel::ShardedModel(Runtime& runtime, std::vector<UnitSpec> units, const ShardingOptions& options)
    : ShardedModel(std::make_unique<DeviceMesh>(runtime, MeshDims{}), std::move(units), options) {}

void ShardedModel::build_units() {
  ModelResources& r = *resources_;
  const std::vector<UnitSpec>& specs = r.declaration();
  const int n = static_cast<int>(specs.size());
  for (const UnitSpec& spec : specs)
    units_.push_back(std::make_unique<ShardedUnit>(spec.name, spec.slots, r.comm(), r.options(), r.for_units(),
                                                   r.monitor().stats()));
  protocol_.resize(specs.size());
  for (int i = 0; i < n; ++i) {
    UnitProtocol& p = protocol_[static_cast<std::size_t>(i)];
    for (int k = 1; k <= r.options().prefetch_depth; ++k) {
      if (i + k < n) p.forward_prefetch.push_back(i + k);
      if (i - k >= 0) p.backward_prefetch.push_back(i - k);
    }
  }
  parameters_ = std::make_unique<ShardedParameters>(*this);
  r.device().compute_stream().synchronize();
}

ShardedModel::~ShardedModel() {
  units_.clear();  // units return their pool slots before the pools go
}

const ShardLayout& ShardedModel::layout(int i) const {
  check_unit(i, "layout");
  return units_[static_cast<std::size_t>(i)]->layout();
}

void ShardedModel::check_unit(int i, const char* call) const {
  STRATA_CHECK(i >= 0 && i < static_cast<int>(units_.size()), "{}({}): the model has units 0..{}", call, i,
               units_.size() - 1);
}

void ShardedModel::init(const SlotInit& fill) {
  for (auto& u : units_) {
    u->init(fill);
    u->finish_upload();
  }
  resources_->monitor().stats().reset();  // the initial publication is not part of a step
}

void ShardedModel::init_from_rank0(const std::function<void(const ParamSlot& slot, float* out)>& fill) {
  Communicator& dp = *resources_->groups().dp;
  Device& device = resources_->device();
  Stream& stream = device.compute_stream();
  for (auto& u : units_) {
    const ShardLayout& layout = u->layout();
    std::vector<float> host(layout.numel());
    Buffer full = device.allocate(layout.numel() * 4, MemCategory::kWorkspace);
    if (dp.rank() == 0) {
      for (const ParamSlot& s : layout.slots()) fill(s, host.data() + s.offset);
      device.copy_from_host(full.data(), host.data(), host.size() * 4);
    }
    dp.broadcast(full.data(), full.data(), layout.numel(), DType::kF32, 0, stream);
    stream.synchronize();
    device.copy_to_host(host.data(), full.data(), host.size() * 4);
    const float* values = host.data();
    u->init([values](const ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
      std::memcpy(out, values + s.offset + begin, count * 4);
    });
    u->finish_upload();
  }
  resources_->monitor().stats().reset();
}

void ShardedModel::set_forward_prefetch(int i, std::vector<int> units) {
  check_unit(i, "set_forward_prefetch");
  for (int j : units) check_unit(j, "set_forward_prefetch: prefetched unit");
  protocol_[static_cast<std::size_t>(i)].forward_prefetch = std::move(units);
}

void ShardedModel::set_backward_prefetch(int i, std::vector<int> units) {
  check_unit(i, "set_backward_prefetch");
  for (int j : units) check_unit(j, "set_backward_prefetch: prefetched unit");
  protocol_[static_cast<std::size_t>(i)].backward_prefetch = std::move(units);
}

void ShardedModel::prefetch(const std::vector<int>& units) {
  for (int j : units) units_[static_cast<std::size_t>(j)]->unshard();
}

const std::vector<TensorView>& ShardedModel::begin_forward(int i) {
  check_unit(i, "begin_forward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  UnitProtocol& p = protocol_[static_cast<std::size_t>(i)];
  STRATA_CHECK(p.state == TrainingState::kIdle, "begin_forward({}): unit '{}' is already in {}", i, u.name(),
               state_name(p.state));
  resources_->monitor().mark_start();
  p.state = TrainingState::kForward;
  u.unshard();
  prefetch(p.forward_prefetch);  // the next units' all-gathers run while this one computes
  const std::vector<TensorView>* params = nullptr;
  resources_->monitor().exposed([&] { params = &u.wait_for_unshard(); });
  resources_->monitor().count_forward(i);
  if (p.resharded) resources_->monitor().count_gather(i);
  p.resharded = false;
  p.span_start_us = Tracer::global().enabled() ? Tracer::global().now_us() : 0;
  if (Tracer::global().has_range_hooks()) Tracer::global().push_range(("forward " + u.name()).c_str());
  return *params;
}

void ShardedModel::end_forward(int i) {
  check_unit(i, "end_forward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  UnitProtocol& p = protocol_[static_cast<std::size_t>(i)];
  STRATA_CHECK(p.state == TrainingState::kForward, "end_forward({}) without begin_forward({}) (unit '{}')", i, i,
               u.name());
  Tracer::global().pop_range();
  if (Tracer::global().enabled())
    Tracer::global().complete("forward " + u.name(), "compute", "compute", p.span_start_us, Tracer::global().now_us());
  if (forward_only_) {
    STRATA_CHECK(p.forwards == 0, "a forward-only forward of unit '{}' while {} of its backwards are pending: "
                 "evaluate between steps", u.name(), p.forwards);
    u.reshard();
    p.resharded = true;
    p.state = TrainingState::kIdle;
    return;
  }
  ++p.forwards;
  if (resources_->options().reshard_after_forward) u.reshard();
  p.resharded = resources_->options().reshard_after_forward;
  p.state = TrainingState::kIdle;
}

BackwardViews ShardedModel::begin_backward(int i) {
  check_unit(i, "begin_backward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  UnitProtocol& p = protocol_[static_cast<std::size_t>(i)];
  STRATA_CHECK(p.forwards > 0,
               "begin_backward({}) before any forward of unit '{}' in this micro-batch (call begin_forward/"
               "end_forward first)",
               i, u.name());
  STRATA_CHECK(p.state == TrainingState::kIdle, "begin_backward({}): unit '{}' is still in {}", i, u.name(),
               state_name(p.state));
  resources_->monitor().mark_start();
  if (p.resharded) resources_->monitor().count_gather(i);
  p.resharded = false;
  p.state = TrainingState::kBackward;
  u.unshard();
  prefetch(p.backward_prefetch);  // backward runs in reverse unit order by default
  const std::vector<TensorView>* params = nullptr;
  const std::vector<TensorView>* grads = nullptr;
  resources_->monitor().exposed([&] {
    params = &u.wait_for_unshard();
    grads = &u.prepare_grads();  // may wait for this unit's previous reduction
  });
  p.span_start_us = Tracer::global().enabled() ? Tracer::global().now_us() : 0;
  if (Tracer::global().has_range_hooks()) Tracer::global().push_range(("backward " + u.name()).c_str());
  return BackwardViews{*params, *grads};
}

void ShardedModel::end_backward(int i) {
  check_unit(i, "end_backward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  UnitProtocol& p = protocol_[static_cast<std::size_t>(i)];
  STRATA_CHECK(p.state == TrainingState::kBackward, "end_backward({}) without begin_backward({}) (unit '{}')", i, i,
               u.name());
  Tracer::global().pop_range();
  if (Tracer::global().enabled())
    Tracer::global().complete("backward " + u.name(), "compute", "compute", p.span_start_us, Tracer::global().now_us());
  u.reduce_grads(sync_grads_);
  if (sync_grads_) resources_->monitor().count_reduction(i);
  // At most two reductions in flight: wait for the previous unit's before moving on (bounds memory).
  if (last_reduced_ >= 0 && last_reduced_ != i)
    resources_->monitor().exposed([&] { units_[static_cast<std::size_t>(last_reduced_)]->finish_reduce(); });
  last_reduced_ = sync_grads_ ? i : -1;
  if (reshard_after_backward_) u.reshard();
  p.resharded = reshard_after_backward_;
  --p.forwards;
  p.state = TrainingState::kIdle;
  if (last_backward_) {
    bool done = true;
    for (const UnitProtocol& q : protocol_) done = done && q.forwards == 0;
    if (done) finish_reductions();
  }
}

void ShardedModel::finish_reductions() {
  resources_->monitor().exposed([&] {
    for (auto& u : units_) u->finish_reduce();
  });
  last_reduced_ = -1;
}

}  // namespace strata
