// CheckpointReader and slice_chunks tests (each rank in a directory of its own): tp slices of every kind of split
// (padded dimension 0, a padded inner dimension, q|k|v parts, a 3-D tensor) saved as boxes at tp 2, 3 and 4 with
// several data-parallel segments each; the index covers each tensor exactly, and any global range, one spanning
// several boxes included, reads back the global values; reads in file order touch each block once; a missing chunk
// is refused naming the elements.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/chunk_file.h"
#include "runtime/checkpoint/slice_chunk.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::runtime;

using test::ScratchDir;

// The value a checkpoint holds at global element g: exact in f32.
float global_value(std::uint64_t g) { return static_cast<float>(g) + 0.5f; }

// Tensor "params/x" of global shape split.global_shape as tp ranks 0..tp-1 would save it with `dp` data-parallel
// segments each: one file per (tp rank, segment), its chunks from slice_chunks, written from the local tensor (global
// values, padding -1); a piece several ranks hold (TpSplit::atom) by the first of them. The index is returned as
// parse() leaves it.
CheckpointIndex save_slices(const std::string& dir, const TpSplit& split, int tp, int dp, std::size_t block_bytes) {
  CheckpointIndex x;
  x.block_bytes = block_bytes;
  x.world_size = tp * dp;
  TensorRecord t{"params/x", split.global_shape, DType::kF32, {}};
  const std::vector<std::int64_t> local_shape = split.local_shape(tp);
  std::size_t local_n = 1;
  for (std::int64_t d : local_shape) local_n *= static_cast<std::size_t>(d);
  for (int r = 0; r < tp; ++r) {
    std::vector<float> local(local_n, -1.0f);
    for_each_global_run(split, r, tp, 0, local_n, [&](std::size_t l, std::size_t g, std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) local[l + i] = global_value(g + i);
    });
    for (int s = 0; s < dp; ++s) {
      const std::size_t begin = local_n * static_cast<std::size_t>(s) / static_cast<std::size_t>(dp);
      const std::size_t end = local_n * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(dp);
      const std::string name = fmt::format("rank-{}-{}.bin", r, s);
      ChunkWriter w(dir + "/" + name, block_bytes);
      const int file = static_cast<int>(x.files.size());
      for (const SliceChunk& sc : slice_chunks(split, local_shape, r, tp, begin, end - begin, /*owned_only=*/true)) {
        std::vector<float> values;
        for (const LocalRun& run : sc.local)
          values.insert(values.end(), local.begin() + static_cast<std::ptrdiff_t>(run.begin),
                        local.begin() + static_cast<std::ptrdiff_t>(run.begin + run.length));
        EXPECT_EQ(values.size(), sc.count);
        ChunkRecord c;
        c.file = file;
        c.box_offset = sc.box_offset;
        c.box_shape = sc.box_shape;
        c.begin = sc.begin;
        c.count = sc.count;
        c.offset = w.append(values.data(), values.size() * 4, c.crc32);
        t.chunks.push_back(std::move(c));
      }
      w.finish();
      x.files.push_back(FileRecord{name, w.bytes()});
    }
  }
  x.tensors.emplace(t.name, std::move(t));
  return CheckpointIndex::parse(x.serialize(), dir + "/index.json");
}

std::vector<float> expected(std::uint64_t begin, std::uint64_t count) {
  std::vector<float> v(count);
  for (std::uint64_t i = 0; i < count; ++i) v[i] = global_value(begin + i);
  return v;
}

struct SplitCase {
  const char* what;
  TpSplit split;
};

std::vector<SplitCase> split_cases() {
  return {{"vocabulary rows (dim 0, padded)", TpSplit{0, 1, {7, 6}}},
          {"columns (dim 1, padded)", TpSplit{1, 1, {4, 10}}},
          {"q|k|v columns (dim 1, 3 parts)", TpSplit{1, 3, {4, 36}}},
          {"q|k|v bias (dim 0, 3 parts)", TpSplit{0, 3, {36}}},
          {"the middle of a 3-D tensor (padded)", TpSplit{1, 1, {3, 8, 5}}},
          // Grouped-query q | k | v in atoms of a head's width 2: 8 query heads, 2 key-value heads (split at tp 2,
          // each shared by 2 ranks at tp 4), and 1 (shared by every rank: its k and v are one run with the next row's
          // q on rank 0).
          {"q|k|v columns over 2 key-value heads (atoms)", TpSplit{1, 3, {4, 24}, {16, 4, 4}, 2}},
          {"q|k|v bias over 1 key-value head (atoms)", TpSplit{0, 3, {20}, {16, 2, 2}, 2}},
          {"q|k|v columns over 1 key-value head (atoms)", TpSplit{1, 3, {3, 20}, {16, 2, 2}, 2}}};
}

