// CommContext: the groups a sharded model talks to (shard group, replica group, data-parallel world) and the
// named streams its collectives run on.
#pragma once

#include <memory>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/sharding/sharding_options.h"

namespace strata {

class CommContext {
 public:
  // Collective over `world` (it may split it for hybrid sharding).
  CommContext(Device& device, Communicator& world, const ShardingOptions& options, int local_size);

  Device& device() const { return device_; }
  // Every data-parallel rank: gradients are averaged over it.
  Communicator& world() const { return world_; }
  // Ranks that together hold one copy of the sharded state (size 1 for ZeRO stage 0).
  int shard_rank() const { return shard_rank_; }
  int shard_size() const { return shard_size_; }
  Communicator& shard_group() const { return shard_group_ ? *shard_group_ : world_; }
  // Hybrid sharding: the ranks holding the same shard in other groups; nullptr without hybrid sharding.
  Communicator* replica_group() const { return replica_group_.get(); }

  Stream& all_gather_stream() const { return *all_gather_stream_; }
  Stream& reduce_scatter_stream() const { return *reduce_scatter_stream_; }

 private:
  Device& device_;
  Communicator& world_;
  int shard_rank_ = 0;
  int shard_size_ = 1;
  std::unique_ptr<Communicator> shard_group_;    // only when it differs from world
  std::unique_ptr<Communicator> replica_group_;  // only with hybrid sharding
  std::unique_ptr<Stream> all_gather_stream_;
  std::unique_ptr<Stream> reduce_scatter_stream_;
};

}  // namespace strata
