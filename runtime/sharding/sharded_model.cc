// ShardedModel: unit bookkeeping, the begin/end protocol, cross-rank declaration checks, and the step.
#include "runtime/sharding/sharded_model.h"

#include <cmath>
#include <cstring>

#include "runtime/bootstrap/runtime.h"
#include "core/device_registry.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/tracer.h"
#include "runtime/sharding/flat_ops.h"
#include "runtime/sharding/state_memory.h"

namespace strata {
namespace {

std::uint64_t fnv1a(const std::string& text, std::uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string describe_unit(const UnitSpec& u) {
  std::string s = u.name + "{";
  for (const SlotSpec& slot : u.slots)
    s += fmt::format("{}:{}:{}:{};", slot.name, shape_string(slot.shape), slot.weight_decay, slot.trainable);
  return s + "}";
}

std::string state_fit_advice(const std::vector<UnitSpec>& specs, const ShardingOptions& o, int world, int local_size,
                             std::uint64_t budget) {
  auto size = [](std::uint64_t x) {
    if (x >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(x) / (1024.0 * 1024.0));
    if (x >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(x) / 1024.0);
    return fmt::format("{} bytes", x);
  };
  auto bytes = [&](const ShardingOptions& c) { return total(predict_state_memory(specs, c, world, local_size).device); };
  const std::uint64_t now = bytes(o);
  struct Change {
    const char* what;
    ZeroStage stage;
    OffloadPolicy offload;
  };
  // strata-plan's order (fit_changes), without what is the trainer's to change (recomputation).
  const Change changes[] = {{"shard parameters too (ZeRO stage 3)", ZeroStage::kParameters, o.offload},
                            {"offload the optimizer to host memory", o.stage, OffloadPolicy::kOptimizer},
                            {"ZeRO stage 3 and optimizer offload", ZeroStage::kParameters, OffloadPolicy::kOptimizer},
                            {"ZeRO stage 3 and optimizer and parameter offload", ZeroStage::kParameters,
                             OffloadPolicy::kOptimizerAndParams}};
  for (const Change& c : changes) {
    if (c.stage == o.stage && c.offload == o.offload) continue;
    if (c.offload == OffloadPolicy::kOptimizerAndParams && c.stage != ZeroStage::kParameters) continue;
    ShardingOptions t = o;
    t.stage = c.stage;
    t.offload = c.offload;
    const std::uint64_t need = bytes(t);
    if (need <= budget)
      return fmt::format("needs {} per rank against the {} the budget left it; the "
                         "cheapest change that fits: {} ({}, before your activations)",
                         size(now), size(budget), c.what, size(need));
  }
  return fmt::format("needs {} per rank against the {} the budget left it, and no change "
                     "of ZeRO stage or offload fits: use more ranks or more memory",
                     size(now), size(budget));
}

}  // namespace

ShardedModel::ShardedModel(Device& device, Communicator& world, int local_size, std::vector<UnitSpec> units,
                           const ShardingOptions& options, const AdamWConfig& adamw)
    : device_(device),
      world_(world),
      options_(options),
      adamw_(adamw),
      specs_(std::move(units)),
      scaler_(options.dynamic_loss_scale, options.initial_loss_scale, options.loss_scale_window) {
  options_.validate(world.size(), local_size);
  adamw_.validate();
  STRATA_CHECK(!specs_.empty(), "a model needs at least one unit");
  check_same_across_ranks();
  const std::uint64_t in_use = device.memory_stats().current_total();
  try {
    build(local_size);
  } catch (const Error& e) {
    const std::uint64_t budget = device.memory_budget();
    if (e.code() != ErrorCode::kOutOfMemory || budget == 0) throw;
    throw Error(ErrorCode::kOutOfMemory,
                std::string(e.what()) + "\nmemory planner (Strata's own state): " +
                    state_fit_advice(specs_, options_, world.size(), local_size, budget > in_use ? budget - in_use : 0));
  }
  logger("shard").info("sharded model: {} units, {}; shard group {} of {}", units_.size(), options_.describe(),
                       comm_->shard_rank(), comm_->shard_size());
}

void ShardedModel::build(int local_size) {
  Device& device = device_;
  comm_ = std::make_unique<CommContext>(device, world_, options_, local_size);
  // The pools hold slots of the largest unit: gathered parameters (prefetch depth + 1 in flight), unsharded
  // gradients (one computing, one reducing), and the reduction's staging. See docs/notes/prefetch.md.
  std::size_t max_padded = 0, max_shard = 0;
  for (const UnitSpec& spec : specs_) {
    ShardLayout l(spec.slots, comm_->shard_size(), options_.align_elements);
    max_padded = std::max(max_padded, l.padded_numel());
    max_shard = std::max(max_shard, l.shard_numel());
  }
  const std::size_t psz = dtype_size(options_.mixed_precision.param_dtype);
  const std::size_t rsz = dtype_size(options_.mixed_precision.reduce_dtype);
  const StagePlan plan = StagePlan::from(options_);
  const bool convert = options_.mixed_precision.reduce_dtype != options_.mixed_precision.param_dtype;
  params_pool_ = std::make_unique<BufferPool>(device, "gathered parameters", MemCategory::kUnshardedParams,
                                              max_padded * psz, plan.params_sharded ? options_.prefetch_depth + 1 : 0);
  grads_pool_ = std::make_unique<BufferPool>(device, "unsharded gradients", MemCategory::kUnshardedGrads,
                                             max_padded * psz, plan.grads_persist ? 0 : 2);
  reduce_in_pool_ = std::make_unique<BufferPool>(device, "reduce input", MemCategory::kCommBuffer, max_padded * rsz,
                                                 convert ? 2 : 0);
  reduce_out_pool_ =
      std::make_unique<BufferPool>(device, "reduce output", MemCategory::kCommBuffer, max_shard * rsz, 2);
  ops_ = create_flat_ops(device);
  host_ops_ = create_host_flat_ops();
  UnitPools pools{params_pool_.get(), grads_pool_.get(), reduce_in_pool_.get(), reduce_out_pool_.get(), ops_.get(),
                  host_ops_.get()};
  if (plan.offload_optimizer) {
    // Host memory gets its own Device, so its ledger is separate from the device's (on the CPU backend too).
    host_ = create_host_device(device);
    upload_stream_ = device.create_stream("upload");
    // Staged shards: one per gather in flight. Gradient landing slots: one per reduction in flight. Upload
    // slots: the step pipelines one unit's copy under the next unit's update.
    staged_shards_pool_ = std::make_unique<BufferPool>(device, "staged parameter shards", MemCategory::kParamShard,
                                                       max_shard * psz,
                                                       plan.offload_params ? options_.prefetch_depth + 1 : 0);
    grad_return_pool_ =
        std::make_unique<BufferPool>(*host_, "returned gradient shards", MemCategory::kCommBuffer, max_shard * rsz, 2);
    param_upload_pool_ = std::make_unique<BufferPool>(
        *host_, "parameter upload", MemCategory::kCommBuffer, max_shard * psz,
        !plan.offload_params && options_.mixed_precision.param_dtype != DType::kF32 ? 2 : 0);
    pools.host = host_.get();
    pools.upload = upload_stream_.get();
    pools.staged_shards = staged_shards_pool_.get();
    pools.grad_return = grad_return_pool_.get();
    pools.param_upload = param_upload_pool_.get();
  }
  for (const UnitSpec& spec : specs_)
    units_.push_back(std::make_unique<ShardedUnit>(spec.name, spec.slots, *comm_, options_, pools, stats_));
  forward_done_.assign(units_.size(), false);
  span_start_us_.assign(units_.size(), 0);
  norm_buffer_ = device.allocate(8, MemCategory::kWorkspace);
  norm_event_ = device.create_event();
  device.compute_stream().synchronize();
}

ShardedModel::ShardedModel(Runtime& runtime, std::vector<UnitSpec> units, const ShardingOptions& options,
                           const AdamWConfig& adamw)
    : ShardedModel(runtime.device(), runtime.world(), runtime.local_size(), std::move(units), options, adamw) {}

ShardedModel::~ShardedModel() {
  units_.clear();  // units return their pool slots before the pools go
}

int ShardedModel::pool_allocations() const {
  int n = params_pool_->allocations() + grads_pool_->allocations() + reduce_in_pool_->allocations() +
          reduce_out_pool_->allocations();
  if (host_)
    n += staged_shards_pool_->allocations() + grad_return_pool_->allocations() + param_upload_pool_->allocations();
  return n;
}

std::string StepSummary::describe() const {
  auto mib = [](std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  return fmt::format(
      "step {}: {:.1f} ms (compute {:.1f}, communication {:.1f}, exposed {:.1f} = {:.1f}%); moved all_gather "
      "{:.2f} MiB (predicted {:.2f}), reduce_scatter {:.2f} MiB ({:.2f}), all_reduce {:.2f} MiB ({:.2f})",
      step, step_ms, compute_ms, comm_ms, exposed_comm_ms, step_ms > 0 ? 100.0 * exposed_comm_ms / step_ms : 0.0,
      mib(all_gather_bytes), mib(predicted_all_gather_bytes), mib(reduce_scatter_bytes),
      mib(predicted_reduce_scatter_bytes), mib(all_reduce_bytes), mib(predicted_all_reduce_bytes)) +
         (to_device_bytes + to_host_bytes
              ? fmt::format("; offload copies {:.2f} MiB to the device, {:.2f} MiB to the host", mib(to_device_bytes),
                            mib(to_host_bytes))
              : std::string());
}

void ShardedModel::mark_step_start() {
  if (step_started_) return;
  step_started_ = true;
  step_start_ = std::chrono::steady_clock::now();
}

template <typename Fn>
void ShardedModel::exposed(Fn&& fn) {
  auto t0 = std::chrono::steady_clock::now();
  std::int64_t trace_start = Tracer::global().enabled() ? Tracer::global().now_us() : 0;
  fn();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  exposed_ms_ += ms;
  if (Tracer::global().enabled() && ms > 0.01)
    Tracer::global().complete("wait (exposed communication)", "wait", "compute", trace_start, Tracer::global().now_us());
}

void ShardedModel::prefetch(int i, int direction) {
  for (int k = 1; k <= options_.prefetch_depth; ++k) {
    int j = i + direction * k;
    if (j < 0 || j >= num_units()) break;
    units_[static_cast<std::size_t>(j)]->unshard();
  }
}

void ShardedModel::check_same_across_ranks() {
  // Each rank hashes its declaration (per unit, and the options); rank 0's is the reference.
  std::vector<std::int64_t> mine;
  mine.push_back(static_cast<std::int64_t>(fnv1a(options_.describe())));
  for (const UnitSpec& u : specs_) mine.push_back(static_cast<std::int64_t>(fnv1a(describe_unit(u))));
  // Exchanged through device memory (NCCL reads nothing else), copied in and out.
  auto stream = device_.create_stream("model_check");
  std::size_t n = static_cast<std::size_t>(world_.size());
  auto all_gather_i64 = [&](const std::vector<std::int64_t>& values) {
    Buffer send = device_.allocate(values.size() * 8, MemCategory::kWorkspace);
    Buffer recv = device_.allocate(n * values.size() * 8, MemCategory::kWorkspace);
    device_.copy_from_host(send.data(), values.data(), values.size() * 8);
    world_.all_gather(send.data(), recv.data(), values.size(), DType::kI64, *stream);
    stream->synchronize();
    std::vector<std::int64_t> out(n * values.size());
    device_.copy_to_host(out.data(), recv.data(), out.size() * 8);
    return out;
  };
  const std::int64_t my_count = static_cast<std::int64_t>(mine.size());
  const std::vector<std::int64_t> counts = all_gather_i64({my_count});
  for (std::size_t r = 0; r < n; ++r)
    STRATA_CHECK_CODE(ErrorCode::kMismatch, counts[r] == my_count, "rank {} declares {} units but rank {} declares {}",
                      world_.rank(), specs_.size(), r, counts[r] - 1);
  const std::vector<std::int64_t> all = all_gather_i64(mine);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    std::vector<int> differ;
    for (std::size_t r = 1; r < n; ++r)
      if (all[r * mine.size() + k] != all[k]) differ.push_back(static_cast<int>(r));
    if (differ.empty()) continue;
    std::string what = k == 0 ? fmt::format("sharding options (this rank: {})", options_.describe())
                              : fmt::format("unit {} (this rank declares {})", k - 1, describe_unit(specs_[k - 1]));
    STRATA_THROW(ErrorCode::kMismatch, "ranks {} declare a different {} than rank 0", fmt::join(differ, ","), what);
  }
}

ShardedUnit& ShardedModel::unit(int i) {
  check_unit(i, "unit");
  return *units_[static_cast<std::size_t>(i)];
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
  stats_.reset();  // the initial publication is not part of a step
}

void ShardedModel::init_from_rank0(const std::function<void(const ParamSlot& slot, float* out)>& fill) {
  auto stream = device_.create_stream("init_broadcast");
  for (auto& u : units_) {
    const ShardLayout& layout = u->layout();
    std::vector<float> host(layout.numel());
    Buffer full = device_.allocate(layout.numel() * 4, MemCategory::kWorkspace);
    if (world_.rank() == 0) {
      for (const ParamSlot& s : layout.slots()) fill(s, host.data() + s.offset);
      device_.copy_from_host(full.data(), host.data(), host.size() * 4);
    }
    world_.broadcast(full.data(), full.data(), layout.numel(), DType::kF32, 0, *stream);
    stream->synchronize();
    device_.copy_to_host(host.data(), full.data(), host.size() * 4);
    const float* values = host.data();
    u->init([values](const ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
      std::memcpy(out, values + s.offset + begin, count * 4);
    });
    u->finish_upload();
  }
  stats_.reset();
}

void ShardedModel::begin_micro_batch(int index, int count) {
  STRATA_CHECK(count >= 1 && index >= 0 && index < count, "micro-batch {} of {} does not exist", index, count);
  micro_batches_ = count;
  sync_grads_ = options_.grad_accumulation == GradAccumulation::kReduceEveryMicroBatch || index == count - 1;
}

const std::vector<TensorView>& ShardedModel::begin_forward(int i) {
  check_unit(i, "begin_forward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  STRATA_CHECK(u.training_state() == TrainingState::kIdle, "begin_forward({}): unit '{}' is already in {}", i,
               u.name(), u.training_state() == TrainingState::kForward ? "forward" : "backward");
  mark_step_start();
  u.set_training_state(TrainingState::kForward);
  u.unshard();
  prefetch(i, +1);  // the next units' all-gathers run while this one computes
  exposed([&] { u.wait_for_unshard(); });
  span_start_us_[static_cast<std::size_t>(i)] = Tracer::global().enabled() ? Tracer::global().now_us() : 0;
  if (Tracer::global().has_range_hooks()) Tracer::global().push_range(("forward " + u.name()).c_str());
  return u.params();
}

void ShardedModel::end_forward(int i) {
  check_unit(i, "end_forward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  STRATA_CHECK(u.training_state() == TrainingState::kForward, "end_forward({}) without begin_forward({}) (unit '{}')",
               i, i, u.name());
  forward_done_[static_cast<std::size_t>(i)] = true;
  Tracer::global().pop_range();
  if (Tracer::global().enabled())
    Tracer::global().complete("forward " + u.name(), "compute", "compute", span_start_us_[static_cast<std::size_t>(i)],
                              Tracer::global().now_us());
  if (options_.reshard_after_forward) u.reshard();
  u.set_training_state(TrainingState::kIdle);
}

BackwardViews ShardedModel::begin_backward(int i) {
  check_unit(i, "begin_backward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  STRATA_CHECK(forward_done_[static_cast<std::size_t>(i)],
               "begin_backward({}) before any forward of unit '{}' in this micro-batch (call begin_forward/"
               "end_forward first)",
               i, u.name());
  STRATA_CHECK(u.training_state() == TrainingState::kIdle, "begin_backward({}): unit '{}' is still in forward", i,
               u.name());
  mark_step_start();
  u.set_training_state(TrainingState::kBackward);
  u.unshard();
  prefetch(i, -1);  // backward runs in reverse unit order
  exposed([&] {
    u.wait_for_unshard();
    u.prepare_grads();  // may wait for this unit's previous reduction
  });
  span_start_us_[static_cast<std::size_t>(i)] = Tracer::global().enabled() ? Tracer::global().now_us() : 0;
  if (Tracer::global().has_range_hooks()) Tracer::global().push_range(("backward " + u.name()).c_str());
  return BackwardViews{u.params(), u.grads()};
}

void ShardedModel::end_backward(int i) {
  check_unit(i, "end_backward");
  ShardedUnit& u = *units_[static_cast<std::size_t>(i)];
  STRATA_CHECK(u.training_state() == TrainingState::kBackward,
               "end_backward({}) without begin_backward({}) (unit '{}')", i, i, u.name());
  Tracer::global().pop_range();
  if (Tracer::global().enabled())
    Tracer::global().complete("backward " + u.name(), "compute", "compute", span_start_us_[static_cast<std::size_t>(i)],
                              Tracer::global().now_us());
  u.reduce_grads(sync_grads_);
  // At most two reductions in flight: wait for the previous unit's before moving on (bounds memory).
  if (last_reduced_ >= 0 && last_reduced_ != i)
    exposed([&] { units_[static_cast<std::size_t>(last_reduced_)]->finish_reduce(); });
  last_reduced_ = sync_grads_ ? i : -1;
  u.reshard();
  forward_done_[static_cast<std::size_t>(i)] = false;
  u.set_training_state(TrainingState::kIdle);
}

StepResult ShardedModel::step(double lr) {
  mark_step_start();
  for (auto& u : units_)
    STRATA_CHECK(u->training_state() == TrainingState::kIdle, "step() while unit '{}' is still in {}", u->name(),
                 u->training_state() == TrainingState::kForward ? "forward" : "backward");
  exposed([&] {
    for (auto& u : units_) u->finish_reduce();
  });
  last_reduced_ = -1;
  TraceSpan span("optimizer step", "optim", "compute");

  // This rank's sum of squares, in the memory that holds the gradient shards: a host double under offload, else
  // the device's norm buffer (kernels on the compute stream); then summed over the shard group.
  Stream& compute = device_.compute_stream();
  double* norm = norm_buffer_.as<double>();
  if (StagePlan::from(options_).offload_optimizer) {
    double local = 0;
    for (auto& u : units_) u->add_grad_sum_squares(&local);
    device_.copy_from_host(norm, &local, 8);
  } else {
    device_.fill_zero(norm, 8, compute);
    for (auto& u : units_) u->add_grad_sum_squares(norm);
  }
  if (comm_->shard_size() > 1) {
    Stream& s = comm_->reduce_scatter_stream();
    compute.record(*norm_event_);
    s.wait(*norm_event_);
    comm_->shard_group().all_reduce(norm, norm, 1, DType::kF64, ReduceOp::kSum, s);
    exposed([&] { s.synchronize(); });
  } else {
    compute.synchronize();
  }
  double total = 0;
  device_.copy_to_host(&total, norm, 8);
  const double inv_scale = 1.0 / scaler_.scale();
  StepResult r;
  r.grad_norm = std::sqrt(total) * inv_scale;
  sync_grads_ = true;
  if (!std::isfinite(total)) {
    for (auto& u : units_) u->zero_grad_shard();
    scaler_.update(true);
    r.skipped = true;
    r.step = step_;
    r.loss_scale = scaler_.scale();
    logger("optim").warn("step {} skipped on every rank: non-finite gradients (norm {}); loss scale now {}", step_ + 1,
                         r.grad_norm, r.loss_scale);
    skipped_last_ = true;
    finish_summary();
    return r;
  }
  double coef = inv_scale;
  if (options_.grad_clip > 0) coef *= std::min(1.0, options_.grad_clip / (r.grad_norm + 1e-6));
  if (coef != 1.0)
    for (auto& u : units_) u->scale_grads(static_cast<float>(coef));
  ++step_;
  // Under offload, unit k's copy to the device runs while unit k+1 updates (at most two copies in flight).
  for (std::size_t k = 0; k < units_.size(); ++k) {
    units_[k]->adamw_step(adamw_, lr, step_);
    units_[k]->zero_grad_shard();
    units_[k]->publish_params();
    if (k > 0) units_[k - 1]->finish_upload();
  }
  exposed([&] { units_.back()->finish_upload(); });
  scaler_.update(false);
  r.step = step_;
  r.loss_scale = scaler_.scale();
  skipped_last_ = false;
  finish_summary();
  return r;
}

std::vector<float> ShardedModel::gather_unit(int i) { return unit(i).gather_master(); }

void ShardedModel::finish_summary() {
  StepSummary s;
  s.step = step_;
  s.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_).count();
  // Collectives are timed by host tasks around them on the CPU's stream threads; CUDA streams are not timed yet.
  // Nor is exposed time on CUDA: there the host's waits also cover the GPU's compute queued before them (seen on
  // an H200: "exposed" 57% of a one-rank step that has no communication to wait for).
  const bool timed = device_.kind() == DeviceKind::kCpu;
  s.exposed_comm_ms = timed ? exposed_ms_ : std::nan("");
  s.compute_ms = s.step_ms - s.exposed_comm_ms;
  s.comm_ms = timed ? static_cast<double>(stats_.comm_ns.load()) / 1e6 : std::nan("");
  s.all_gather_bytes = stats_.all_gather_bytes;
  s.reduce_scatter_bytes = stats_.reduce_scatter_bytes;
  s.all_reduce_bytes = stats_.all_reduce_bytes;
  s.to_device_bytes = stats_.to_device_bytes;
  s.to_host_bytes = stats_.to_host_bytes;
  // The layout's prediction: per micro-batch, ZeRO-3 gathers every unit for forward and again for backward (once
  // when parameters stay gathered after forward); stages 1-2 gather once per step after the update; gradients are
  // reduced once per micro-batch (once per step under no-sync).
  const StagePlan plan = StagePlan::from(options_);
  const std::uint64_t psz = dtype_size(options_.mixed_precision.param_dtype);
  const std::uint64_t rsz = dtype_size(options_.mixed_precision.reduce_dtype);
  std::uint64_t padded = 0;
  for (auto& u : units_) padded += u->layout().padded_numel();
  const std::uint64_t reductions =
      options_.grad_accumulation == GradAccumulation::kNoSync ? 1 : static_cast<std::uint64_t>(micro_batches_);
  if (plan.params_sharded)
    s.predicted_all_gather_bytes = (options_.reshard_after_forward ? 2 : 1) * micro_batches_ * padded * psz;
  else if (comm_->shard_size() > 1 && !skipped_last_)
    s.predicted_all_gather_bytes = padded * psz;
  (plan.reduce_is_all_reduce ? s.predicted_all_reduce_bytes : s.predicted_reduce_scatter_bytes) =
      reductions * padded * rsz;
  summary_ = s;
  stats_.reset();
  exposed_ms_ = 0;
  step_started_ = false;
  micro_batches_ = 1;
}

}  // namespace strata