TEST(SliceChunk, BoxesOfTheGptSplits) {
  // The fused q|k|v weight [32, 96] at tp 2, rank 1: one box per part, each a [32, 16] block of columns, its rows 16
  // apart in local memory (the local tensor is [32, 48]).
  const TpSplit qkv{1, 3, {32, 96}};
  std::vector<SliceChunk> c = slice_chunks(qkv, {32, 48}, 1, 2, 0, 32 * 48);
  ASSERT_EQ(c.size(), 3u);
  for (std::size_t p = 0; p < 3; ++p) {
    EXPECT_EQ(c[p].box_offset, (std::vector<std::int64_t>{0, static_cast<std::int64_t>(32 * p + 16)}));
    EXPECT_EQ(c[p].box_shape, (std::vector<std::int64_t>{32, 16}));
    EXPECT_EQ(c[p].begin, 0u);
    EXPECT_EQ(c[p].count, 512u);
    ASSERT_EQ(c[p].local.size(), 32u);
    EXPECT_EQ(c[p].local[1].begin, 48 + 16 * p);
    EXPECT_EQ(c[p].local[1].length, 16u);
  }
  // A segment starting in the middle of a row, in part 1: parts 1 and 2 start there, part 0 at the next row.
  c = slice_chunks(qkv, {32, 48}, 0, 2, 20, 100);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].begin, 16u);  // row 1 of part 0's box
  EXPECT_EQ(c[1].begin, 4u);
  EXPECT_EQ(c[2].begin, 0u);
  EXPECT_EQ(c[0].count + c[1].count + c[2].count, 100u);
  // The vocabulary of 65 rows at tp 2: rank 1 holds rows 33..64, a box of 32 rows; its 33rd local row is padding.
  const TpSplit wte{0, 1, {65, 32}};
  c = slice_chunks(wte, {33, 32}, 1, 2, 1000, 56);  // to the end of the local tensor
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].box_offset, (std::vector<std::int64_t>{33, 0}));
  EXPECT_EQ(c[0].box_shape, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(c[0].begin, 1000u);
  EXPECT_EQ(c[0].count, 24u) << "elements from 1024 are padding";
  EXPECT_TRUE(slice_chunks(wte, {33, 32}, 1, 2, 1024, 32).empty()) << "padding alone";
  // Replicated, or tp 1: the whole tensor, local == global.
  c = slice_chunks(TpSplit{}, {4, 5}, 0, 2, 3, 9);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].box_shape, (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(c[0].begin, 3u);
  c = slice_chunks(qkv, {32, 96}, 0, 1, 0, 32 * 96);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].box_shape, (std::vector<std::int64_t>{32, 96}));
  EXPECT_EQ(c[0].local.size(), 1u);
}

TEST(SliceChunk, BoxesOfAKeyValueHeadSharedByTpRanks) {
  // q | k | v [8, 16 + 4 + 4] in heads of 4: 4 query heads and 1 key-value head at tp 2. Each rank holds 2 query
  // heads and the key-value head whole: local [8, 8 + 4 + 4].
  const TpSplit qkv{1, 3, {8, 24}, {16, 4, 4}, 4};
  EXPECT_EQ(qkv.local_shape(2), (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(qkv.describe(), "dim 1 in parts 16 + 4 + 4 of [8, 24], atoms of 4");
  const TpGeometry g = qkv.geometry(2);
  EXPECT_EQ(g.share, (std::vector<std::size_t>{1, 2, 2}));
  EXPECT_EQ(g.first(0, 1), 8u);
  EXPECT_EQ(g.first(1, 1), 0u);
  EXPECT_FALSE(g.owns(1, 1));
  // Rank 1: three boxes; only its query heads' with owned_only (rank 0 saves k and v).
  std::vector<SliceChunk> c = slice_chunks(qkv, {8, 16}, 1, 2, 0, 8 * 16);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[1].box_offset, (std::vector<std::int64_t>{0, 16}));
  EXPECT_EQ(c[1].box_shape, (std::vector<std::int64_t>{8, 4}));
  c = slice_chunks(qkv, {8, 16}, 1, 2, 0, 8 * 16, /*owned_only=*/true);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].box_offset, (std::vector<std::int64_t>{0, 8}));
  // Rank 0: k, v and the next row's q are one run of the global tensor, split into their parts' boxes.
  c = slice_chunks(qkv, {8, 16}, 0, 2, 8, 16, /*owned_only=*/true);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].begin, 8u);  // row 1 of q's box
  EXPECT_EQ(c[0].count, 8u);
  EXPECT_EQ(c[1].count, 4u);
  EXPECT_EQ(c[2].count, 4u);
  // Atoms whose count neither divides tp nor is divided by it.
  const TpSplit three{1, 3, {8, 36}, {24, 6, 6}, 2};  // 12 query heads, 3 key-value heads
  EXPECT_NO_THROW(three.validate("qkv", 3));
  EXPECT_EQ(strata::test::error_code_of([&] { three.validate("qkv", 2); }), ErrorCode::kInvalidArgument)
      << "3 key-value heads at tp 2";
}

