// ProgressLedger: how many operations this process has issued per counter, and which waits need which ranks; the
// side channel sends both to the other ranks when a rank leaves or a wait times out.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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

class PeerWaitScope;

class ProgressLedger {
 public:
  static ProgressLedger& global();

  // The count of `counter`, created at zero on first use; the pointer stays valid for the process's life (reset()
  // zeroes counts, it frees none), so an issuer looks its counters up once.
  std::atomic<std::uint64_t>* counter(const std::string& name);
  static void raise(std::atomic<std::uint64_t>* counter, std::uint64_t count);  // to at least `count`
  ProgressCounters counters() const;  // those issued at least once since the last reset
  void reset();                       // a new Runtime: counts start again

  std::vector<PeerWait> waits() const;  // oldest first

 private:
  friend class PeerWaitScope;
  // Waits are the scopes themselves, linked in the order they registered: registering allocates nothing.
  void link(PeerWaitScope* scope);
  void unlink(PeerWaitScope* scope);

  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<std::atomic<std::uint64_t>>> counters_;
  PeerWaitScope* first_ = nullptr;
  PeerWaitScope* last_ = nullptr;
};

// RAII registration of one wait in the ledger.
class PeerWaitScope {
 public:
  explicit PeerWaitScope(PeerWait wait) : wait_(std::move(wait)) { ProgressLedger::global().link(this); }
  // Described on demand, when a report asks: a collective registers its wait without formatting anything.
  // `describe` must stay callable until the scope ends.
  explicit PeerWaitScope(std::function<PeerWait()> describe) : describe_(std::move(describe)) {
    ProgressLedger::global().link(this);
  }
  ~PeerWaitScope() { ProgressLedger::global().unlink(this); }
  PeerWaitScope(const PeerWaitScope&) = delete;
  PeerWaitScope& operator=(const PeerWaitScope&) = delete;

 private:
  friend class ProgressLedger;
  PeerWait wait_;
  std::function<PeerWait()> describe_;
  PeerWaitScope* prev_ = nullptr;
  PeerWaitScope* next_ = nullptr;
};

// "collectives on 'world'", "sends to group rank 0 on 'world'", "receives from group rank 0 on 'world'" (singular
// when `one`: "collective on 'world'").
std::string describe_counter(const std::string& counter, bool one = false);

}  // namespace strata
