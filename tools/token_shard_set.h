// TokenShardSet: one split of strata-data's output (train or val) as numbered Strata token shards of a fixed size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/token_shard.h"

namespace strata {

// Shards `stem` + "_000000.bin", "_000001.bin", ... of `shard_tokens` tokens each, the last one shorter. Documents
// run on from one shard into the next (as llm.c's fineweb.py): a shard boundary is not a document boundary. Each
// shard is written through a temporary (TokenShardWriter) and renamed into place only when full or at finish(): a
// run that fails leaves only complete shards. A split that receives no tokens writes no file.
class TokenShardSet {
 public:
  TokenShardSet(std::string stem, std::uint64_t shard_tokens, int token_bytes);
  ~TokenShardSet();
  TokenShardSet(const TokenShardSet&) = delete;
  TokenShardSet& operator=(const TokenShardSet&) = delete;

  static std::string shard_path(const std::string& stem, int index);

  void append(const std::uint32_t* tokens, std::size_t n);
  // Finishes the open shard, if any.
  void finish();

  std::uint64_t tokens() const { return tokens_; }
  int shards() const { return shards_; }  // started so far (finished, after finish())

 private:
  std::string stem_;
  std::uint64_t shard_tokens_;
  int token_bytes_;
  std::unique_ptr<TokenShardWriter> writer_;
  std::uint64_t tokens_ = 0;
  int shards_ = 0;
};

}  // namespace strata
