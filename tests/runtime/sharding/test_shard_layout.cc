// ShardLayout tests: padding, offsets, and shard segments that cover every slot exactly once at any world size.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/sharding/shard_layout.h"

namespace strata {
namespace {

std::vector<SlotSpec> specs() {
  return {{"a", {3, 5}, true, true}, {"empty", {0}, true, true}, {"b", {7}, false, true}, {"c", {}, true, false},
          {"d", {2, 2, 2}, true, true}};
}

TEST(ShardLayout, OffsetsAndPadding) {
  ShardLayout l(specs(), 3, 4);
  ASSERT_EQ(l.slots().size(), 5u);
  EXPECT_EQ(l.slots()[0].offset, 0u);
  EXPECT_EQ(l.slots()[1].offset, 15u);
  EXPECT_EQ(l.slots()[1].numel, 0u);
  EXPECT_EQ(l.slots()[2].offset, 15u);
  EXPECT_EQ(l.slots()[3].numel, 1u);  // a scalar
  EXPECT_EQ(l.slots()[4].offset, 23u);
  EXPECT_EQ(l.numel(), 31u);
  EXPECT_EQ(l.padded_numel(), 36u);  // round_up(31, 3 * 4)
  EXPECT_EQ(l.shard_numel(), 12u);
  EXPECT_EQ(l.shard_offset(2), 24u);
  EXPECT_EQ(l.find("d"), 4u);
  EXPECT_THROW(l.find("zz"), Error);
}

TEST(ShardLayout, SegmentsCoverEverySlotOnceAtAnyWorld) {
  for (int world = 1; world <= 7; ++world) {
    for (std::size_t align : {1u, 4u, 16u}) {
      ShardLayout l(specs(), world, align);
      std::vector<int> hits(l.padded_numel(), 0);
      for (int r = 0; r < world; ++r) {
        for (const ShardSegment& s : l.segments(r)) {
          const ParamSlot& slot = l.slots()[s.slot];
          ASSERT_LE(s.slot_begin + s.length, slot.numel);
          ASSERT_LE(s.shard_begin + s.length, l.shard_numel());
          EXPECT_EQ(l.shard_offset(r) + s.shard_begin, slot.offset + s.slot_begin);
          for (std::size_t k = 0; k < s.length; ++k) ++hits[slot.offset + s.slot_begin + k];
        }
      }
      for (std::size_t i = 0; i < l.padded_numel(); ++i) EXPECT_EQ(hits[i], i < l.numel() ? 1 : 0) << i;
    }
  }
}

TEST(ShardLayout, BadDeclarations) {
  EXPECT_THROW(ShardLayout({{"x", {2}}, {"x", {3}}}, 2, 1), Error);
  EXPECT_THROW(ShardLayout({{"x", {-1}}}, 2, 1), Error);
  EXPECT_THROW(ShardLayout({{"", {1}}}, 2, 1), Error);
  EXPECT_THROW(ShardLayout({{"x", {1}}}, 0, 1), Error);
}

}  // namespace
}  // namespace strata
