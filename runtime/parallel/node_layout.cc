// node_aligned_dims: hybrid sharding with one shard group per node.
#include "runtime/parallel/node_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "core/error.h"

namespace strata {

MeshDims node_aligned_dims(const std::vector<int>& node_of_rank, int pp, int tp) {
  const int world = static_cast<int>(node_of_rank.size());
  STRATA_CHECK(world >= 1 && pp >= 1 && tp >= 1, "--dp-shard node: {} ranks, --pp {}, --tp {}", world, pp, tp);
  std::map<int, int> ranks_on;  // node -> ranks
  for (int n : node_of_rank) ++ranks_on[n];
  std::vector<int> counts;
  for (const auto& [node, count] : ranks_on) counts.push_back(count);
  const int per_node = counts.front();
  for (int c : counts)
    STRATA_CHECK(c == per_node,
                 "--dp-shard node needs the same number of ranks on every node; the {} nodes hold {} ranks",
                 counts.size(), fmt::join(counts, ", "));
  const int nodes = static_cast<int>(counts.size());
  STRATA_CHECK(per_node % tp == 0, "--dp-shard node: --tp {} does not divide the {} ranks of a node", tp, per_node);
  STRATA_CHECK(nodes % pp == 0, "--dp-shard node: --pp {} does not divide the {} nodes (each stage spans whole nodes)",
               pp, nodes);
  const MeshDims dims{pp, nodes / pp, per_node / tp, tp};
  const MeshShape shape(dims, world);
  for (int r = 0; r < world; ++r) {
    const std::vector<int> group = shape.group_ranks(MeshDim::kDpShard, r);
    std::vector<int> their_nodes;
    for (int g : group) their_nodes.push_back(node_of_rank[static_cast<std::size_t>(g)]);
    for (int n : their_nodes)
      STRATA_CHECK(n == their_nodes.front(),
                   "--dp-shard node: the shard group of ranks {} is on nodes {}: place consecutive ranks on a node "
                   "(mpirun --map-by ppr:{}:node, or a hostfile with slots={})",
                   fmt::join(group, ", "), fmt::join(their_nodes, ", "), per_node, per_node);
  }
  return dims;
}

}  // namespace strata
