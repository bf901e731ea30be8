// Device mesh tests: the shape arithmetic for every factorisation of 1..8 ranks into pp x dp_replicate x dp_shard x cp
// x tp and the bad degrees (no MPI needed), and the real groups at np 1-8 (every factorisation of the world) against
// that arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "runtime/parallel/device_mesh.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

// Every (pp, dp_replicate, dp_shard, cp, tp) whose product is n.
std::vector<MeshDims> factorisations(int n) {
  std::vector<MeshDims> out;
  for (int pp = 1; pp <= n; ++pp)
    for (int r = 1; r <= n; ++r)
      for (int s = 1; s <= n; ++s)
        for (int c = 1; c <= n; ++c)
          for (int t = 1; t <= n; ++t)
            if (pp * r * s * c * t == n) out.push_back(MeshDims{pp, r, s, t, c});
  return out;
}

std::string name(const MeshDims& d) {
  return fmt::format("pp {} x r {} x s {} x c {} x t {}", d.pp, d.dp_replicate, d.dp_shard, d.cp, d.tp);
}

// The arithmetic, checked against definitions written out here: a group along d is the set of ranks that agree on
// every other coordinate, ordered by the coordinate along d.
void check_shape(const MeshShape& m, const MeshDims& d, int n) {
  EXPECT_EQ(m.world_size(), n);
  EXPECT_EQ(m.pp(), d.pp);
  EXPECT_EQ(m.dp_replicate(), d.dp_replicate);
  EXPECT_EQ(m.dp_shard(), d.dp_shard);
  EXPECT_EQ(m.tp(), d.tp);
  EXPECT_EQ(m.cp(), d.cp);
  EXPECT_EQ(m.dp(), d.dp_replicate * d.dp_shard);
  for (int r = 0; r < n; ++r) {
    const MeshCoord c = m.coord(r);
    EXPECT_EQ(m.rank_of(c), r);
    // tp innermost, then cp; pp outermost.
    EXPECT_EQ(c.tp, r % d.tp);
    EXPECT_EQ(c.cp, r / d.tp % d.cp);
    EXPECT_EQ(c.pp, r / (n / d.pp));
    for (MeshDim dim : kAllMeshDims) {
      const std::vector<int> g = m.group_ranks(dim, r);
      ASSERT_EQ(static_cast<int>(g.size()), m.degree(dim)) << mesh_dim_name(dim);
      EXPECT_EQ(g[static_cast<std::size_t>(m.index(dim, r))], r) << mesh_dim_name(dim);
      const int id = m.group_id(dim, r);
      EXPECT_GE(id, 0);
      EXPECT_LT(id, n / m.degree(dim));
      for (std::size_t k = 0; k < g.size(); ++k) {
        EXPECT_EQ(m.group_id(dim, g[k]), id) << mesh_dim_name(dim) << " member " << g[k];
        EXPECT_EQ(m.index(dim, g[k]), static_cast<int>(k));
        const MeshCoord o = m.coord(g[k]);
        const bool same_pp = o.pp == c.pp, same_r = o.dp_replicate == c.dp_replicate,
                   same_s = o.dp_shard == c.dp_shard, same_c = o.cp == c.cp, same_t = o.tp == c.tp;
        switch (dim) {
          case MeshDim::kPp: EXPECT_TRUE(same_r && same_s && same_c && same_t); break;
          case MeshDim::kDpReplicate: EXPECT_TRUE(same_pp && same_s && same_c && same_t); break;
          case MeshDim::kDpShard: EXPECT_TRUE(same_pp && same_r && same_c && same_t); break;
          case MeshDim::kTp:
            EXPECT_TRUE(same_pp && same_r && same_s && same_c);
            EXPECT_EQ(g[k], g[0] + static_cast<int>(k)) << "a tp group is consecutive ranks";
            break;
          case MeshDim::kDp: EXPECT_TRUE(same_pp && same_c && same_t); break;
          case MeshDim::kCp: EXPECT_TRUE(same_pp && same_r && same_s && same_t); break;
          case MeshDim::kDpShardCp: EXPECT_TRUE(same_pp && same_r && same_t); break;
          case MeshDim::kDpCp: EXPECT_TRUE(same_pp && same_t); break;
        }
      }
    }
  }
  // Ranks in different groups get different ids.
  for (MeshDim dim : kAllMeshDims) {
    std::set<int> ids;
    for (int r = 0; r < n; ++r) ids.insert(m.group_id(dim, r));
    EXPECT_EQ(static_cast<int>(ids.size()), n / m.degree(dim)) << mesh_dim_name(dim);
  }
}

