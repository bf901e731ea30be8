// PeerBlocks: the shared host blocks of this machine's other ranks (core/shared_host_memory.h), mapped read-only in
// this process, so the shared-memory path reads a peer's input where it lies.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/shared_host_memory.h"

namespace strata {

// A mapping stays until its block is known to be gone (the peer's next block under the same descriptor number) or it
// is the least recently used of kMaxPerPeer; a block the peer freed meanwhile stays in memory as long as it is mapped
// here. Used by one thread at a time (its segment's).
class PeerBlocks {
 public:
  static constexpr std::size_t kMaxPerPeer = 32;

  // Collective over `comm`: whether every rank can open every other rank's memfd through /proc/<pid>/fd (a
  // container without /proc, or a process another user owns, cannot). Bounded by `timeout_s`.
  static bool probe(MPI_Comm comm, double timeout_s, const std::string& what);

  PeerBlocks() = default;
  ~PeerBlocks();
  PeerBlocks(const PeerBlocks&) = delete;
  PeerBlocks& operator=(const PeerBlocks&) = delete;

  // The bytes [ref.offset, ref.offset + bytes) of group rank `peer`'s block `ref`, mapped here. Throws naming the
  // peer and `what` if the block cannot be opened or is smaller than the range.
  const char* map(int peer, const SharedBlockRef& ref, std::size_t bytes, const std::string& what);

 private:
  struct Mapping {
    int peer;
    std::int32_t fd;  // the descriptor number in the peer
    std::uint64_t id;
    char* base;
    std::size_t bytes;
    std::uint64_t last_use;
  };
  void unmap(std::size_t i);

  std::vector<Mapping> maps_;
  std::uint64_t clock_ = 0;
};

}  // namespace strata
