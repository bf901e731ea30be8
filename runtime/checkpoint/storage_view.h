// StorageView: which ranks see the same files under a directory. On a cluster with a shared file system every rank
// does; where each host has only its own disk, the ranks of a host do. Each group of ranks that sees the same files
// has a leader, its lowest rank, which writes what the group shares (a checkpoint's index, its commit marker).
#pragma once

#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace strata {

struct StorageView {
  std::vector<int> leader_of;     // every rank's leader (the lowest rank that sees its files), by rank
  bool shared() const;            // one group: every rank sees the same files
  bool leads(int rank) const { return leader_of[static_cast<std::size_t>(rank)] == rank; }
  int groups() const;
  // "every rank sees the same files", or "3 groups of ranks see files of their own: ranks 0,1; ranks 2,3; rank 4".
  std::string describe() const;
};

// Collective over `world`, at most a few file operations per rank: creates `dir` (and parents) on every rank, then each
// rank writes a probe file of its own there (named with a token of this call, taken from rank 0's clock and pid), the
// ranks wait for each other, each lists the probes it sees, and removes its own. kIo on every rank, naming the rank
// and the directory, when a rank cannot create it or write there.
StorageView probe_storage(Communicator& world, const std::string& dir);

}  // namespace strata
