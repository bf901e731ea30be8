// DirLock: one job owns a directory it fills (a checkpoint directory, a sweep's output). The owner holds DIR/.lock
// with flock(2) for its life and writes there who it is (host, pid, the process's start time, the program); a second
// job is refused with that record, and a lock a dead job left is taken over with a warning (docs/checkpoint.md,
// "One job owns a directory").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace strata {

// Who holds a lock, as its record says.
struct LockHolder {
  std::string host;
  std::int64_t pid = 0;
  std::uint64_t start_ticks = 0;  // the process's start in clock ticks after boot (/proc/PID/stat), so that a pid
                                  // the system has given to another process is not taken for the holder
  std::string started;            // wall-clock time the lock was taken, "2026-01-02 03:04:05 UTC"
  std::string program;
  std::string describe() const;  // "train_gpt (pid 123 on host h, started 2026-01-02 03:04:05 UTC)"
};

// This process as a lock record names it (`program` empty: the process's own name).
LockHolder this_process(const std::string& program);
// Whether the process a record names is alive: on this host, its pid exists and started at the recorded tick; on
// another host nothing can be known (false, with `unknown` set).
bool holder_alive(const LockHolder& holder, bool& unknown);

class DirLock {
 public:
  DirLock() = default;
  ~DirLock();
  DirLock(DirLock&&) noexcept = default;
  DirLock& operator=(DirLock&&) noexcept = default;
  // Takes DIR/.lock for `program` (empty: the process's name; DIR must exist). Throws kIo naming `what` (a flag:
  // "--checkpoint-dir"), the directory and the holder when another live job holds it, or when the record names a job on
  // another host whose life cannot be probed from here (the message says how to remove the lock). A record of a job
  // that is gone is replaced; `takeover()` then says whose it was. Several DirLocks of one process on one directory
  // share the lock.
  static DirLock acquire(const std::string& dir, const std::string& what, const std::string& program);
  bool held() const { return state_ != nullptr; }
  // "" unless this acquire replaced the record of a job that is gone: a sentence naming it, for a warning.
  const std::string& takeover() const { return takeover_; }
  // Releases (the last DirLock of the process on the directory empties the record, then unlocks).
  void release();

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::string takeover_;
};

}  // namespace strata