TEST(MeshShape, EveryFactorisationOfOneToEightRanks) {
  int meshes = 0;
  for (int n = 1; n <= 8; ++n) {
    for (const MeshDims& d : factorisations(n)) {
      SCOPED_TRACE(name(d));
      check_shape(MeshShape(d, n), d, n);
      // -1 in any position fills in the same degree.
      for (int k = 0; k < 5; ++k) {
        MeshDims f = d;
        int* deg[5] = {&f.pp, &f.dp_replicate, &f.dp_shard, &f.cp, &f.tp};
        *deg[k] = -1;
        check_shape(MeshShape(f, n), d, n);
      }
      ++meshes;
    }
  }
  EXPECT_EQ(meshes, 1 + 5 + 5 + 15 + 5 + 25 + 5 + 35);  // ordered 5-factorisations of 1..8
}

TEST(MeshShape, CpSitsBetweenDpShardAndTp) {
  // 8 ranks as dp_shard 2 x cp 2 x tp 2: a cp group is two ranks tp apart, the sharded model's group dp_shard x cp.
  const MeshShape m(MeshDims{1, 1, 2, 2, 2}, 8);
  EXPECT_EQ(m.describe(), "pp 1 x dp_replicate 1 x dp_shard 2 x cp 2 x tp 2 (8 ranks)");
  EXPECT_EQ(m.group_ranks(MeshDim::kCp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.group_ranks(MeshDim::kDpShardCp, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(m.group_ranks(MeshDim::kDp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.group_ranks(MeshDim::kDpCp, 0), (std::vector<int>{0, 2, 4, 6}));
  // Without cp the description is the four-degree one.
  EXPECT_EQ(MeshShape(MeshDims{1, 2, 2, 1}, 4).describe(), "pp 1 x dp_replicate 2 x dp_shard 2 x tp 1 (4 ranks)");
}

TEST(MeshShape, BadDegreesAreClearErrors) {
  auto message = [](const MeshDims& d, int n) {
    try {
      MeshShape m(d, n);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted " << name(d) << " on " << n;
    return std::string();
  };
  auto has = [](const std::string& text, const std::string& part) {
    EXPECT_NE(text.find(part), std::string::npos) << text;
  };
  std::string m = message(MeshDims{2, 1, 2, 2}, 4);
  has(m, "pp 2 x dp_replicate 1 x dp_shard 2 x tp 2 on 4 ranks");
  has(m, "multiply to 8, not the world size");
  m = message(MeshDims{1, -1, -1, 1}, 4);
  has(m, "pp 1 x dp_replicate -1 x dp_shard -1 x tp 1 on 4 ranks");
  has(m, "only one degree may be -1");
  m = message(MeshDims{1, 1, -1, 3}, 4);
  has(m, "multiply to 3, which does not divide the world size");
  m = message(MeshDims{0, 1, -1, 1}, 4);
  has(m, "at least 1");
  message(MeshDims{1, -2, 2, 1}, 4);
  message(MeshDims{1, 1, 3, 1}, 4);
}

// The real groups: for every factorisation of this world, each group's members (all-gathered world ranks) are the
// arithmetic's, in its order; a group of the whole world is the world communicator itself.
TEST(DeviceMesh, GroupsMatchTheArithmeticForEveryFactorisationOfTheWorld) {
  Runtime& rt = runtime();
  Device& dev = rt.device();
  const int n = rt.world_size(), me = rt.rank();
  auto stream = dev.create_stream("mesh_test");
  Buffer send = dev.allocate(4, MemCategory::kOther);
  Buffer recv = dev.allocate(static_cast<std::size_t>(n) * 4, MemCategory::kOther);
  const std::int32_t mine = me;
  dev.copy_from_host(send.data(), &mine, 4);
  for (const MeshDims& d : factorisations(n)) {
    SCOPED_TRACE(name(d));
    DeviceMesh mesh(rt, d);
    const MeshShape& shape = mesh.shape();
    EXPECT_EQ(shape.world_size(), n);
    EXPECT_EQ(&mesh.world(), &rt.world());
    for (MeshDim dim : kAllMeshDims) {
      Communicator& g = mesh.group(dim);
      EXPECT_EQ(g.size(), shape.degree(dim)) << mesh_dim_name(dim);
      EXPECT_EQ(g.rank(), shape.index(dim, me)) << mesh_dim_name(dim);
      if (shape.cp() == 1 && (dim == MeshDim::kDpShardCp || dim == MeshDim::kDpCp)) {
        EXPECT_EQ(&g, &mesh.group(dim == MeshDim::kDpShardCp ? MeshDim::kDpShard : MeshDim::kDp))
            << "without cp, " << mesh_dim_name(dim) << " is the same group";
      } else if (g.size() == n) {
        EXPECT_EQ(&g, &rt.world()) << mesh_dim_name(dim);
      } else {
        EXPECT_EQ(g.name(), fmt::format("world/{}{}", mesh_dim_name(dim), shape.group_id(dim, me)));
      }
      g.all_gather(send.data(), recv.data(), 1, DType::kI32, *stream);
      stream->synchronize();
      std::vector<std::int32_t> got(static_cast<std::size_t>(g.size()));
      dev.copy_to_host(got.data(), recv.data(), got.size() * 4);
      const std::vector<int> want = shape.group_ranks(dim, me);
      EXPECT_EQ(std::vector<int>(got.begin(), got.end()), want) << mesh_dim_name(dim);
      EXPECT_FALSE(mesh.spans_nodes(dim)) << "the test job runs on one node";
    }
    EXPECT_EQ(&mesh.tp(), &mesh.group(MeshDim::kTp));
    EXPECT_EQ(&mesh.dp(), &mesh.group(MeshDim::kDp));
    EXPECT_EQ(&mesh.cp(), &mesh.group(MeshDim::kCp));
  }
}

TEST(DeviceMesh, WrongProductIsAnErrorOnEveryRankNamingTheDegreesAndTheWorld) {
  Runtime& rt = runtime();
  const int n = rt.world_size();
  for (const MeshDims& bad : {MeshDims{1, 1, n + 1, 1}, MeshDims{1, -1, 1, -1}}) {
    std::string message;
    try {
      DeviceMesh mesh(rt, bad);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(fmt::format("[rank {}/{}]", rt.rank(), n)), std::string::npos) << message;
    EXPECT_NE(message.find(fmt::format("x dp_shard {} x tp {} on {} ranks", bad.dp_shard, bad.tp, n)),
              std::string::npos)
        << message;
  }
  EXPECT_TRUE(test::all_ranks(true)) << "every rank got here (no rank hung in a split)";
}

// A node map of two ranks per node: a tp group of four spans two nodes, a tp group of two does not.
TEST(DeviceMesh, SaysWhenAGroupSpansNodes) {
  Runtime& rt = runtime();
  const int n = rt.world_size();
  if (n < 4 || n % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  std::vector<int> nodes;
  for (int r = 0; r < n; ++r) nodes.push_back(r / 2);
  DeviceMesh wide(rt.world(), MeshDims{1, 1, -1, 4}, nodes);
  EXPECT_TRUE(wide.spans_nodes(MeshDim::kTp));
  EXPECT_TRUE(wide.spans_nodes(MeshDim::kPp) == false);
  DeviceMesh narrow(rt.world(), MeshDims{1, 1, -1, 2}, nodes);
  EXPECT_FALSE(narrow.spans_nodes(MeshDim::kTp));
  EXPECT_EQ(narrow.spans_nodes(MeshDim::kDpShard), n > 2);
  EXPECT_NE(narrow.describe().find(fmt::format("{} nodes", n / 2)), std::string::npos) << narrow.describe();
}

}  // namespace
}  // namespace strata
