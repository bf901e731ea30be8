// Hooks that bounded waits call: pollers (e.g. NCCL's async-error check, the side channel) while waiting, and on a
// timeout reporters (what the other ranks are doing) and abort handlers (e.g. ncclCommAbort), so that a device-side
// hang cannot outlive the timeout.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace strata {

class WaitHooks {
 public:
  // `poll` may throw strata::Error to end the wait with that error.
  static std::uint64_t add_poller(std::function<void()> poll);
  // `on_timeout` runs once per timed-out wait, before the timeout error is thrown; it must not throw.
  static std::uint64_t add_timeout_handler(std::function<void()> on_timeout);
  // `report(what, timeout_s)` runs when a wait named `what` times out after `timeout_s`, before the handlers; the
  // text it returns is appended to the timeout message. It must not throw, and should return within
  // min(3 s, timeout_s / 2) or so.
  using TimeoutReporter = std::function<std::string(const std::string& what, double timeout_s)>;
  static std::uint64_t add_timeout_reporter(TimeoutReporter report);
  static void remove(std::uint64_t id);

  // Runs every poller (throws what a poller throws). A poller that itself waits does not poll again: a call made
  // from inside a poller on the same thread returns at once.
  static void poll();
  static void on_timeout();  // runs every timeout handler
  // The reporters' texts, each ending in a newline.
  static std::string report_timeout(const std::string& what, double timeout_s);
};

}  // namespace strata
