// ShardedUnit: buffer plan per ZeRO stage, gathers, gradient reduction and the per-unit optimizer update.
#include "runtime/sharding/sharded_unit.h"

#include <chrono>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "runtime/sharding/flat_ops.h"

namespace strata {

StagePlan StagePlan::from(const ShardingOptions& o) {
  StagePlan p;
  p.params_sharded = o.stage == ZeroStage::kParameters;
  p.grads_persist = o.stage == ZeroStage::kNone || o.stage == ZeroStage::kOptimizerState;
  p.reduce_is_all_reduce = o.stage == ZeroStage::kNone;
  p.offload_optimizer = o.offload != OffloadPolicy::kNone;
  p.offload_params = o.offload == OffloadPolicy::kOptimizerAndParams;
  // The master aliases the f32 parameters only where the optimizer runs: on the device without offload, in host
  // memory when the parameter shards live there too (FSDP2's CPU offload).
  p.separate_master = o.mixed_precision.param_dtype != DType::kF32 || (p.offload_optimizer && !p.offload_params);
  return p;
}

namespace {
// Zeroed on the device's compute stream (the unit's constructor synchronises it before anything else reads).
Buffer zeroed(Device& dev, std::size_t bytes, MemCategory c) {
  Buffer b = dev.allocate(bytes, c);
  dev.fill_zero(b.data(), bytes, dev.compute_stream());
  return b;
}
}  // namespace

ShardedUnit::ShardedUnit(std::string name, const std::vector<SlotSpec>& slots, CommContext& comm,
                         const ShardingOptions& options, const UnitPools& pools, CommStats& stats)
    : name_(std::move(name)),
      comm_(comm),
      options_(options),
      plan_(StagePlan::from(options)),
      layout_(slots, comm.shard_size(), options.align_elements),
      param_dtype_(options.mixed_precision.param_dtype),
      reduce_dtype_(options.mixed_precision.reduce_dtype),
      pools_(pools),
      stats_(stats) {
  Device& dev = comm_.device();
  STRATA_CHECK(pools_.ops && pools_.host_ops, "unit '{}': no flat operations given", name_);
  STRATA_CHECK(!plan_.offload_optimizer || (pools_.host && pools_.upload && pools_.grad_return),
               "unit '{}': offload needs the host device, the upload stream and the host pools", name_);
  Device& state_dev = plan_.offload_optimizer ? *pools_.host : dev;  // master, gradient shard, Adam state
  Device& shard_dev = plan_.offload_params ? *pools_.host : dev;     // ZeRO-3 parameter shard
  const std::size_t S = layout_.shard_numel(), P = layout_.padded_numel(), psz = dtype_size(param_dtype_);
  if (plan_.params_sharded) {
    param_shard_ = zeroed(shard_dev, S * psz, MemCategory::kParamShard);
  } else {
    unsharded_params_.own(zeroed(dev, P * psz, MemCategory::kUnshardedParams));
    sharded_state_ = ShardedState::kUnsharded;
    make_views(param_views_, unsharded_params_.data(), param_dtype_);
  }
  if (plan_.separate_master) master_ = zeroed(state_dev, S * 4, MemCategory::kMaster);
  grad_shard_ = zeroed(state_dev, S * 4, MemCategory::kGradShard);
  exp_avg_ = zeroed(state_dev, S * 4, MemCategory::kOptimState);
  exp_avg_sq_ = zeroed(state_dev, S * 4, MemCategory::kOptimState);
  if (plan_.grads_persist) {
    unsharded_grads_.own(zeroed(dev, P * psz, MemCategory::kUnshardedGrads));
    make_views(grad_views_, unsharded_grads_.data(), param_dtype_);
  }
  unsharded_event_ = dev.create_event();
  grads_ready_event_ = dev.create_event();
  reduced_event_ = dev.create_event();
  staged_event_ = dev.create_event();
  upload_event_ = dev.create_event();
  computed_event_ = dev.create_event();
  dev.compute_stream().synchronize();  // the zero fills above, before init's copies (which no stream orders)
}

ShardedUnit::~ShardedUnit() {
  // Let queued work that refers to our buffers finish before they go (bounded; errors are reported by step()).
  try {
    if (reduce_pending_) reduced_event_->synchronize();
    if (gather_pending_) unsharded_event_->synchronize();
    if (upload_pending_) upload_event_->synchronize();
  } catch (...) {
  }
}

std::size_t ShardedUnit::master_numel() const { return layout_.shard_numel(); }

Device& ShardedUnit::state_device() { return plan_.offload_optimizer ? *pools_.host : comm_.device(); }

FlatOps& ShardedUnit::state_ops() { return plan_.offload_optimizer ? *pools_.host_ops : *pools_.ops; }

float* ShardedUnit::master() {
  if (plan_.separate_master) return master_.as<float>();
  if (plan_.params_sharded) return param_shard_.as<float>();
  return unsharded_params_.as<float>() + layout_.shard_offset(comm_.shard_rank());
}

void* ShardedUnit::param_shard_ptr() {
  if (plan_.params_sharded) return param_shard_.data();
  return unsharded_params_.as<char>() + layout_.shard_offset(comm_.shard_rank()) * dtype_size(param_dtype_);
}

std::vector<ShardSegment> ShardedUnit::master_segments() const { return layout_.segments(comm_.shard_rank()); }

void ShardedUnit::make_views(std::vector<TensorView>& views, void* base, DType dtype) {
  views.clear();
  for (const ParamSlot& s : layout_.slots())
    views.push_back(TensorView{&s, static_cast<char*>(base) + s.offset * dtype_size(dtype), dtype});
}

void ShardedUnit::time_on(Stream& stream, const std::function<void()>& enqueue_collective) {
  if (stream.device().kind() != DeviceKind::kCpu) {
    enqueue_collective();
    return;
  }
  auto start = std::make_shared<std::chrono::steady_clock::time_point>();
  stream.enqueue_host([start] { *start = std::chrono::steady_clock::now(); });
  enqueue_collective();
  CommStats* stats = &stats_;
  stream.enqueue_host([start, stats] {
    stats->comm_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - *start)
                          .count();
  });
}

