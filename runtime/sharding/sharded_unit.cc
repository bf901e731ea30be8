// ShardedUnit: allocation from the unit's placement, gathers, gradient reduction, publication after an update.
#include "runtime/sharding/sharded_unit.h"

#include <chrono>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "runtime/sharding/flat_ops.h"

namespace strata {

namespace {

// The resources a unit of `name` needs under `plan`, checked before anything is allocated with them.
const UnitResources& checked(const UnitResources& r, const StagePlan& plan, const std::string& name) {
  STRATA_CHECK(r.ops && r.host_ops, "unit '{}': no flat operations given", name);
  STRATA_CHECK(!plan.offload_optimizer || (r.host && r.upload),
               "unit '{}': offload needs the host device and the upload stream", name);
  return r;
}

}  // namespace

ShardedUnit::ShardedUnit(std::string name, const std::vector<SlotSpec>& slots, CommContext& comm,
                         const ShardingOptions& options, const UnitResources& resources, CommStats& stats)
    : name_(std::move(name)),
      comm_(comm),
      options_(options),
      layout_(slots, comm.shard_size(), options.align_elements),
      placement_(layout_, options),
      segments_(layout_.segments(comm.shard_rank())),
      plan_(placement_.stage()),
      param_dtype_(options.mixed_precision.param_dtype),
      reduce_dtype_(options.mixed_precision.reduce_dtype),
      resources_(checked(resources, plan_, name_)),
      stats_(stats),
      state_(name_, plan_.params_sharded ? ParamState::kSharded : ParamState::kUnsharded),
      mem_(placement_, resources_, comm.device()) {
  if (!plan_.params_sharded) make_views(param_views_, buffer(UnitBuffer::kUnshardedParams).data(), param_dtype_);
  if (plan_.grads_persist) {
    make_views(grad_views_, buffer(UnitBuffer::kUnshardedGrads).data(), param_dtype_);
    state_.to(GradState::kHeld);
  }
}

ShardedUnit::~ShardedUnit() {
  // Let queued work that refers to our buffers finish before they go (bounded; errors are reported by the step).
  try {
    if (state_.grads() == GradState::kReducing) mem_.events.reduced->synchronize();
    if (state_.params() == ParamState::kGathering) mem_.events.unsharded->synchronize();
    if (state_.shard_write() == ShardWrite::kUploading) mem_.events.upload->synchronize();
  } catch (...) {
  }
}

Device& ShardedUnit::state_device() { return plan_.offload_optimizer ? *resources_.host : comm_.device(); }

FlatOps& ShardedUnit::state_ops() { return plan_.offload_optimizer ? *resources_.host_ops : *resources_.ops; }

float* ShardedUnit::master() {
  if (plan_.separate_master) return buffer(UnitBuffer::kMaster).as<float>();
  if (plan_.params_sharded) return buffer(UnitBuffer::kParamShard).as<float>();
  return buffer(UnitBuffer::kUnshardedParams).as<float>() + layout_.shard_offset(comm_.shard_rank());
}

float* ShardedUnit::grad_shard() { return buffer(UnitBuffer::kGradShard).as<float>(); }

UnitShard ShardedUnit::shard() { return UnitShard{&layout_, master(), grad_shard(), segments_}; }

void* ShardedUnit::param_shard_ptr() {
  if (plan_.params_sharded) return buffer(UnitBuffer::kParamShard).data();
  return buffer(UnitBuffer::kUnshardedParams).as<char>() +
         layout_.shard_offset(comm_.shard_rank()) * dtype_size(param_dtype_);
}

void ShardedUnit::make_views(std::vector<TensorView>& views, void* base, DType dtype) {
  views.clear();
  for (const ParamSlot& s : layout_.slots())
    views.push_back(TensorView{&s, static_cast<char*>(base) + s.offset * dtype_size(dtype), dtype});
}

void ShardedUnit::time_on(Stream& stream, const std::function<void()>& enqueue_collective) {
  if (stats_.comm_timer == nullptr) {
    enqueue_collective();
    return;
  }
  stats_.comm_timer->span(stream, enqueue_collective);
}

void ShardedUnit::init(const SlotInit& fill) {
  // The caller fills host memory: the master itself when it is host memory, else a staging copy sent over.
  Device& dev = state_device();
  const std::size_t S = layout_.shard_numel();
  const bool in_place = dev.kind() == DeviceKind::kCpu;
  std::vector<float> staging(in_place ? 0 : S);
  float* m = in_place ? master() : staging.data();
  std::memset(m, 0, S * 4);
  for (const ShardSegment& seg : segments_)
    fill(layout_.slots()[seg.slot], seg.slot_begin, seg.length, m + seg.shard_begin);
  if (!in_place) dev.copy_from_host(master(), m, S * 4);
  publish_params();
}

void ShardedUnit::upload_params() {
  // The update happened in host memory: send this rank's slice, in param dtype, to the device (DeepSpeed's
  // ZeRO-Offload casts on the host, so only param-dtype bytes cross the bus).
  const std::size_t S = layout_.shard_numel(), bytes = S * dtype_size(param_dtype_);
  const void* src = master();
  if (param_dtype_ != DType::kF32) {
    PooledBuffer& slot = buffer(UnitBuffer::kUploadSlot);
    slot.borrow(resources_.pool(UnitBuffer::kUploadSlot));
    state_ops().convert(master(), DType::kF32, slot.data(), param_dtype_, S, state_device().compute_stream());
    src = slot.data();
  }
  Stream& up = *resources_.upload;
  comm_.device().copy(param_shard_ptr(), src, bytes, up);
  up.record(*mem_.events.upload);
  state_.to(ShardWrite::kUploading);
  stats_.to_device_bytes += bytes;
  if (!plan_.params_sharded && comm_.shard_size() > 1) {
    Stream& ag = comm_.all_gather_stream();
    ag.wait(*mem_.events.upload);
    time_on(ag, [&] {
      comm_.shard_group().all_gather(param_shard_ptr(), buffer(UnitBuffer::kUnshardedParams).data(), S, param_dtype_,
                                     ag);
    });
    stats_.all_gather_bytes += layout_.padded_numel() * dtype_size(param_dtype_);
    ag.record(*mem_.events.unsharded);
    if (state_.params() != ParamState::kGathering) state_.to(ParamState::kGathering);
  }
}

void ShardedUnit::publish_params() {
  if (plan_.offload_optimizer && !plan_.offload_params) {
    upload_params();
    return;
  }
  Stream& compute = comm_.device().compute_stream();
  if (plan_.separate_master)  // master and parameters in the same memory: the device's, or the host's (offload)
    state_ops().convert(master(), DType::kF32, param_shard_ptr(), param_dtype_, layout_.shard_numel(),
                        state_device().compute_stream());
  if (plan_.params_sharded && !plan_.offload_params) {
    // The next gather reads the shard the compute stream just updated (the update, the cast): it waits for this.
    compute.record(*mem_.events.computed);
    if (state_.shard_write() != ShardWrite::kOnCompute) state_.to(ShardWrite::kOnCompute);
  }
  if (!plan_.params_sharded && comm_.shard_size() > 1) {
    // ZeRO-1/2: every rank updated its slice of the full parameters; gather the others' slices in place.
    Stream& ag = comm_.all_gather_stream();
    compute.record(*mem_.events.computed);
    ag.wait(*mem_.events.computed);
    time_on(ag, [&] {
      comm_.shard_group().all_gather(param_shard_ptr(), buffer(UnitBuffer::kUnshardedParams).data(),
                                     layout_.shard_numel(), param_dtype_, ag);
    });
    stats_.all_gather_bytes += layout_.padded_numel() * dtype_size(param_dtype_);
    ag.record(*mem_.events.unsharded);
    if (state_.params() != ParamState::kGathering) state_.to(ParamState::kGathering);
  }
}

void ShardedUnit::unshard() {
  if (!plan_.params_sharded || state_.params() != ParamState::kSharded) return;
  Stream& ag = comm_.all_gather_stream();
  const void* send = buffer(UnitBuffer::kParamShard).data();
  if (plan_.offload_params) {
    // The shard lives in host memory: copy it to the device on the upload stream, ahead of its gather.
    const std::size_t bytes = layout_.shard_numel() * dtype_size(param_dtype_);
    Stream& up = *resources_.upload;
    PooledBuffer& staged = buffer(UnitBuffer::kStagedShard);
    staged.borrow(resources_.pool(UnitBuffer::kStagedShard), &up);  // after the gather that last read this slot
    comm_.device().copy(staged.data(), send, bytes, up);
    up.record(*mem_.events.staged);
    ag.wait(*mem_.events.staged);
    send = staged.data();
    stats_.to_device_bytes += bytes;
  }
  switch (state_.shard_write()) {
    case ShardWrite::kUploading: ag.wait(*mem_.events.upload); break;  // the shard an update just sent up
    case ShardWrite::kOnCompute:
      ag.wait(*mem_.events.computed);
      state_.to(ShardWrite::kNone);
      break;
    case ShardWrite::kNone: break;
  }
  PooledBuffer& gathered = buffer(UnitBuffer::kUnshardedParams);
  gathered.borrow(resources_.pool(UnitBuffer::kUnshardedParams), &ag);  // after the compute that last read the slot
  time_on(ag, [&] {
    comm_.shard_group().all_gather(send, gathered.data(), layout_.shard_numel(), param_dtype_, ag);
  });
  stats_.all_gather_bytes += layout_.padded_numel() * dtype_size(param_dtype_);
  ag.record(*mem_.events.unsharded);
  state_.to(ParamState::kGathering);
  make_views(param_views_, gathered.data(), param_dtype_);
}

const std::vector<TensorView>& ShardedUnit::wait_for_unshard() {
  STRATA_CHECK(state_.params() != ParamState::kSharded, "unit '{}': wait_for_unshard() before unshard()", name_);
  // An update's copy to the device that no gather follows (offload with a one-rank shard group): the compute stream
  // reads what it writes.
  if (state_.shard_write() == ShardWrite::kUploading) comm_.device().compute_stream().wait(*mem_.events.upload);
  if (state_.params() != ParamState::kGathering) return param_views_;
  comm_.device().compute_stream().wait(*mem_.events.unsharded);
  state_.to(ParamState::kUnsharded);
  // The staged shard goes back to its pool; its next copy waits for this gather, which reads it.
  PooledBuffer& staged = buffer(UnitBuffer::kStagedShard);
  if (staged) staged.release(&comm_.all_gather_stream());
  return param_views_;
}

void ShardedUnit::finish_upload() {
  if (state_.shard_write() != ShardWrite::kUploading) return;
  mem_.events.upload->synchronize();
  state_.to(ShardWrite::kNone);
  buffer(UnitBuffer::kUploadSlot).release();
}

void ShardedUnit::reshard() {
  if (!plan_.params_sharded || state_.params() == ParamState::kSharded) return;
  if (state_.params() == ParamState::kGathering) wait_for_unshard();
  // The slot's next gather waits for the compute enqueued so far (it may still read it on a GPU); no host wait.
  buffer(UnitBuffer::kUnshardedParams).release(&comm_.device().compute_stream());
  param_views_.clear();
  state_.to(ParamState::kSharded);
}

const std::vector<TensorView>& ShardedUnit::prepare_grads() {
  // A reduction of this unit's previous micro-batch may still read (and then zero or free) the buffer.
  finish_reduce();
  if (state_.grads() == GradState::kHeld) return grad_views_;
  PooledBuffer& grads = buffer(UnitBuffer::kUnshardedGrads);
  grads.borrow(resources_.pool(UnitBuffer::kUnshardedGrads));
  comm_.device().fill_zero(grads.data(), layout_.padded_numel() * dtype_size(param_dtype_),
                           comm_.device().compute_stream());
  make_views(grad_views_, grads.data(), param_dtype_);
  state_.to(GradState::kHeld);
  return grad_views_;
}

void ShardedUnit::reduce_grads(bool sync) {
  STRATA_CHECK(state_.grads() != GradState::kNone,
               "unit '{}': reduce_grads() before its gradients were prepared (call begin_backward first)", name_);
  if (!sync) return;  // no-sync accumulation: gradients stay unsharded until a micro-batch that syncs
  finish_reduce();
  Device& dev = comm_.device();
  Stream& rs = comm_.reduce_scatter_stream();
  const std::size_t S = layout_.shard_numel(), P = layout_.padded_numel(), rsz = dtype_size(reduce_dtype_);
  PooledBuffer& grads = buffer(UnitBuffer::kUnshardedGrads);
  dev.compute_stream().record(*mem_.events.grads_ready);
  rs.wait(*mem_.events.grads_ready);

  const void* src = grads.data();
  if (reduce_dtype_ != param_dtype_) {
    PooledBuffer& converted = buffer(UnitBuffer::kReduceIn);
    converted.borrow(resources_.pool(UnitBuffer::kReduceIn));
    resources_.ops->convert(grads.data(), param_dtype_, converted.data(), reduce_dtype_, P, rs);
    src = converted.data();
  }
  PooledBuffer& out = buffer(UnitBuffer::kReduceOut);
  out.borrow(resources_.pool(UnitBuffer::kReduceOut));
  time_on(rs, [&] {
    if (plan_.reduce_is_all_reduce) {
      comm_.dp_group().all_reduce(src, out.data(), S, reduce_dtype_, ReduceOp::kAvg, rs);
    } else {
      comm_.shard_group().reduce_scatter(src, out.data(), S, reduce_dtype_, ReduceOp::kAvg, rs);
      if (Communicator* replicas = comm_.replica_group())
        replicas->all_reduce(out.data(), out.data(), S, reduce_dtype_, ReduceOp::kAvg, rs);
    }
  });
  (plan_.reduce_is_all_reduce ? stats_.all_reduce_bytes : stats_.reduce_scatter_bytes) += P * rsz;
  if (plan_.offload_optimizer) {
    // The gradient shard lives in host memory: copy the reduced shard down, then accumulate on the host.
    PooledBuffer& landed = buffer(UnitBuffer::kGradReturn);
    landed.borrow(resources_.pool(UnitBuffer::kGradReturn));
    dev.copy(landed.data(), out.data(), S * rsz, rs);
    resources_.host_ops->accumulate_f32(grad_shard(), landed.data(), reduce_dtype_, S, rs);
    stats_.to_host_bytes += S * rsz;
  } else {
    resources_.ops->accumulate_f32(grad_shard(), out.data(), reduce_dtype_, S, rs);
  }
  if (plan_.grads_persist) dev.fill_zero(grads.data(), P * dtype_size(param_dtype_), rs);
  rs.record(*mem_.events.reduced);
  state_.to(GradState::kReducing);
}

void ShardedUnit::finish_reduce() {
  if (state_.grads() != GradState::kReducing) return;
  mem_.events.reduced->synchronize();
  buffer(UnitBuffer::kReduceIn).release();
  buffer(UnitBuffer::kReduceOut).release();
  buffer(UnitBuffer::kGradReturn).release();
  if (plan_.grads_persist) {
    state_.to(GradState::kHeld);
  } else {
    buffer(UnitBuffer::kUnshardedGrads).release();
    grad_views_.clear();
    state_.to(GradState::kNone);
  }
}

void ShardedUnit::begin_update() {
  finish_upload();  // the previous update's copy may still read the master
  if (state_.params() == ParamState::kGathering) {  // a gather may still be sending this rank's slice
    mem_.events.unsharded->synchronize();
    state_.to(ParamState::kUnsharded);
  }
  // ZeRO-3: a gathered copy left by a prefetch the trainer did not use would be stale after the update.
  if (plan_.params_sharded) reshard();
}

void ShardedUnit::end_update() {
  zero_grad_shard();
  publish_params();
}

void ShardedUnit::zero_grad_shard() {
  Device& dev = state_device();
  const PooledBuffer& g = buffer(UnitBuffer::kGradShard);
  dev.fill_zero(g.data(), placement_.at(UnitBuffer::kGradShard).bytes(), dev.compute_stream());
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
