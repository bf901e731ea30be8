// InFlightTable bookkeeping and the timeout error that prints it.
#include "core/in_flight.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/logging.h"
#include "core/wait_hooks.h"

namespace strata {

InFlightTable& InFlightTable::global() {
  static InFlightTable* table = new InFlightTable();  // never destroyed: stream threads may outlive statics
  return *table;
}

std::uint64_t InFlightTable::add(std::string description) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t id = next_id_++;
  entries_.emplace(id, Entry{std::move(description), nullptr, std::chrono::steady_clock::now()});
  return id;
}

std::uint64_t InFlightTable::add(const std::string* description) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t id = next_id_++;
  entries_.emplace(id, Entry{std::string(), description, std::chrono::steady_clock::now()});
  return id;
}

void InFlightTable::remove(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.erase(id);
}

std::size_t InFlightTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

std::string InFlightTable::describe() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.empty()) return "  (nothing)\n";
  auto now = std::chrono::steady_clock::now();
  std::string out;
  for (const auto& [id, e] : entries_) {
    double age = std::chrono::duration<double>(now - e.since).count();
    out += fmt::format("  {} (for {:.1f} s)\n", e.borrowed ? *e.borrowed : e.description, age);
  }
  return out;
}

void throw_timeout(const char* file, int line, const std::string& what, double timeout_s) {
  std::string msg = fmt::format("{} timed out after {} s (STRATA_TIMEOUT_S); in flight on this rank:\n{}", what,
                                timeout_s, InFlightTable::global().describe());
  msg += WaitHooks::report_timeout(what, timeout_s);  // e.g. which ranks never arrived, from the side channel
  logger("comm").error("{}", msg);
  WaitHooks::on_timeout();
  throw_error(ErrorCode::kTimeout, file, line, msg);
}

}  // namespace strata