void ShardedUnit::init(const SlotInit& fill) {
  // The caller fills host memory: the master itself when it is host memory, else a staging copy sent over.
  Device& dev = state_device();
  const bool in_place = dev.kind() == DeviceKind::kCpu;
  std::vector<float> staging(in_place ? 0 : master_numel());
  float* m = in_place ? master() : staging.data();
  std::memset(m, 0, master_numel() * 4);
  for (const ShardSegment& seg : master_segments())
    fill(layout_.slots()[seg.slot], seg.slot_begin, seg.length, m + seg.shard_begin);
  if (!in_place) dev.copy_from_host(master(), m, master_numel() * 4);
  publish_params();
}

void ShardedUnit::publish_params() {
  if (plan_.offload_optimizer && !plan_.offload_params) {
    // The update happened in host memory: send this rank's slice, in param dtype, to the device (DeepSpeed's
    // ZeRO-Offload casts on the host, so only param-dtype bytes cross the bus).
    const std::size_t S = master_numel(), bytes = S * dtype_size(param_dtype_);
    const void* src = master();
    if (param_dtype_ != DType::kF32) {
      upload_slot_.borrow(*pools_.param_upload);
      state_ops().convert(master(), DType::kF32, upload_slot_.data(), param_dtype_, S, state_device().compute_stream());
      src = upload_slot_.data();
    }
    Stream& up = *pools_.upload;
    comm_.device().copy(param_shard_ptr(), src, bytes, up);
    up.record(*upload_event_);
    upload_pending_ = true;
    stats_.to_device_bytes += bytes;
    if (!plan_.params_sharded && comm_.shard_size() > 1) {
      Stream& ag = comm_.all_gather_stream();
      ag.wait(*upload_event_);
      time_on(ag, [&] {
        comm_.shard_group().all_gather(param_shard_ptr(), unsharded_params_.data(), S, param_dtype_, ag);
      });
      stats_.all_gather_bytes += layout_.padded_numel() * dtype_size(param_dtype_);
      ag.record(*unsharded_event_);
      gather_pending_ = true;
    }
    return;
  }
  Stream& compute = comm_.device().compute_stream();
  if (plan_.separate_master)  // master and parameters in the same memory: the device's, or the host's (offload)
    state_ops().convert(master(), DType::kF32, param_shard_ptr(), param_dtype_, master_numel(),
                        state_device().compute_stream());
  if (plan_.params_sharded && !plan_.offload_params) {
    // The next gather reads the shard the compute stream just updated (AdamW, the cast): it waits for this.
    compute.record(*computed_event_);
    shard_updated_ = true;
  }
  if (!plan_.params_sharded && comm_.shard_size() > 1) {
    // ZeRO-1/2: every rank updated its slice of the full parameters; gather the others' slices in place.
    Stream& ag = comm_.all_gather_stream();
    compute.record(*computed_event_);
    ag.wait(*computed_event_);
    time_on(ag, [&] {
      comm_.shard_group().all_gather(param_shard_ptr(), unsharded_params_.data(), master_numel(), param_dtype_, ag);
    });
    stats_.all_gather_bytes += layout_.padded_numel() * dtype_size(param_dtype_);
    ag.record(*unsharded_event_);
    gather_pending_ = true;
  }
}

