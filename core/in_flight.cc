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

void InFlightTable::link(InFlightScope* scope) {
  std::lock_guard<std::mutex> lock(mutex_);
  scope->prev_ = last_;
  (last_ ? last_->next_ : first_) = scope;
  last_ = scope;
  ++size_;
}

void InFlightTable::unlink(InFlightScope* scope) {
  std::lock_guard<std::mutex> lock(mutex_);
  (scope->prev_ ? scope->prev_->next_ : first_) = scope->next_;
  (scope->next_ ? scope->next_->prev_ : last_) = scope->prev_;
  --size_;
}

std::size_t InFlightTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return size_;
}

std::string InFlightTable::describe() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_ == nullptr) return "  (nothing)\n";
  auto now = std::chrono::steady_clock::now();
  std::string out;
  for (const InFlightScope* e = first_; e != nullptr; e = e->next_) {
    double age = std::chrono::duration<double>(now - e->since_).count();
    out += fmt::format("  {} (for {:.1f} s)\n", *e->text_, age);
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
