// ProgressLedger bookkeeping.
#include "collectives/progress_ledger.h"

#include <fmt/format.h>

namespace strata {

ProgressLedger& ProgressLedger::global() {
  static ProgressLedger* ledger = new ProgressLedger();  // never destroyed: stream threads may outlive statics
  return *ledger;
}

std::atomic<std::uint64_t>* ProgressLedger::counter(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = counters_[name];
  if (!slot) slot = std::make_unique<std::atomic<std::uint64_t>>(0);
  return slot.get();
}

void ProgressLedger::raise(std::atomic<std::uint64_t>* counter, std::uint64_t count) {
  std::uint64_t seen = counter->load(std::memory_order_relaxed);
  while (seen < count && !counter->compare_exchange_weak(seen, count, std::memory_order_relaxed)) {
  }
}

ProgressCounters ProgressLedger::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ProgressCounters out;
  for (const auto& [name, count] : counters_)
    if (std::uint64_t c = count->load(std::memory_order_relaxed); c > 0) out.emplace(name, c);
  return out;
}

void ProgressLedger::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, count] : counters_) count->store(0, std::memory_order_relaxed);
}

void ProgressLedger::link(PeerWaitScope* scope) {
  std::lock_guard<std::mutex> lock(mutex_);
  scope->prev_ = last_;
  (last_ ? last_->next_ : first_) = scope;
  last_ = scope;
}

void ProgressLedger::unlink(PeerWaitScope* scope) {
  std::lock_guard<std::mutex> lock(mutex_);
  (scope->prev_ ? scope->prev_->next_ : first_) = scope->next_;
  (scope->next_ ? scope->next_->prev_ : last_) = scope->prev_;
}

std::vector<PeerWait> ProgressLedger::waits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PeerWait> out;
  for (const PeerWaitScope* w = first_; w != nullptr; w = w->next_)
    out.push_back(w->describe_ ? w->describe_() : w->wait_);
  return out;
}

std::string describe_counter(const std::string& counter, bool one) {
  const char* s = one ? "" : "s";
  auto space = counter.rfind(' ');
  if (space != std::string::npos) {
    std::string group = counter.substr(0, space), kind = counter.substr(space + 1);
    if (kind.rfind("send>", 0) == 0) return fmt::format("send{} to group rank {} on '{}'", s, kind.substr(5), group);
    if (kind.rfind("recv<", 0) == 0)
      return fmt::format("receive{} from group rank {} on '{}'", s, kind.substr(5), group);
  }
  return fmt::format("collective{} on '{}'", s, counter);
}

}  // namespace strata
