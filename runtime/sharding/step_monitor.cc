// StepMonitor: the step clock, exposed waits, and the layout's prediction of the bytes moved.
#include "runtime/sharding/step_monitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/byte_units.h"
#include "runtime/sharding/unit_placement.h"

namespace strata {

std::string StepSummary::describe() const {
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

StepMonitor::StepMonitor(Device& device, const ShardingOptions& options, std::vector<std::size_t> padded,
                         int shard_size)
    : device_(device),
      options_(options),
      padded_(std::move(padded)),
      shard_size_(shard_size),
      comm_timer_(device),
      exposed_timer_(device),
      forwards_(padded_.size(), 0),
      gathers_(padded_.size(), 0),
      reductions_(padded_.size(), 0) {
  stats_.comm_timer = &comm_timer_;
}

void StepMonitor::mark_start() {
  if (started_) return;
  started_ = true;
  start_ = std::chrono::steady_clock::now();
}

void StepMonitor::finish(std::int64_t step, bool updated) {
  StepSummary s;
  s.step = step;
  s.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  // On CUDA the host's own waits would also cover the GPU's compute queued before them (an H200 showed "exposed"
  // 57% of a one-rank step with no communication), so there the compute stream's events measure them instead.
  s.exposed_comm_ms = device_.kind() == DeviceKind::kCpu ? exposed_ms_ : exposed_timer_.collect();
  s.compute_ms = s.step_ms - s.exposed_comm_ms;
  s.comm_ms = comm_timer_.collect();
  s.all_gather_bytes = stats_.all_gather_bytes;
  s.reduce_scatter_bytes = stats_.reduce_scatter_bytes;
  s.all_reduce_bytes = stats_.all_reduce_bytes;
  s.to_device_bytes = stats_.to_device_bytes;
  s.to_host_bytes = stats_.to_host_bytes;
  // The layout's prediction from what the trainer did: ZeRO-3 gathers a unit each time a forward or backward begins
  // after the unit was resharded (after each forward and backward by default; once per step when a pipeline keeps it
  // gathered); stages 1-2 gather once per step after an update; each synchronised backward reduces the unit once.
  const StagePlan plan = StagePlan::from(options_);
  const std::uint64_t psz = dtype_size(options_.mixed_precision.param_dtype);
  const std::uint64_t rsz = dtype_size(options_.mixed_precision.reduce_dtype);
  std::uint64_t gathered = 0, reduced = 0;
  for (std::size_t u = 0; u < padded_.size(); ++u) {
    if (plan.params_sharded) gathered += gathers_[u] * padded_[u];
    else if (shard_size_ > 1 && updated) gathered += padded_[u];
    reduced += reductions_[u] * padded_[u];
  }
  s.predicted_all_gather_bytes = gathered * psz;
  (plan.reduce_is_all_reduce ? s.predicted_all_reduce_bytes : s.predicted_reduce_scatter_bytes) = reduced * rsz;
  summary_ = s;
  stats_.reset();
  exposed_ms_ = 0;
  started_ = false;
  std::fill(forwards_.begin(), forwards_.end(), 0);
  std::fill(gathers_.begin(), gathers_.end(), 0);
  std::fill(reductions_.begin(), reductions_.end(), 0);
}

}  // namespace strata
