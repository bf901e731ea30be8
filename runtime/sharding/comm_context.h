// CommContext: the data-parallel groups a sharded model gathers and reduces over, taken from a DeviceMesh, and the
// named streams its collectives run on.
#pragma once

#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharding_options.h"

namespace strata {

// The mesh's data-parallel groups as a sharded model uses them.
struct DataParallelGroups {
  Communicator* shard = nullptr;      // dp_shard (x cp): the ranks that together hold one copy of the sharded state
  Communicator* replicate = nullptr;  // dp_replicate: the ranks that hold the same shard (hybrid sharding)
  Communicator* dp = nullptr;         // both (dp_replicate x dp_shard, x cp): gradients are averaged over it
  // The mesh's dp_shard_cp, dp_replicate and dp_cp groups (dp_shard, dp_replicate and dp without context parallelism).
  static DataParallelGroups of(const DeviceMesh& mesh);
};

class CommContext {
 public:
  // ZeRO stage 0 shards nothing: gradients are all-reduced over `groups.dp` and the shard group is this rank alone.
  // Stages 1-3 reduce-scatter over `groups.shard` and, with a replicate group of more than one rank, all-reduce each
  // shard across it (hybrid sharding).
  CommContext(Device& device, const DataParallelGroups& groups, ZeroStage stage);

  Device& device() const { return device_; }
  // Every data-parallel rank: gradients are averaged over it.
  Communicator& dp_group() const { return *dp_; }
  // Ranks that together hold one copy of the sharded state (this rank alone under ZeRO stage 0: shard_size() 1).
  int shard_rank() const { return shard_ ? shard_->rank() : 0; }
  int shard_size() const { return shard_ ? shard_->size() : 1; }
  Communicator& shard_group() const;
  // Hybrid sharding: the ranks holding the same shard; nullptr when there are none besides this one.
  Communicator* replica_group() const { return replica_; }
  // The groups whose ranks hold disjoint parts of the parameters' f32 shards (the shard group when it has more than
  // one rank): a global norm sums over them.
  std::vector<Communicator*> partition_groups() const;

  Stream& all_gather_stream() const { return *all_gather_stream_; }
  Stream& reduce_scatter_stream() const { return *reduce_scatter_stream_; }

 private:
  Device& device_;
  Communicator* dp_;
  Communicator* shard_ = nullptr;    // null under stage 0
  Communicator* replica_ = nullptr;  // null without hybrid sharding
  std::unique_ptr<Stream> all_gather_stream_;
  std::unique_ptr<Stream> reduce_scatter_stream_;
};

}  // namespace strata
