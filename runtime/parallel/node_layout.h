// node_aligned_dims: the mesh degrees of hybrid sharding by node (train_gpt --dp-shard node): each node's ranks shard
// the state (dp_shard x tp of them), the nodes replicate it (dp_replicate), so the per-unit gathers and reductions stay
// inside a node and only the replicas' gradient all-reduce crosses the network (FSDP2's HYBRID_SHARD, DeepSpeed's
// ZeRO++ hpZ).
#pragma once

#include <vector>

#include "runtime/parallel/mesh_shape.h"

namespace strata {

// From each world rank's node (Runtime::node_of_rank: the nodes MPI reports, or STRATA_RANKS_PER_NODE's). Throws
// kInvalidArgument, naming the values, when the nodes hold different numbers of ranks, tp does not divide a node's
// ranks, pp does not divide the nodes, or a shard group would span nodes (ranks not placed by node).
MeshDims node_aligned_dims(const std::vector<int>& node_of_rank, int pp, int tp);

}  // namespace strata
