// StepMonitor: one step's communication measured beside what the layout predicts (StepSummary), and the time the
// caller spent waiting on communication.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tracer.h"
#include "runtime/sharding/sharded_unit.h"
#include "runtime/sharding/sharding_options.h"

namespace strata {

// ZeRO-3 gathers each unit twice per micro-batch in param dtype (once when parameters stay gathered after forward);
// stages 1-2 gather once per step after the update; gradients are reduced once per synchronised micro-batch in
// reduce dtype.
struct StepSummary {
  std::int64_t step = 0;
  double step_ms = 0;          // from the first protocol call after the previous step to the end of this one
  double compute_ms = 0;       // step_ms - exposed_comm_ms
  // Time of the collectives on the communication streams, from events around each (CUDA: GPU time). A collective
  // is counted in the step in which it completes.
  double comm_ms = 0;
  // Time compute could not proceed for want of communication. CPU: the caller's waits. CUDA: the compute stream's
  // idle time across each wait (events recorded on it before and after), so GPU work queued before the wait is
  // not counted.
  double exposed_comm_ms = 0;
  std::uint64_t all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0;
  std::uint64_t predicted_all_gather_bytes = 0, predicted_reduce_scatter_bytes = 0, predicted_all_reduce_bytes = 0;
  std::uint64_t to_device_bytes = 0, to_host_bytes = 0;  // offload copies
  std::string describe() const;                          // one line
};

class StepMonitor {
 public:
  // `padded` holds each unit's padded element count; `shard_size` the shard group's.
  StepMonitor(Device& device, const ShardingOptions& options, std::vector<std::size_t> padded, int shard_size);

  CommStats& stats() { return stats_; }
  // The step's clock starts at its first call (a protocol call, or the optimizer's).
  void mark_start();
  // Runs fn, counting its time as exposed communication (the caller is blocked on it).
  template <typename Fn>
  void exposed(Fn&& fn);
  // What the trainer did, for the prediction: a forward of unit i, a reduction of its gradients.
  void count_forward(int unit) { ++forwards_[static_cast<std::size_t>(unit)]; }
  // ZeRO-3: the trainer begins a forward or backward of a unit it let reshard (or has not used yet this step).
  void count_gather(int unit) { ++gathers_[static_cast<std::size_t>(unit)]; }
  void count_reduction(int unit) { ++reductions_[static_cast<std::size_t>(unit)]; }
  // Closes the step: `step` optimizer steps taken so far; `updated` false when this one was skipped.
  void finish(std::int64_t step, bool updated);
  const StepSummary& last() const { return summary_; }

 private:
  Device& device_;
  ShardingOptions options_;
  std::vector<std::size_t> padded_;
  int shard_size_;
  CommStats stats_;
  EventTimer comm_timer_;     // the collectives (stats_.comm_timer points here)
  EventTimer exposed_timer_;  // CUDA: the compute stream across each exposed wait
  StepSummary summary_;
  bool started_ = false;
  std::chrono::steady_clock::time_point start_;
  double exposed_ms_ = 0;
  std::vector<std::uint64_t> forwards_, gathers_, reductions_;  // per unit, this step
};

template <typename Fn>
void StepMonitor::exposed(Fn&& fn) {
  if (device_.kind() != DeviceKind::kCpu) {
    // The host's clock would also count the GPU work queued before the wait; the compute stream's events do not.
    // No trace span: the host does not know when, on the GPU's timeline, the stream sat idle.
    exposed_timer_.span(device_.compute_stream(), fn);
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  std::int64_t trace_start = Tracer::global().enabled() ? Tracer::global().now_us() : 0;
  fn();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  exposed_ms_ += ms;
  if (Tracer::global().enabled() && ms > 0.01)
    Tracer::global().complete("wait (exposed communication)", "wait", "compute", trace_start, Tracer::global().now_us());
}

}  // namespace strata
