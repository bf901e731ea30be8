// GradNorm: per-rank sums of squares on the memory that holds the gradient shards, all-reduced over the groups.
#include "runtime/optim/grad_norm.h"

#include <climits>
#include <cmath>

#include "core/error.h"
#include "runtime/sharding/flat_ops.h"

namespace strata {

GradNorm::GradNorm(ShardedParameters& params, std::vector<Communicator*> groups, const NormMask& counted,
                   const NormRuns& runs)
    : params_(params) {
  Device& dev = params.comm_stream().device();
  for (Communicator* g : groups) {
    STRATA_CHECK(g != nullptr, "a norm group is null");
    STRATA_CHECK(&g->device() == &dev, "norm group '{}' lives on {}, the model on {}", g->name(), g->device().name(),
                 dev.name());
    if (g->size() > 1) groups_.push_back(g);
  }
  for (int u = 0; u < params.num_units(); ++u) {
    const UnitShard shard = params.unit(u);
    std::vector<std::array<std::size_t, 3>> unit_runs;
    // Runs are merged within a segment only: a segment with no shared piece stays one sum, as it always was (the
    // same order of additions, so the norm keeps its bits).
    std::size_t segment_runs = 0;  // the first run of the current segment
    auto add = [&](std::size_t begin, std::size_t length, std::size_t bucket) {
      if (length == 0) return;
      std::array<std::size_t, 3>* last = unit_runs.size() > segment_runs ? &unit_runs.back() : nullptr;
      if (last && (*last)[2] == bucket && (*last)[0] + (*last)[1] == begin) (*last)[1] += length;
      else unit_runs.push_back({begin, length, bucket});
    };
    for (const ShardSegment& seg : shard.segments) {
      segment_runs = unit_runs.size();
      const ParamSlot& s = shard.layout->slots()[seg.slot];
      if (!s.trainable) continue;
      if ((counted && !counted(u, s)) || !runs) {
        add(seg.shard_begin, seg.length, counted && !counted(u, s) ? 1 : 0);
        continue;
      }
      // The counted runs, and the elements between them not counted.
      std::size_t at = seg.slot_begin;
      runs(s, seg.slot_begin, seg.length, [&](std::size_t begin, std::size_t length) {
        STRATA_CHECK_CODE(ErrorCode::kInternal, begin >= at && begin + length <= seg.slot_begin + seg.length,
                          "norm: counted run [{}, {}) of slot '{}' outside [{}, {})", begin, begin + length, s.name, at,
                          seg.slot_begin + seg.length);
        add(seg.shard_begin + (at - seg.slot_begin), begin - at, 1);
        add(seg.shard_begin + (begin - seg.slot_begin), length, 0);
        at = begin + length;
      });
      add(seg.shard_begin + (at - seg.slot_begin), seg.slot_begin + seg.length - at, 1);
    }
    runs_.push_back(std::move(unit_runs));
  }
  sums_ = dev.allocate(16, MemCategory::kWorkspace);
  ready_ = dev.create_event();
}

NormResult GradNorm::compute() {
  Device& dev = params_.comm_stream().device();
  Stream& compute = dev.compute_stream();
  double* sums = sums_.as<double>();
  // Per rank, in the memory that holds the gradient shards: a host array under offload (then copied to the device
  // for the all-reduce), else the device's buffer, accumulated by kernels on its compute stream.
  const bool on_host = &params_.device() != &dev;
  double local[2] = {0, 0};
  double* into = on_host ? local : sums;
  if (!on_host) dev.fill_zero(sums, 16, compute);
  for (int u = 0; u < params_.num_units(); ++u) {
    const float* grad = params_.unit(u).grad;
    for (const std::array<std::size_t, 3>& r : runs_[static_cast<std::size_t>(u)])
      params_.ops().add_sum_squares(grad + r[0], r[1], into + r[2], params_.stream());
  }
  if (on_host) {
    params_.stream().synchronize();
    dev.copy_from_host(sums, local, 16);
  }
  if (!groups_.empty()) {
    Stream& s = params_.comm_stream();
    compute.record(*ready_);
    s.wait(*ready_);
    for (Communicator* g : groups_) g->all_reduce(sums, sums, 2, DType::kF64, ReduceOp::kSum, s);
    params_.wait(s);
  } else {
    compute.synchronize();
  }
  double total[2] = {0, 0};
  dev.copy_to_host(total, sums, 16);
  return NormResult{total[0], std::isfinite(total[0]) && std::isfinite(total[1])};
}

NonFiniteAt GradNorm::agree(const NonFiniteAt& local) {
  // The lowest key is the largest negated key; INT64_MIN stands for "none here".
  std::int64_t value = local.found() ? -local.key() : INT64_MIN;
  if (groups_.empty()) return local;
  Device& dev = params_.comm_stream().device();
  Stream& s = params_.comm_stream();
  std::int64_t* scratch = sums_.as<std::int64_t>();
  dev.copy_from_host(scratch, &value, 8);
  for (Communicator* g : groups_) g->all_reduce(scratch, scratch, 1, DType::kI64, ReduceOp::kMax, s);
  params_.wait(s);
  dev.copy_to_host(&value, scratch, 8);
  return value == INT64_MIN ? NonFiniteAt{} : NonFiniteAt::from_key(-value);
}

NonFiniteAt GradNorm::first_nonfinite() {
  params_.stream().synchronize();
  return agree(find_nonfinite(params_, ShardValues::kGrad, false));
}

}  // namespace strata