void ShardedUnit::unshard() {
  if (!plan_.params_sharded || sharded_state_ == ShardedState::kUnsharded) return;
  Stream& ag = comm_.all_gather_stream();
  const void* send = param_shard_.data();
  if (plan_.offload_params) {
    // The shard lives in host memory: copy it to the device on the upload stream, ahead of its gather.
    const std::size_t bytes = layout_.shard_numel() * dtype_size(param_dtype_);
    Stream& up = *pools_.upload;
    staged_shard_.borrow(*pools_.staged_shards, &up);  // after the gather that last read this slot
    comm_.device().copy(staged_shard_.data(), param_shard_.data(), bytes, up);
    up.record(*staged_event_);
    ag.wait(*staged_event_);
    send = staged_shard_.data();
    stats_.to_device_bytes += bytes;
  }
  if (upload_pending_) ag.wait(*upload_event_);  // the shard an update just sent up
  if (shard_updated_) {
    ag.wait(*computed_event_);
    shard_updated_ = false;
  }
  unsharded_params_.borrow(*pools_.params, &ag);  // after the compute that last read this slot
  time_on(ag, [&] {
    comm_.shard_group().all_gather(send, unsharded_params_.data(), layout_.shard_numel(), param_dtype_, ag);
  });
  stats_.all_gather_bytes += layout_.padded_numel() * dtype_size(param_dtype_);
  ag.record(*unsharded_event_);
  gather_pending_ = true;
  sharded_state_ = ShardedState::kUnsharded;
  make_views(param_views_, unsharded_params_.data(), param_dtype_);
}

void ShardedUnit::wait_for_unshard() {
  STRATA_CHECK(sharded_state_ == ShardedState::kUnsharded, "unit '{}': wait_for_unshard() before unshard()", name_);
  if (!gather_pending_) return;
  comm_.device().compute_stream().wait(*unsharded_event_);
  gather_pending_ = false;
  // The staged shard goes back to its pool; its next copy waits for this gather, which reads it.
  if (staged_shard_) staged_shard_.release(&comm_.all_gather_stream());
}

void ShardedUnit::finish_upload() {
  if (!upload_pending_) return;
  upload_pending_ = false;
  upload_event_->synchronize();
  upload_slot_.release();
}

void ShardedUnit::reshard() {
  if (!plan_.params_sharded || sharded_state_ == ShardedState::kSharded) return;
  if (gather_pending_) wait_for_unshard();
  // The slot's next gather waits for the compute enqueued so far (it may still read it on a GPU); no host wait.
  unsharded_params_.release(&comm_.device().compute_stream());
  param_views_.clear();
  sharded_state_ = ShardedState::kSharded;
}

void ShardedUnit::prepare_grads() {
  // A reduction of this unit's previous micro-batch may still read (and then zero or free) the buffer.
  finish_reduce();
  if (unsharded_grads_) return;
  unsharded_grads_.borrow(*pools_.grads);
  comm_.device().fill_zero(unsharded_grads_.data(), layout_.padded_numel() * dtype_size(param_dtype_),
                           comm_.device().compute_stream());
  make_views(grad_views_, unsharded_grads_.data(), param_dtype_);
}

