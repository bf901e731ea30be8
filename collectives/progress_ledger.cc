// ProgressLedger bookkeeping.
#include "collectives/progress_ledger.h"

#include <fmt/format.h>

namespace strata {

ProgressLedger& ProgressLedger::global() {
  static ProgressLedger* ledger = new ProgressLedger();  // never destroyed: stream threads may outlive statics
  return *ledger;
}

void ProgressLedger::issued(const std::string& counter, std::uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t& c = counters_[counter];
  if (count > c) c = count;
}

ProgressCounters ProgressLedger::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

void ProgressLedger::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.clear();
}

std::uint64_t ProgressLedger::add_wait(PeerWait wait) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t id = next_id_++;
  waits_.emplace(id, std::move(wait));
  return id;
}

std::uint64_t ProgressLedger::add_wait(std::function<PeerWait()> describe) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t id = next_id_++;
  lazy_waits_.emplace(id, std::move(describe));
  return id;
}

void ProgressLedger::remove_wait(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (waits_.erase(id) == 0) lazy_waits_.erase(id);
}

std::vector<PeerWait> ProgressLedger::waits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::uint64_t, PeerWait> all = waits_;  // oldest first: ids in the order of registration
  for (const auto& [id, describe] : lazy_waits_) all.emplace(id, describe());
  std::vector<PeerWait> out;
  for (auto& [id, w] : all) out.push_back(std::move(w));
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
