// Tracer: spans (name, category, track, start, duration) for a Chrome trace / Perfetto timeline; enabled by
// STRATA_TRACE. Cheap when off: one relaxed load per span.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace strata {

class Tracer {
 public:
  static Tracer& global();

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Starts recording; times count from now (call it at the same moment on every rank, after a barrier).
  void enable();
  // Microseconds since enable().
  std::int64_t now_us() const;
  // A finished span on `track` ("compute", a stream's name, ...). `args` is a JSON object body or empty.
  void complete(const std::string& name, const char* category, const std::string& track, std::int64_t start_us,
                std::int64_t end_us, const std::string& args = "");
  // This rank's events as Chrome trace JSON objects (comma-separated, no brackets), with pid = rank and thread
  // names for the tracks.
  std::string events_json(int rank) const;
  std::size_t size() const;

  // Named ranges for a profiler's timeline (NVTX on CUDA: Nsight Systems shows them), pushed and popped on the
  // calling thread by TraceSpan and by the sharded model's forward / backward brackets, whether or not
  // STRATA_TRACE is on. The CUDA device installs NVTX hooks when it is created; without hooks these do nothing.
  using PushRange = void (*)(const char* name);
  using PopRange = void (*)();
  void set_range_hooks(PushRange push, PopRange pop);
  void push_range(const char* name) const {
    if (PushRange f = push_.load(std::memory_order_relaxed)) f(name);
  }
  bool has_range_hooks() const { return push_.load(std::memory_order_relaxed) != nullptr; }
  void pop_range() const {
    if (PopRange f = pop_.load(std::memory_order_relaxed)) f();
  }

 private:
  struct Event {
    std::string name;
    const char* category;
    int track;
    std::int64_t start_us, end_us;
    std::string args;
  };
  int track_id(const std::string& track);  // under mutex_
  std::atomic<bool> enabled_{false};
  std::atomic<PushRange> push_{nullptr};
  std::atomic<PopRange> pop_{nullptr};
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<std::string> tracks_;
};

// Records [construction, destruction) as one span when tracing is on.
class TraceSpan {
 public:
  TraceSpan(std::string name, const char* category, std::string track, std::string args = "");
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  bool on_;
  std::string name_;
  const char* category_;
  std::string track_;
  std::string args_;
  std::int64_t start_us_ = 0;
  bool ranged_ = false;  // a profiler range was pushed
};

}  // namespace strata