TEST(CheckpointReader, ReadsGlobalRangesAcrossTheBoxesOfTpSlices) {
  ScratchDir dir("reader_boxes");
  int k = 0;
  for (const SplitCase& sc : split_cases())
    for (int tp : {2, 3, 4})
      for (int dp : {1, 2, 3}) {
        if (sc.split.part_sizes.empty() && sc.split.parts > 1 &&
            (sc.split.global_shape[static_cast<std::size_t>(sc.split.dim)] / 3) % tp != 0)
          continue;
        try {
          sc.split.validate("x", tp);
        } catch (const Error&) {
          continue;  // atoms at tp 3
        }
        const std::string what = fmt::format("{} at tp {}, {} segments", sc.what, tp, dp);
        SCOPED_TRACE(what);
        const std::string d = dir.path() + fmt::format("/case_{}", k++);
        fs::create_directories(d);
        const CheckpointIndex index = save_slices(d, sc.split, tp, dp, 64);
        EXPECT_EQ(index.coverage_problem(), "") << "the slices' boxes tile the tensor";
        const TensorRecord& t = index.tensor("params/x");
        const std::uint64_t n = t.numel();
        std::vector<char> staging(index.block_bytes);
        {
          // The whole tensor: every box, each block read once (the pieces are read in file order).
          CheckpointReader reader(d, index, staging.data());
          std::vector<float> all(n, -7.0f);
          reader.read_f32(t, 0, n, all.data());
          EXPECT_EQ(all, expected(0, n));
          std::uint64_t file_bytes = 0;
          for (const FileRecord& f : index.files) file_bytes += f.bytes;
          EXPECT_EQ(reader.bytes_read(), file_bytes);
        }
        CheckpointReader reader(d, index, staging.data());
        // Every range of a few lengths, at every start: most cross a box's row or several boxes.
        for (std::uint64_t count : {std::uint64_t{1}, std::uint64_t{5}, std::uint64_t{13}, n / 2}) {
          for (std::uint64_t begin = 0; begin + count <= n; ++begin) {
            std::vector<float> got(count, -7.0f);
            reader.read_f32(t, begin, count, got.data());
            if (got != expected(begin, count)) {
              ADD_FAILURE() << "elements [" << begin << ", " << begin + count << ")";
              break;
            }
          }
        }
        // Runs in any order, read together.
        std::vector<float> got(n, -7.0f);
        std::vector<CheckpointReader::Run> runs;
        for (std::uint64_t b = 0; b < n; b += 3) runs.push_back({b, std::min<std::uint64_t>(3, n - b), got.data() + b});
        std::reverse(runs.begin(), runs.end());
        reader.read_f32(t, runs);
        EXPECT_EQ(got, expected(0, n));
      }
}

TEST(CheckpointReader, NamesTheElementsNoChunkHolds) {
  ScratchDir dir("reader_missing");
  const TpSplit split{1, 1, {4, 10}};  // at tp 2: boxes of columns [0, 5) and [5, 10)
  CheckpointIndex index = save_slices(dir.path(), split, 2, 1, 64);
  TensorRecord& t = index.tensors.at("params/x");
  ASSERT_EQ(t.chunks.size(), 2u);
  t.chunks.pop_back();  // the box of columns [5, 10)
  EXPECT_NE(index.coverage_problem().find("tensor 'params/x' has no chunk for 20 of its 40 elements"),
            std::string::npos)
      << index.coverage_problem();
  std::vector<char> staging(index.block_bytes);
  CheckpointReader reader(dir.path(), index, staging.data());
  std::vector<float> out(40);
  reader.read_f32(t, 0, 5, out.data());  // row 0 of the first box
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 5), expected(0, 5));
  std::string message;
  EXPECT_EQ(test::error_code_of([&] {
              try {
                reader.read_f32(t, 3, 10, out.data());
              } catch (const Error& e) {
                message = e.what();
                throw;
              }
            }),
            ErrorCode::kIo);
  EXPECT_NE(message.find("no chunk holds elements [5, 13) of tensor 'params/x'"), std::string::npos) << message;
}

}  // namespace
}  // namespace strata
