// InFlightTable: what this rank is waiting on right now (collectives, events), printed when a wait times out.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace strata {

class InFlightScope;

class InFlightTable {
 public:
  static InFlightTable& global();

  // One line per entry, oldest first: "  all_gather seq=12 count=1024 dtype=f32 group=world(2) for 3.2 s".
  std::string describe() const;
  std::size_t size() const;

 private:
  friend class InFlightScope;
  // Entries are the scopes themselves, linked in the order they registered: registering allocates nothing.
  void link(InFlightScope* scope);
  void unlink(InFlightScope* scope);

  mutable std::mutex mutex_;
  InFlightScope* first_ = nullptr;
  InFlightScope* last_ = nullptr;
  std::size_t size_ = 0;
};

// RAII registration of one in-flight operation.
class InFlightScope {
 public:
  explicit InFlightScope(std::string description) : owned_(std::move(description)), text_(&owned_) { register_(); }
  // Borrows `*description`, which must outlive the scope and stay unchanged (a collective's own `what`): registering
  // formats and copies nothing.
  explicit InFlightScope(const std::string* description) : text_(description) { register_(); }
  ~InFlightScope() { InFlightTable::global().unlink(this); }
  InFlightScope(const InFlightScope&) = delete;
  InFlightScope& operator=(const InFlightScope&) = delete;

 private:
  friend class InFlightTable;
  void register_() {
    since_ = std::chrono::steady_clock::now();
    InFlightTable::global().link(this);
  }

  std::string owned_;
  const std::string* text_;
  std::chrono::steady_clock::time_point since_;
  InFlightScope* prev_ = nullptr;
  InFlightScope* next_ = nullptr;
};

// Throws ErrorCode::kTimeout: "<what> timed out after <s> s; in flight on this rank: ..." and logs it.
[[noreturn]] void throw_timeout(const char* file, int line, const std::string& what, double timeout_s);

}  // namespace strata
