// SideChannel: a duplicate of MPI_COMM_WORLD beside the collectives, on which ranks tell each other that they leave
// and, when a wait times out, what they are waiting in.
#pragma once

#include <cstdint>
#include <memory>

namespace strata {

// While it lives, a WaitHooks poller (run every 5 ms by every bounded wait) receives the other ranks' notices and
// answers their questions, and a WaitHooks timeout reporter adds what the other ranks say to a timeout message.
//  - A rank that leaves normally (leave(), at Runtime shutdown) sends every other rank its ProgressLedger counters.
//    A rank waiting in an operation that the leaver never issued throws kMismatch at once, naming the leaver, how
//    far it got and the operation (instead of waiting out STRATA_TIMEOUT_S).
//  - The first wait of the process to time out asks every other rank what it waits in and how far it got, and
//    waits min(3 s, timeout / 2) for answers; the message then names the ranks that never answered (stopped, dead,
//    or busy outside Strata) or have not reached the operation, and those waiting in it.
// See docs/notes/side-channel.md.
class SideChannel {
 public:
  // Collective over MPI_COMM_WORLD (bounded by `timeout_s`).
  explicit SideChannel(double timeout_s);
  // Removes the hooks and frees the communicator (not after MPI_Finalize).
  ~SideChannel();
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;

  // Normal shutdown: sends this rank's notice to every other rank, then waits (bounded by the timeout) for every
  // other rank's: a bounded final barrier that also drains the channel. Returns false, after logging the ranks that
  // did not leave in time, when some did not (MPI_Finalize would wait for them without a bound).
  bool leave();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::uint64_t poller_id_ = 0;
  std::uint64_t reporter_id_ = 0;
};

}  // namespace strata
