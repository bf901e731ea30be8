// Chunk file tests (each rank in a directory of its own): ChunkWriter / ChunkReader round trips with block checksums
// at block sizes that split chunks unevenly, range reads across block boundaries, a flipped byte and a truncated file
// refused with the file, tensor and block named, the CRC-32 helpers, and write_file_atomically.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/checkpoint/chunk_file.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::runtime;

using test::ScratchDir;

// Exactly representable values that differ from chunk to chunk and element to element.
std::vector<float> values(int chunk, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(test::verifiable_int(chunk, 0, i)) + 0.25f * chunk;
  return v;
}

struct Written {
  std::vector<std::vector<float>> data;
  std::vector<ChunkRecord> chunks;
  std::uint64_t bytes = 0;
};

// Chunks of the given element counts, in that order, each holding elements [100 * k, 100 * k + n) of a box of 10^4.
Written write_chunks(const std::string& path, std::size_t block_bytes, const std::vector<std::size_t>& counts) {
  Written w;
  ChunkWriter writer(path, block_bytes);
  for (std::size_t k = 0; k < counts.size(); ++k) {
    w.data.push_back(values(static_cast<int>(k) + 1, counts[k]));
    ChunkRecord c;
    c.file = 0;
    c.box_offset = {0};
    c.box_shape = {10000};
    c.begin = 100 * k;
    c.count = counts[k];
    c.offset = writer.append(w.data.back().data(), counts[k] * 4, c.crc32);
    w.chunks.push_back(c);
  }
  writer.finish();
  w.bytes = writer.bytes();
  return w;
}

void flip_byte(const std::string& path, std::uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

// The message of the strata::Error `fn` throws with `code` ("" and a failure otherwise).
template <typename Fn>
std::string error_of(Fn&& fn, ErrorCode code) {
  std::string message;
  auto got = test::error_code_of([&] {
    try {
      fn();
    } catch (const Error& e) {
      message = e.what();
      throw;
    }
  });
  EXPECT_EQ(got, code) << message;
  return message;
}

TEST(ChunkFile, RoundTripWithBlockChecksums) {
  ScratchDir dir("chunk_roundtrip");
  // 64-byte blocks hold 16 elements; 52-byte blocks 13; 50-byte blocks split an element between two blocks.
  for (std::size_t block : {std::size_t{64}, std::size_t{52}, std::size_t{50}, std::size_t{4096}}) {
    SCOPED_TRACE(fmt::format("block {} bytes", block));
    const std::string path = dir.file(fmt::format("chunks_{}.bin", block));
    const std::vector<std::size_t> counts = {1, 16, 17, 37, 100, 3};
    const Written w = write_chunks(path, block, counts);
    std::uint64_t expected_offset = 0;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      EXPECT_EQ(w.chunks[k].offset, expected_offset) << "chunks are appended back to back";
      expected_offset += counts[k] * 4;
      EXPECT_EQ(w.chunks[k].crc32, block_crc32(w.data[k].data(), counts[k] * 4, block));
      EXPECT_EQ(w.chunks[k].crc32.size(), (counts[k] * 4 + block - 1) / block);
    }
    EXPECT_EQ(w.bytes, expected_offset);
    EXPECT_EQ(fs::file_size(path), expected_offset);

    ChunkReader reader(path, w.bytes, block);
    std::vector<char> staging(block);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      const ChunkRecord& c = w.chunks[k];
      std::vector<float> all(c.count, -1.0f);
      reader.read(c, "t", 4, c.begin, c.count, all.data(), staging.data());
      EXPECT_EQ(all, w.data[k]) << "chunk " << k;
      EXPECT_NO_THROW(reader.verify(c, "t", 4, staging.data()));
      // Every range inside the chunk: starts and ends in the middle of blocks, across one or several boundaries.
      for (std::uint64_t b = 0; b < c.count; b += 3)
        for (std::uint64_t n = 1; b + n <= c.count; n += 5) {
          std::vector<float> part(n, -1.0f);
          reader.read(c, "t", 4, c.begin + b, n, part.data(), staging.data());
          EXPECT_TRUE(std::equal(part.begin(), part.end(), w.data[k].begin() + static_cast<std::ptrdiff_t>(b)))
              << "chunk " << k << " elements [" << b << ", " << b + n << ")";
        }
    }
    // A range that is not inside the chunk is the caller's mistake.
    std::vector<float> out(20);
    EXPECT_EQ(test::error_code_of(
                  [&] { reader.read(w.chunks[2], "t", 4, w.chunks[2].begin + 1, 17, out.data(), staging.data()); }),
              ErrorCode::kInvalidArgument);
  }
}

