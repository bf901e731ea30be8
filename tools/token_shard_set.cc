// TokenShardSet: numbered token shards of one split (token_shard_set.h).
#include "tools/token_shard_set.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

TokenShardSet::TokenShardSet(std::string stem, std::uint64_t shard_tokens, int token_bytes)
    : stem_(std::move(stem)), shard_tokens_(shard_tokens), token_bytes_(token_bytes) {
  STRATA_CHECK(shard_tokens_ > 0, "{}: shard size 0 tokens", stem_);
}

TokenShardSet::~TokenShardSet() = default;  // an unfinished shard's temporary is removed by its writer

std::string TokenShardSet::shard_path(const std::string& stem, int index) {
  return fmt::format("{}_{:06d}.bin", stem, index);
}

void TokenShardSet::append(const std::uint32_t* tokens, std::size_t n) {
  while (n > 0) {
    if (!writer_) writer_ = std::make_unique<TokenShardWriter>(shard_path(stem_, shards_++), token_bytes_);
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, shard_tokens_ - writer_->count()));
    writer_->append(tokens, k);
    tokens += k;
    n -= k;
    tokens_ += k;
    if (writer_->count() == shard_tokens_) finish();
  }
}

void TokenShardSet::finish() {
  if (!writer_) return;
  writer_->finish();
  writer_.reset();
}

}  // namespace strata
