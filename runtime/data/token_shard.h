// Token shards: the files training data is read from, and the writer that makes Strata's. Three formats, told apart by
// their first bytes:
//   strata: a 64-byte header (the 8 bytes "STRATATK", u32 version 1, u32 token width 2 or 4, u64 token count, 40 zero
//           bytes), then the tokens, little-endian (what the data tool writes);
//   llm.c:  256 int32 (1024 bytes): magic 20240520 (version 1, uint16 tokens, GPT-2) or 20240801 (version 7, uint32
//           tokens, Llama 3), the token count, zeros; then the tokens (dev/data/data_common.py's write_datafile);
//   plain:  no header, little-endian uint16 tokens (nanoGPT's train.bin and val.bin, Strata's earlier --data files).
// A shard is memory-mapped, never read whole into memory; its size must match its header exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

enum class ShardFormat { kStrata, kLlmc, kPlain };
// "strata", "llm.c", "plain uint16".
const char* shard_format_name(ShardFormat format);

struct ShardInfo {
  ShardFormat format = ShardFormat::kPlain;
  std::uint64_t header_bytes = 0;
  int token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  std::uint64_t tokens = 0;
};

// The header of `path`, checked against the file's size: kIo naming the file for a bad magic or version, a token width
// other than 2 or 4, a body shorter or longer than the header's count (a truncated shard), an odd plain file.
ShardInfo inspect_token_shard(const std::string& path);

// A shard mapped read-only (MAP_SHARED: its pages are the page cache's, dropped when memory is short).
class MappedShard {
 public:
  explicit MappedShard(const std::string& path);  // inspect_token_shard, then mmap; kIo naming the file
  ~MappedShard();
  MappedShard(MappedShard&& other) noexcept;
  MappedShard& operator=(MappedShard&&) = delete;
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;

  const std::string& path() const { return path_; }
  const ShardInfo& info() const { return info_; }
  std::uint64_t size() const { return info_.tokens; }
  std::uint32_t at(std::uint64_t i) const {
    return info_.token_bytes == 2 ? static_cast<const std::uint16_t*>(tokens_)[i]
                                  : static_cast<const std::uint32_t*>(tokens_)[i];
  }
  // Tokens [begin, begin + n) as uint32.
  void copy(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const;
  // Tokens [begin, begin + n) as uint32 through read calls, not the mapping: a scan of a large shard (its checks, its
  // fingerprint) leaves none of its pages resident in this process.
  void read(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const;

 private:
  std::string path_;
  ShardInfo info_;
  int fd_ = -1;  // kept open for read()
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
};

// Writes a Strata shard: tokens are appended, finish() writes the header's count and renames the file into place
// (a writer destroyed before finish() leaves nothing at `path`).
class TokenShardWriter {
 public:
  TokenShardWriter(std::string path, int token_bytes);  // 2 or 4
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;
  // kInvalidArgument naming the token and its index when one does not fit the token width.
  void append(const std::uint32_t* tokens, std::size_t n);
  std::uint64_t count() const { return count_; }
  void finish();

 private:
  struct Impl;
  Impl* impl_;
  std::uint64_t count_ = 0;
};

// The files a --data argument names: a file, a glob (sorted), or a comma-separated list of either. kIo naming the
// pattern when it matches nothing.
std::vector<std::string> expand_shard_paths(const std::string& spec);

}  // namespace strata
