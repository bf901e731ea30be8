// Helpers for bounded polling waits: seconds -> clock duration (clamped), Backoff (yield, then short sleeps), and
// poll_until, the loop every device-side wait uses.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "core/in_flight.h"
#include "core/wait_hooks.h"

namespace strata {

inline std::chrono::steady_clock::duration to_duration(double seconds) {
  double bounded = std::clamp(seconds, 0.0, 1e9);  // no overflow of the clock's representation
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(bounded));
}

// Yields first (work often completes within microseconds), then sleeps a little longer as the wait goes on.
class Backoff {
 public:
  void pause() {
    ++spins_;
    if (spins_ <= 64) {
      std::this_thread::yield();
    } else if (spins_ <= 1000) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  int spins_ = 0;
};

// Polls `ready()` until it returns true: registers the wait in the in-flight table (as `describe()`), runs the
// WaitHooks pollers every 5 ms (so an NCCL async error ends the wait), and throws kTimeout after `timeout_s`.
template <typename Ready, typename Describe>
void poll_until(Ready&& ready, Describe&& describe, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  if (ready()) return;
  const std::string what = describe();
  InFlightScope scope(what);
  const auto start = Clock::now();
  const auto deadline = start + to_duration(timeout_s);
  auto next_hooks = start;
  Backoff backoff;
  for (;;) {
    auto now = Clock::now();
    if (now >= next_hooks) {
      WaitHooks::poll();
      next_hooks = now + std::chrono::milliseconds(5);
    }
    if (ready()) return;
    if (Clock::now() >= deadline) throw_timeout(__FILE__, __LINE__, what, timeout_s);
    backoff.pause();
  }
}

}  // namespace strata
