// Trainer-level scalars across ranks (a loss, a count): one host value per rank exchanged through a Communicator, so
// trainers stay behind the seam instead of calling MPI themselves.
#pragma once

#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace strata {

// Every rank's `value`, in rank order, on every rank. Collective over `comm`, on its device's compute stream; returns
// when done (bounded like every wait).
std::vector<double> all_gather_values(Communicator& comm, double value);

// The values' sum, added pairwise in rank order (a binary tree split at the largest power of two below the count:
// (v0 + v1) + (v2 + v3) for four ranks, (v0 + v1) + v2 for three), computed the same way on every rank, so it is
// the same bits on every rank, backend and run.
double sum_over_ranks(Communicator& comm, double value);
double pairwise_sum(const double* values, int n);

// Collective: every rank says whether its part of `what` succeeded. When all did, returns. Otherwise throws on every
// rank: a rank that failed throws kIo with its own `error`; the others throw kRemote naming the ranks that failed and
// `what` (", " + `context` appended when not empty).
void all_agree(Communicator& comm, bool ok, const std::string& error, const std::string& what,
               const std::string& context = {});

// Collective: `root`'s `text` (at most `max_chars`, cut beyond) on every rank.
std::string broadcast_text(Communicator& comm, const std::string& text, int root, std::size_t max_chars = 8192);
// Collective: every rank's `text`, in rank order, on `root` (empty on the others). Lengths are exchanged first, so
// texts of any size arrive whole; point-to-point sends to `root` move them.
std::vector<std::string> gather_texts(Communicator& comm, const std::string& text, int root);
// Collective, for a verdict only `root` can reach (a lock it holds for the job): when `root` failed, every rank throws
// kIo with root's own `error`, so all ranks stop with the same message.
void agree_with_root(Communicator& comm, int root, bool ok, const std::string& error);

// "rank 1", "ranks 0,2", "ranks 0-3,5" for ranks in increasing order.
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace strata
