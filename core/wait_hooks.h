// Hooks that bounded waits call: pollers (e.g. NCCL's async-error check) while waiting, and abort handlers
// (e.g. ncclCommAbort) when a wait times out, so that a device-side hang cannot outlive the timeout.
#pragma once

#include <cstdint>
#include <functional>

namespace strata {

class WaitHooks {
 public:
  // `poll` may throw strata::Error to end the wait with that error.
  static std::uint64_t add_poller(std::function<void()> poll);
  // `on_timeout` runs once per timed-out wait, before the timeout error is thrown; it must not throw.
  static std::uint64_t add_timeout_handler(std::function<void()> on_timeout);
  static void remove(std::uint64_t id);

  static void poll();         // runs every poller (throws what a poller throws)
  static void on_timeout();   // runs every timeout handler
};

}  // namespace strata
