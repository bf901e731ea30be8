// EventTimer: a pool of event pairs, counted when both ends have completed.
#include "core/event_timer.h"

namespace strata {

EventTimer::Pair& EventTimer::begin(Stream& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Pair* free = nullptr;
  for (Pair& p : pairs_)
    if (p.state == State::kFree) {
      free = &p;
      break;
    }
  if (!free) {
    pairs_.push_back(Pair{device_.create_timing_event(), device_.create_timing_event(), State::kFree});
    free = &pairs_.back();
  }
  free->state = State::kOpen;
  stream.record(*free->start);
  return *free;
}

void EventTimer::end(Stream& stream, Pair& pair) {
  std::lock_guard<std::mutex> lock(mutex_);
  stream.record(*pair.end);
  pair.state = State::kPending;
}

double EventTimer::collect() {
  std::lock_guard<std::mutex> lock(mutex_);
  double ms = 0;
  for (Pair& p : pairs_) {
    if (p.state != State::kPending || !p.end->query()) continue;
    ms += p.end->elapsed_ms_since(*p.start);
    p.state = State::kFree;
  }
  return ms;
}

std::size_t EventTimer::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const Pair& p : pairs_) n += p.state == State::kFree ? 0 : 1;
  return n;
}

}  // namespace strata
