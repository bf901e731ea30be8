// InFlightTable: what this rank is waiting on right now (collectives, events), printed when a wait times out.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace strata {

class InFlightTable {
 public:
  static InFlightTable& global();

  std::uint64_t add(std::string description);
  // The same with a description that `*description` holds, read only when the table is printed: the caller keeps
  // the string alive and unchanged until remove(), and registering formats and copies nothing.
  std::uint64_t add(const std::string* description);
  void remove(std::uint64_t id);
  // One line per entry, oldest first: "  all_gather seq=12 count=1024 dtype=f32 group=world(2) for 3.2 s".
  std::string describe() const;
  std::size_t size() const;

 private:
  struct Entry {
    std::string description;
    const std::string* borrowed;  // when not null, the description
    std::chrono::steady_clock::time_point since;
  };
  mutable std::mutex mutex_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Entry> entries_;
};

// RAII registration of one in-flight operation.
class InFlightScope {
 public:
  explicit InFlightScope(std::string description) : id_(InFlightTable::global().add(std::move(description))) {}
  // Borrows `*description`, which must outlive the scope (a collective's own `what`).
  explicit InFlightScope(const std::string* description) : id_(InFlightTable::global().add(description)) {}
  ~InFlightScope() { InFlightTable::global().remove(id_); }
  InFlightScope(const InFlightScope&) = delete;
  InFlightScope& operator=(const InFlightScope&) = delete;

 private:
  std::uint64_t id_;
};

// Throws ErrorCode::kTimeout: "<what> timed out after <s> s; in flight on this rank: ..." and logs it.
[[noreturn]] void throw_timeout(const char* file, int line, const std::string& what, double timeout_s);

}  // namespace strata
