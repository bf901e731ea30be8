// ChunkWriter and ChunkReader: a checkpoint's data files. The writer appends chunks to one file and computes their
// block checksums; the reader reads any element range of a chunk through one bounded staging block, verifying the
// checksum of every block it touches. Both name the file in every error, and every write is followed by fsync
// before a checkpoint is committed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_index.h"

namespace strata {

std::uint32_t crc32_of(const void* data, std::size_t bytes);  // zlib's CRC-32
// CRC-32 of each block of `block_bytes` of the data (the last one possibly short; none for 0 bytes).
std::vector<std::uint32_t> block_crc32(const void* data, std::size_t bytes, std::size_t block_bytes);

class ChunkWriter {
 public:
  // Creates (truncating) `path`; throws kIo naming it.
  ChunkWriter(std::string path, std::size_t block_bytes);
  ~ChunkWriter();
  ChunkWriter(const ChunkWriter&) = delete;
  ChunkWriter& operator=(const ChunkWriter&) = delete;

  // Appends `bytes` of host memory; returns the offset it was written at and fills `crc32` with its block checksums.
  std::uint64_t append(const void* data, std::size_t bytes, std::vector<std::uint32_t>& crc32);
  // fsync and close; throws kIo (a full disk shows here or in append).
  void finish();
  std::uint64_t bytes() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::size_t block_bytes_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  int nth_file_ = 0;  // which data file of this process (for STRATA_FAULT)
};

class ChunkReader {
 public:
  // Opens `path` (expected to be `expected_bytes` long: a shorter file is a truncated checkpoint, kIo).
  ChunkReader(std::string path, std::uint64_t expected_bytes, std::size_t block_bytes);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // Copies elements [begin, begin + count) of `chunk` (elements of `esz` bytes; they must lie inside the chunk) into
  // `out`, reading whole blocks into `staging` (block_bytes of host memory) and checking each block's CRC-32: a
  // mismatch or a short read is kIo naming the file, the tensor and the block.
  void read(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz, std::uint64_t begin,
            std::uint64_t count, void* out, void* staging) const;
  // Reads block `block` of `chunk` into `staging` and checks its checksum (kIo as read()); returns its length.
  std::size_t read_block(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz, std::uint64_t block,
                         void* staging) const;
  // Reads every block of `chunk` and checks every checksum (strata-ckpt verify).
  void verify(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz, void* staging) const;
  const std::string& path() const { return path_; }
  // Bytes read from the file so far (whole blocks).
  std::uint64_t bytes_read() const { return bytes_read_; }

 private:
  std::string path_;
  std::size_t block_bytes_;
  int fd_ = -1;
  mutable std::uint64_t bytes_read_ = 0;
};

// fsync of a directory (after creating or renaming entries in it); throws kIo naming it.
void fsync_directory(const std::string& dir);
// fsync of a file written by other means (a copy); throws kIo naming it.
void fsync_file(const std::string& path);
// Writes `text` to `path` through `path.tmp`, fsync and a rename, then fsyncs the directory: `path` is either the old
// text or the new one, whatever happens.
void write_file_atomically(const std::string& path, const std::string& text);
// The whole file as text; throws kIo naming it.
std::string read_text_file(const std::string& path);

}  // namespace strata
