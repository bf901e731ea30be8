// NonFiniteAt: where a sharded model's first NaN or infinity sits (unit, slot, element), as a scan of this rank's
// shards finds it; GradNorm::agree turns it into the lowest place over every rank, so all ranks report the same one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/sharding/sharded_parameters.h"

namespace strata {

struct NonFiniteAt {
  int unit = -1;  // -1: every value looked at is finite
  int slot = -1;
  std::uint64_t element = 0;  // within the slot (this rank's tensor-parallel slice of it)
  float value = 0;            // NaN, +inf or -inf
  bool found() const { return unit >= 0; }
  // A total order on places (unit, then slot, then element) as one integer, and back: what ranks reduce over.
  // Units past 2047, slots past 1023 and elements past 2^40 saturate there.
  std::int64_t key() const;
  static NonFiniteAt from_key(std::int64_t key);
};

// The first element of data[0, n) that is not finite, or n; *value receives it. `data` is `device` memory: read in
// place when that is host memory, else copied to the host a bounded block at a time.
std::size_t first_nonfinite(Device& device, const float* data, std::size_t n, float* value);

// The first non-finite element of this rank's shards, in (unit, slot, element) order: the f32 masters or the gradient
// shards, over every segment of each shard or only those this rank answers for (owned_segments). Frozen slots'
// gradients are not looked at. Reads after the shards' stream has finished (the caller synchronises).
enum class ShardValues { kMaster, kGrad };
NonFiniteAt find_nonfinite(ShardedParameters& params, ShardValues which, bool owned_only);

// Collective over `comm` (three values gathered from every rank): the lowest of every rank's `local`, the same on
// every rank. For rare checks (a save, a load); GradNorm::agree is the per-step one.
NonFiniteAt lowest_over_ranks(Communicator& comm, const NonFiniteAt& local);

// "'h.0.attn.c_proj.weight' (unit 1, slot 6), element 17 is inf"; "no non-finite value" when none was found.
std::string describe_nonfinite(ShardedParameters& params, const NonFiniteAt& at);

}  // namespace strata
