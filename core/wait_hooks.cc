// The WaitHooks registry.
#include "core/wait_hooks.h"

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
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: stream threads may run past static destruction
  return *r;
}
std::vector<std::function<void()>> snapshot(const std::map<std::uint64_t, std::function<void()>>& m) {
  std::vector<std::function<void()>> out;
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

void WaitHooks::remove(std::uint64_t id) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pollers.erase(id);
  r.timeout_handlers.erase(id);
}

void WaitHooks::poll() {
  std::vector<std::function<void()>> fns;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    fns = snapshot(r.pollers);
  }
  for (auto& f : fns) f();
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