TEST(ChunkFile, EmptyWriteAndZeroLengthFile) {
  ScratchDir dir("chunk_empty");
  const std::string path = dir.file("empty.bin");
  ChunkWriter writer(path, 64);
  std::vector<std::uint32_t> crc{1, 2};
  EXPECT_EQ(writer.append(nullptr, 0, crc), 0u);
  EXPECT_TRUE(crc.empty()) << "no bytes, no blocks";
  writer.finish();
  writer.finish();  // a second finish is a no-op
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_NO_THROW(ChunkReader(path, 0, 64));
  EXPECT_EQ(test::error_code_of([&] { writer.append("x", 1, crc); }), ErrorCode::kInvalidArgument)
      << "appending to a finished file";
}

TEST(ChunkFile, FlippedByteNamesFileTensorAndBlock) {
  ScratchDir dir("chunk_flip");
  const std::string path = dir.file("rank-00000.bin");
  const Written w = write_chunks(path, 64, {16, 100, 5});
  const ChunkRecord& c = w.chunks[1];      // 400 bytes from byte 64: blocks 0-6 of it, the last 16 bytes long
  flip_byte(path, c.offset + 2 * 64 + 7);  // inside block 2 of chunk 1 (elements 32-47)
  ChunkReader reader(path, w.bytes, 64);
  std::vector<char> staging(64);
  std::vector<float> out(100);
  // Ranges that do not touch block 2 read and verify fine: only the blocks read are checked.
  reader.read(c, "params/w", 4, c.begin, 32, out.data(), staging.data());
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + 32, w.data[1].begin()));
  reader.read(c, "params/w", 4, c.begin + 48, 52, out.data(), staging.data());
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + 52, w.data[1].begin() + 48));
  reader.read(w.chunks[0], "params/a", 4, 0, 16, out.data(), staging.data());
  reader.read(w.chunks[2], "params/c", 4, 200, 5, out.data(), staging.data());
  // One element of block 2, from the middle of the chunk: kIo naming the file, the tensor and the block.
  const std::string m =
      error_of([&] { reader.read(c, "params/w", 4, c.begin + 40, 1, out.data(), staging.data()); }, ErrorCode::kIo);
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("is corrupt"), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 'params/w'"), std::string::npos) << m;
  EXPECT_NE(m.find("block 2 (bytes 192..256)"), std::string::npos) << m;
  const std::string v = error_of([&] { reader.verify(c, "params/w", 4, staging.data()); }, ErrorCode::kIo);
  EXPECT_NE(v.find(path), std::string::npos) << v;
  EXPECT_NE(v.find("block 2"), std::string::npos) << v;
  EXPECT_NO_THROW(reader.verify(w.chunks[0], "params/a", 4, staging.data()));
  // A checksum list shorter than the chunk (an index that lies) is refused, not read past.
  ChunkRecord short_list = w.chunks[0];
  short_list.crc32.clear();
  EXPECT_EQ(test::error_code_of([&] { reader.read(short_list, "params/a", 4, 0, 1, out.data(), staging.data()); }),
            ErrorCode::kIo);
}

TEST(ChunkFile, TruncatedFileIsRefusedAtOpen) {
  ScratchDir dir("chunk_truncated");
  const std::string path = dir.file("rank-00001.bin");
  const Written w = write_chunks(path, 64, {100, 20});
  fs::resize_file(path, w.bytes - 1);
  const std::string m = error_of([&] { ChunkReader(path, w.bytes, 64); }, ErrorCode::kIo);
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("has {} bytes, the index says {}: it is truncated", w.bytes - 1, w.bytes)),
            std::string::npos)
      << m;
  // A file longer than the index says is fine (the index bounds every read).
  fs::resize_file(path, w.bytes + 10);
  EXPECT_NO_THROW(ChunkReader(path, w.bytes, 64));
  const std::string missing = error_of([&] { ChunkReader(dir.file("rank-00002.bin"), 1, 64); }, ErrorCode::kIo);
  EXPECT_NE(missing.find("cannot open checkpoint file " + dir.file("rank-00002.bin")), std::string::npos) << missing;
}

