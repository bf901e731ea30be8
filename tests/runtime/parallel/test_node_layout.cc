// node_aligned_dims (--dp-shard node): one shard group per node, replicas across nodes, and the layouts it refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/parallel/node_layout.h"

namespace strata {
namespace {

std::string refusal(const std::vector<int>& nodes, int pp, int tp) {
  try {
    node_aligned_dims(nodes, pp, tp);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "(accepted)";
}

void expect_dims(const MeshDims& d, int pp, int replicate, int shard, int tp) {
  EXPECT_EQ(d.pp, pp);
  EXPECT_EQ(d.dp_replicate, replicate);
  EXPECT_EQ(d.dp_shard, shard);
  EXPECT_EQ(d.tp, tp);
}

TEST(NodeLayout, ShardsInsideEachNodeAndReplicatesAcrossNodes) {
  const std::vector<int> two_nodes{0, 0, 0, 0, 1, 1, 1, 1};
  expect_dims(node_aligned_dims(two_nodes, 1, 1), 1, 2, 4, 1);
  expect_dims(node_aligned_dims(two_nodes, 1, 2), 1, 2, 2, 2);
  expect_dims(node_aligned_dims(two_nodes, 2, 1), 2, 1, 4, 1);  // one stage per node
  expect_dims(node_aligned_dims({0, 0, 1, 1, 2, 2, 3, 3}, 2, 1), 2, 2, 2, 1);
  expect_dims(node_aligned_dims({0, 0, 0, 0}, 1, 1), 1, 1, 4, 1);  // one node: plain sharding
  // Every shard group of the result lies on one node.
  const MeshDims d = node_aligned_dims(two_nodes, 1, 2);
  const MeshShape shape(d, 8);
  for (int r = 0; r < 8; ++r)
    for (int g : shape.group_ranks(MeshDim::kDpShard, r)) EXPECT_EQ(two_nodes[static_cast<std::size_t>(g)], two_nodes[r]);
}

TEST(NodeLayout, RefusesWhatCannotBeNodeAligned) {
  EXPECT_NE(refusal({0, 0, 0, 1}, 1, 1).find("needs the same number of ranks on every node; the 2 nodes hold 3, 1 ranks"),
            std::string::npos);
  EXPECT_NE(refusal({0, 0, 0, 0, 1, 1, 1, 1}, 1, 3).find("--tp 3 does not divide the 4 ranks of a node"),
            std::string::npos);
  EXPECT_NE(refusal({0, 0, 1, 1}, 3, 1).find("--pp 3 does not divide the 2 nodes"), std::string::npos);
  // Ranks dealt round-robin over the nodes: a shard group of consecutive ranks would cross the network.
  EXPECT_NE(refusal({0, 1, 0, 1}, 1, 1).find("the shard group of ranks 0, 1 is on nodes 0, 1"), std::string::npos);
}

}  // namespace
}  // namespace strata