void ShardedUnit::reduce_grads(bool sync) {
  STRATA_CHECK(static_cast<bool>(unsharded_grads_),
               "unit '{}': reduce_grads() before its gradients were prepared (call begin_backward first)", name_);
  if (!sync) return;  // no-sync accumulation: gradients stay unsharded until the last micro-batch
  finish_reduce();
  Device& dev = comm_.device();
  Stream& rs = comm_.reduce_scatter_stream();
  const std::size_t S = layout_.shard_numel(), P = layout_.padded_numel(), rsz = dtype_size(reduce_dtype_);
  dev.compute_stream().record(*grads_ready_event_);
  rs.wait(*grads_ready_event_);

  const void* src = unsharded_grads_.data();
  if (reduce_dtype_ != param_dtype_) {
    reduce_in_.borrow(*pools_.reduce_in);
    pools_.ops->convert(unsharded_grads_.data(), param_dtype_, reduce_in_.data(), reduce_dtype_, P, rs);
    src = reduce_in_.data();
  }
  reduce_out_.borrow(*pools_.reduce_out);
  time_on(rs, [&] {
    if (plan_.reduce_is_all_reduce) {
      comm_.world().all_reduce(src, reduce_out_.data(), S, reduce_dtype_, ReduceOp::kAvg, rs);
    } else {
      comm_.shard_group().reduce_scatter(src, reduce_out_.data(), S, reduce_dtype_, ReduceOp::kAvg, rs);
      if (Communicator* replicas = comm_.replica_group())
        replicas->all_reduce(reduce_out_.data(), reduce_out_.data(), S, reduce_dtype_, ReduceOp::kAvg, rs);
    }
  });
  (plan_.reduce_is_all_reduce ? stats_.all_reduce_bytes : stats_.reduce_scatter_bytes) += P * rsz;
  if (plan_.offload_optimizer) {
    // The gradient shard lives in host memory: copy the reduced shard down, then accumulate on the host.
    grad_return_.borrow(*pools_.grad_return);
    dev.copy(grad_return_.data(), reduce_out_.data(), S * rsz, rs);
    pools_.host_ops->accumulate_f32(grad_shard_.as<float>(), grad_return_.data(), reduce_dtype_, S, rs);
    stats_.to_host_bytes += S * rsz;
  } else {
    pools_.ops->accumulate_f32(grad_shard_.as<float>(), reduce_out_.data(), reduce_dtype_, S, rs);
  }
  if (plan_.grads_persist) dev.fill_zero(unsharded_grads_.data(), P * dtype_size(param_dtype_), rs);
  rs.record(*reduced_event_);
  reduce_pending_ = true;
}

void ShardedUnit::finish_reduce() {
  if (!reduce_pending_) return;
  reduce_pending_ = false;
  reduced_event_->synchronize();
  reduce_in_.release();
  reduce_out_.release();
  grad_return_.release();
  if (!plan_.grads_persist) {
    unsharded_grads_.release();
    grad_views_.clear();
  }
}

void ShardedUnit::add_grad_sum_squares(double* out) {
  const float* g = grad_shard_.as<float>();
  for (const ShardSegment& seg : master_segments()) {
    if (layout_.slots()[seg.slot].trainable)
      state_ops().add_sum_squares(g + seg.shard_begin, seg.length, out, state_device().compute_stream());
  }
}

void ShardedUnit::scale_grads(float factor) {
  state_ops().scale_f32(grad_shard_.as<float>(), master_numel(), factor, state_device().compute_stream());
}

void ShardedUnit::zero_grad_shard() {
  Device& dev = state_device();
  dev.fill_zero(grad_shard_.data(), grad_shard_.bytes(), dev.compute_stream());
}

void ShardedUnit::adamw_step(const AdamWConfig& cfg, double lr, std::int64_t t) {
  finish_upload();  // the previous update's copy may still read the master
  if (gather_pending_) {  // a refresh gather may still be sending this rank's slice
    unsharded_event_->synchronize();
    gather_pending_ = false;
  }
  float* p = master();
  const float* g = grad_shard_.as<float>();
  float* m = exp_avg_.as<float>();
  float* v = exp_avg_sq_.as<float>();
  for (const ShardSegment& seg : master_segments()) {
    const ParamSlot& slot = layout_.slots()[seg.slot];
    if (!slot.trainable) continue;
    std::size_t o = seg.shard_begin;
    state_ops().adamw(p + o, g + o, m + o, v + o, seg.length, cfg, lr, t, slot.weight_decay,
                      state_device().compute_stream());
  }
}

std::vector<float> ShardedUnit::gather_master() {
  const std::size_t S = layout_.shard_numel(), P = layout_.padded_numel();
  std::vector<float> out(P);
  Device& dev = comm_.device();
  dev.compute_stream().synchronize();  // the last update
  if (comm_.shard_size() == 1) {
    state_device().copy_to_host(out.data(), master(), P * 4);
  } else {
    // Through the communicator's device memory (the master may be host memory under offload).
    Buffer send = dev.allocate(S * 4, MemCategory::kWorkspace);
    Buffer full = dev.allocate(P * 4, MemCategory::kWorkspace);
    Stream& ag = comm_.all_gather_stream();
    dev.copy(send.data(), master(), S * 4, ag);
    comm_.shard_group().all_gather(send.data(), full.data(), S, DType::kF32, ag);
    ag.synchronize();
    dev.copy_to_host(out.data(), full.data(), P * 4);
  }
  out.resize(layout_.numel());
  return out;
}

}  // namespace strata
