// The WaitHooks registry.
#include "core/wait_hooks.h"

#include <exception>
#include <map>
#include <mutex>
#include <vector>

namespace strata {
namespace {
struct Registry {
  std::mutex mutex;
  std::uint64_t next = 1;
  std::map<std::uint64_t, std::function<void()>> pollers;
  std::map<std::uint64_t, std::function<void()>> timeout_handlers;
  std::map<std::uint64_t, WaitHooks::TimeoutReporter> timeout_reporters;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: stream threads may run past static destruction
  return *r;
}
template <typename Fn>
std::vector<Fn> snapshot(const std::map<std::uint64_t, Fn>& m) {
  std::vector<Fn> out;
  for (const auto& [id, fn] : m) out.push_back(fn);
  return out;
}
}  // namespace

std::uint64_t WaitHooks::add_poller(std::function<void()> poll) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pollers.emplace(r.next, std::move(poll));
  return r.next++;
}

std::uint64_t WaitHooks::add_timeout_handler(std::function<void()> on_timeout) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.timeout_handlers.emplace(r.next, std::move(on_timeout));
  return r.next++;
}

std::uint64_t WaitHooks::add_timeout_reporter(TimeoutReporter report) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.timeout_reporters.emplace(r.next, std::move(report));
  return r.next++;
}

void WaitHooks::remove(std::uint64_t id) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pollers.erase(id);
  r.timeout_handlers.erase(id);
  r.timeout_reporters.erase(id);
}

void WaitHooks::poll() {
  thread_local bool polling = false;
  if (polling) return;
  std::vector<std::function<void()>> fns;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.pollers.empty()) return;
    fns = snapshot(r.pollers);
  }
  polling = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{polling};
  for (auto& f : fns) f();
}

std::string WaitHooks::report_timeout(const std::string& what, double timeout_s) {
  std::vector<TimeoutReporter> fns;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    fns = snapshot(r.timeout_reporters);
  }
  std::string out;
  for (auto& f : fns) {
    std::string text;
    try {
      text = f(what, timeout_s);
    } catch (const std::exception& e) {
      text = std::string("(timeout reporter failed: ") + e.what() + ")";
    }
    if (text.empty()) continue;
    if (text.back() != '\n') text += '\n';
    out += text;
  }
  return out;
}

void WaitHooks::on_timeout() {
  std::vector<std::function<void()>> fns;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    fns = snapshot(r.timeout_handlers);
  }
  for (auto& f : fns) f();
}

}  // namespace strata
