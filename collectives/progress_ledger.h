// ProgressLedger: how many operations this process has issued per counter, and which waits need which ranks; the
// side channel sends both to the other ranks when a rank leaves or a wait times out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace strata {

// Counters are named from the issuing rank's side: "<group>" counts its collectives on the group,
// "<group> send>k" its sends to group rank k, "<group> recv<k" its receives from group rank k.
using ProgressCounters = std::map<std::string, std::uint64_t>;

// A wait completes only once `world_rank` has issued operation number `seq` (from 0) of `counter`, i.e. once that
// rank's count of `counter` exceeds `seq`.
struct PeerNeed {
  int world_rank = -1;
  std::string counter;
  std::uint64_t seq = 0;
};

// One operation this rank waits in: `label` ("all_gather seq=3 group=world(2)"), `what` (the in-flight line).
struct PeerWait {
  std::string label;
  std::string what;
  std::vector<PeerNeed> needs;
};

class ProgressLedger {
 public:
  static ProgressLedger& global();

  void issued(const std::string& counter, std::uint64_t count);  // raises `counter` to at least `count`
  ProgressCounters counters() const;
  void reset();  // a new Runtime: counts start again

  std::uint64_t add_wait(PeerWait wait);
  // A wait described only when waits() is asked (a report): `describe` must stay callable until remove_wait.
  std::uint64_t add_wait(std::function<PeerWait()> describe);
  void remove_wait(std::uint64_t id);
  std::vector<PeerWait> waits() const;  // oldest first

 private:
  mutable std::mutex mutex_;
  ProgressCounters counters_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, PeerWait> waits_;
  std::map<std::uint64_t, std::function<PeerWait()>> lazy_waits_;
};

// RAII registration of one wait in the ledger.
class PeerWaitScope {
 public:
  explicit PeerWaitScope(PeerWait wait) : id_(ProgressLedger::global().add_wait(std::move(wait))) {}
  // Described on demand: a collective registers its wait without formatting anything.
  explicit PeerWaitScope(std::function<PeerWait()> describe)
      : id_(ProgressLedger::global().add_wait(std::move(describe))) {}
  ~PeerWaitScope() { ProgressLedger::global().remove_wait(id_); }
  PeerWaitScope(const PeerWaitScope&) = delete;
  PeerWaitScope& operator=(const PeerWaitScope&) = delete;

 private:
  std::uint64_t id_;
};

// "collectives on 'world'", "sends to group rank 0 on 'world'", "receives from group rank 0 on 'world'" (singular
// when `one`: "collective on 'world'").
std::string describe_counter(const std::string& counter, bool one = false);

}  // namespace strata
