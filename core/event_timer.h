// EventTimer: sums the time between pairs of events recorded on streams, without making the host wait for them.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

#include "core/device.h"

namespace strata {

// Each span is a start and an end event (Device::create_timing_event) recorded on one stream around the work it
// times. collect() adds up the spans that have completed and keeps the rest for a later call, so timing never
// blocks the host or serialises streams; its events are reused once their span is counted. CUDA: GPU time of the
// stream; CPU: the stream thread's wall time.
class EventTimer {
 public:
  explicit EventTimer(Device& device) : device_(device) {}

  // Records a span's start on `stream`, runs `enqueue` (which enqueues the timed work on `stream`), records its end.
  template <typename Fn>
  void span(Stream& stream, Fn&& enqueue) {
    Pair& p = begin(stream);
    enqueue();
    end(stream, p);
  }

  // Milliseconds of the spans completed since the last call (a span still running is counted by a later call).
  double collect();
  // Spans recorded and not yet counted.
  std::size_t pending() const;

 private:
  enum class State { kFree, kOpen, kPending };  // kOpen: start recorded, end not yet
  struct Pair {
    std::unique_ptr<Event> start, end;
    State state = State::kFree;
  };
  Pair& begin(Stream& stream);
  void end(Stream& stream, Pair& pair);

  Device& device_;
  mutable std::mutex mutex_;
  std::deque<Pair> pairs_;  // a deque: a Pair& stays valid while others are added
};

}  // namespace strata