TEST(ChunkFile, WriterNamesTheFileItCannotCreate) {
  ScratchDir dir("chunk_create");
  const std::string path = dir.file("no/such/dir/rank-00000.bin");
  const std::string m = error_of([&] { ChunkWriter(path, 64); }, ErrorCode::kIo);
  EXPECT_NE(m.find("cannot create " + path), std::string::npos) << m;
}

TEST(ChunkFile, BlockCrc32AgreesWithCrc32Of) {
  EXPECT_EQ(crc32_of("123456789", 9), 0xCBF43926u) << "the CRC-32 check value (zlib, IEEE 802.3)";
  EXPECT_EQ(crc32_of(nullptr, 0), 0u);
  std::vector<unsigned char> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 37 + 11);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65},
                            std::size_t{640}, std::size_t{1000}}) {
    for (std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{4096}}) {
      const std::vector<std::uint32_t> crcs = block_crc32(data.data(), bytes, block);
      ASSERT_EQ(crcs.size(), (bytes + block - 1) / block) << bytes << " bytes in blocks of " << block;
      for (std::size_t k = 0; k < crcs.size(); ++k)
        EXPECT_EQ(crcs[k], crc32_of(data.data() + k * block, std::min(block, bytes - k * block)))
            << bytes << " bytes, block " << k << " of " << block;
      if (block >= bytes && bytes > 0) {
        EXPECT_EQ(crcs[0], crc32_of(data.data(), bytes)) << "one block: the whole CRC";
      }
    }
  }
}

TEST(ChunkFile, WriteFileAtomicallyLeavesTheOldOrTheNewText) {
  ScratchDir dir("chunk_atomic");
  const std::string path = dir.file("latest");
  write_file_atomically(path, "step-00000005\n");
  EXPECT_EQ(read_text_file(path), "step-00000005\n");
  EXPECT_FALSE(fs::exists(path + ".tmp")) << "the temporary is renamed over the file";
  // A crash before the rename leaves a half-written path.tmp: path still holds the old text, and the next write
  // replaces the leftover.
  {
    std::ofstream tmp(path + ".tmp");
    tmp << "step-0000";
  }
  EXPECT_EQ(read_text_file(path), "step-00000005\n");
  write_file_atomically(path, "step-00000010\n");
  EXPECT_EQ(read_text_file(path), "step-00000010\n");
  write_file_atomically(path, "");
  EXPECT_EQ(read_text_file(path), "");
  // A reader racing a writer that alternates two texts of different lengths sees one of them, whole, every time.
  const std::string a(300000, 'a'), b(700001, 'b');
  write_file_atomically(path, a);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 20; ++i) write_file_atomically(path, i % 2 ? a : b);
    done = true;
  });
  int reads = 0, torn = 0;
  while (!done || reads == 0) {
    const std::string got = read_text_file(path);
    ++reads;
    if (got != a && got != b) ++torn;
  }
  writer.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_EQ(read_text_file(path), a) << "the last text written";
  // A rename that cannot happen (a directory in the way) is kIo naming both paths; the directory is untouched.
  const std::string blocked = dir.file("blocked");
  fs::create_directories(blocked + "/inside");
  const std::string m = error_of([&] { write_file_atomically(blocked, "x"); }, ErrorCode::kIo);
  EXPECT_NE(m.find("cannot rename " + blocked + ".tmp."), std::string::npos) << m;
  EXPECT_NE(m.find(" to " + blocked + ":"), std::string::npos) << m;
  EXPECT_TRUE(fs::is_directory(blocked + "/inside"));
  const std::string none = error_of([&] { read_text_file(dir.file("nothing")); }, ErrorCode::kIo);
  EXPECT_NE(none.find("cannot open " + dir.file("nothing")), std::string::npos) << none;
}

}  // namespace
}  // namespace strata
