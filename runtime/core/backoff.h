// Helpers for bounded polling waits: seconds -> clock duration (clamped), and Backoff (yield, then short sleeps).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

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

}  // namespace strata
