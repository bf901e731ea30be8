// CommContext: group construction for plain and hybrid sharding, and the communication streams.
#include "runtime/sharding/comm_context.h"

#include "core/logging.h"

namespace strata {

CommContext::CommContext(Device& device, Communicator& world, const ShardingOptions& options, int local_size)
    : device_(device), world_(world) {
  int k = options.shard_group_size(world.size(), local_size);
  if (options.stage == ZeroStage::kNone) {
    shard_rank_ = 0;  // nothing is sharded; gradients are all-reduced over the world
    shard_size_ = 1;
  } else if (k == world.size()) {
    shard_rank_ = world.rank();
    shard_size_ = world.size();
  } else {
    // Hybrid: consecutive blocks of k ranks shard; ranks with the same position across blocks replicate.
    // (k = 1 is plain replication with a sharded optimizer of one rank: every rank holds everything.)
    shard_group_ = world.split(world.rank() / k, world.rank());
    replica_group_ = world.split(world.rank() % k, world.rank());
    shard_rank_ = shard_group_->rank();
    shard_size_ = shard_group_->size();
    logger("shard").info("hybrid sharding: shard group '{}' ({} ranks), replica group '{}' ({} ranks)",
                         shard_group_->name(), shard_size_, replica_group_->name(), replica_group_->size());
  }
  all_gather_stream_ = device.create_stream("all_gather");
  reduce_scatter_stream_ = device.create_stream("reduce_scatter");
}

}  // namespace strata
