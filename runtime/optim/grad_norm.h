// GradNorm: the global L2 norm of a sharded model's gradients and whether every one is finite. Each rank sums the
// squares of its shard's trainable elements, then the sum is all-reduced over a list of groups (the model's own
// partition groups, plus any a trainer adds, such as tensor- or pipeline-parallel groups). A per-slot mask says
// whether a slot counts on this rank, so a parameter replicated across a group's ranks is counted once, and within a
// slot that counts, runs of its elements may be left to another rank (a piece several tp ranks hold); a non-finite
// gradient anywhere, counted or not, is seen by every rank.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/optim/nonfinite.h"
#include "runtime/sharding/sharded_parameters.h"

namespace strata {

// Whether unit `unit`'s slot counts in the norm on this rank.
using NormMask = std::function<bool(int unit, const ParamSlot& slot)>;
// Within a slot the mask counts: calls counted(begin, length) for each run of its elements [begin, begin + count)
// that counts on this rank, in order. Empty: every element of the slot counts.
using NormRuns = std::function<void(const ParamSlot& slot, std::size_t begin, std::size_t count,
                                    const std::function<void(std::size_t begin, std::size_t length)>& counted)>;

struct NormResult {
  double sum_squares = 0;  // over the counted trainable elements of every rank
  bool finite = true;      // every trainable gradient element of every rank is finite
};

class GradNorm {
 public:
  // `groups` are reduced over in order (groups of one rank are skipped); an empty mask counts every slot, empty runs
  // every element of a counted slot.
  GradNorm(ShardedParameters& params, std::vector<Communicator*> groups, const NormMask& counted = {},
           const NormRuns& runs = {});
  // Collective over the groups, after ShardedParameters::wait_for_grads(); the host waits for the result (exposed
  // communication).
  NormResult compute();
  // Collective over the groups: the lowest of every rank's `local` place (none found anywhere: not found()). Every
  // rank returns the same. One 8-byte all-reduce per group, on the same stream as the norm's.
  NonFiniteAt agree(const NonFiniteAt& local);
  // Collective, after compute() found a non-finite gradient and before the gradients are zeroed: the lowest place of
  // one over every rank's trainable gradient shards (a scan of this rank's shards, then agree()).
  NonFiniteAt first_nonfinite();

 private:
  ShardedParameters& params_;
  std::vector<Communicator*> groups_;
  // Per unit, its shard's trainable elements as runs: [0] shard_begin, [1] length, [2] 0 counted, 1 not.
  std::vector<std::vector<std::array<std::size_t, 3>>> runs_;
  Buffer sums_;  // two doubles on the model's device: counted, and the rest (agree() borrows the first as an int64)
  std::unique_ptr<Event> ready_;
};

}  // namespace strata
