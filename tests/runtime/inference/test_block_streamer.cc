// BlockStreamer on the world as its shard group (np 1-4) and alone: every acquired slot holds its block's bytes, for
// each source and prefetch depth, with blocks of 38 bytes, which no group size divides evenly (parts of 38, 20, 16
// and 12 bytes; at np 4 the last rank holds 2 bytes and 10 of padding). The byte counts are the parts' arithmetic;
// the host threads a stream keeps copying are its upload streams'.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/communicator.h"
#include "core/error.h"
#include "runtime/inference/block_streamer.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

constexpr std::size_t kBlock = 38;
constexpr int kBlocks = 3;

std::uint8_t byte_of(int block, std::size_t at) {
  return static_cast<std::uint8_t>(block * 37 + static_cast<int>(at) * 5 + 1);
}

// Fills bytes [begin, begin + bytes) of a block, counting the bytes asked for (kDisk asks from two threads).
BlockStreamer::Fill filler(std::atomic<std::size_t>* asked) {
  return [asked](int block, std::size_t begin, std::size_t bytes, void* out) {
    EXPECT_LE(begin + bytes, kBlock);
    for (std::size_t i = 0; i < bytes; ++i) static_cast<std::uint8_t*>(out)[i] = byte_of(block, begin + i);
    *asked += bytes;
  };
}

// Two passes over the blocks: each slot's first kBlock bytes are the block's.
void expect_blocks(Device& dev, BlockStreamer& s, const char* what) {
  std::vector<std::uint8_t> got(kBlock), want(kBlock);
  for (int pass = 0; pass < 2; ++pass)
    for (int b = 0; b < kBlocks; ++b) {
      const void* slot = s.acquire(b);
      dev.compute_stream().synchronize();
      dev.copy_to_host(got.data(), slot, kBlock);
      for (std::size_t i = 0; i < kBlock; ++i) want[i] = byte_of(b, i);
      EXPECT_EQ(got, want) << what << ", pass " << pass << ", block " << b;
      s.release();
    }
}

TEST(BlockStreamer, SlotsHoldEachBlockWholeOrGathered) {
  Device& dev = test::runtime().device();
  Communicator& world = test::runtime().world();
  const int n = world.size();
  const std::size_t part = shard_part(kBlock, n);
  const std::size_t mine = std::min(part, kBlock - std::min(kBlock, static_cast<std::size_t>(world.rank()) * part));
  for (WeightSource source : {WeightSource::kHost, WeightSource::kDisk, WeightSource::kDevice})
    for (int depth : {0, 2}) {
      if (source == WeightSource::kDevice && n == 1) continue;
      const std::string what = std::string(weight_source_name(source)) + ", prefetch " + std::to_string(depth);
      std::atomic<std::size_t> asked{0};
      {
        BlockStreamer s(dev, kBlock, kBlocks, source, depth, filler(&asked), MemCategory::kParamShard, &world);
        EXPECT_EQ(s.part_bytes(), part) << what;
        EXPECT_EQ(s.slot_bytes(), static_cast<std::uint64_t>(std::min(depth + 1, kBlocks)) * part * n) << what;
        EXPECT_EQ(s.held_bytes(), source == WeightSource::kDevice ? kBlocks * part : 0) << what;
        // Disk: a reader per upload stream, two where there are two slots; memory: one stream, a host thread only
        // where the device's copies are the host's.
        const int readers = std::min(std::min(depth + 1, kBlocks), 2);
        EXPECT_EQ(s.host_copy_threads(), source == WeightSource::kDisk    ? readers
                                         : dev.kind() == DeviceKind::kCpu ? 1
                                                                          : 0)
            << what;
        expect_blocks(dev, s, what.c_str());
        const std::uint64_t consumed = 2 * kBlocks;
        EXPECT_EQ(s.bytes_streamed(), source == WeightSource::kDevice ? 0 : consumed * part) << what;
        EXPECT_EQ(s.bytes_gathered(), consumed * part * (n - 1)) << what;
      }
      // kHost and kDevice read each block's part once; kDisk every time a copy is issued (the passes' and the
      // slots' worth issued ahead).
      const std::size_t reads = source == WeightSource::kDisk ? 2 * kBlocks + std::min(depth + 1, kBlocks) : kBlocks;
      EXPECT_EQ(asked, reads * mine) << what;
    }
}

TEST(BlockStreamer, DeviceSourceNeedsAGroup) {
  std::atomic<std::size_t> asked{0};
  try {
    BlockStreamer s(test::runtime().device(), kBlock, kBlocks, WeightSource::kDevice, 1, filler(&asked));
    FAIL() << "a device source without a shard group was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("shard group"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
