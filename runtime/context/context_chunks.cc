// ContextChunks: the checks and the position of a local row.
#include "runtime/context/context_chunks.h"

#include "core/error.h"

namespace strata {

ContextChunks ContextChunks::of(int seq, int cp, int rank) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, cp >= 1, "context parallelism: cp {} must be at least 1", cp);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, seq >= 1 && seq % (2 * cp) == 0,
                    "context parallelism: the sequence ({} tokens) must be a positive multiple of 2 x cp = {} (each "
                    "rank holds two mirrored chunks of it)",
                    seq, 2 * cp);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, rank >= 0 && rank < cp, "context parallelism: rank {} of cp {}",
                    rank, cp);
  return ContextChunks{seq, cp, rank};
}

int ContextChunks::position(int i) const {
  const int n = chunk_rows();
  return i < n ? first_chunk(rank) * n + i : second_chunk(rank) * n + (i - n);
}

}  // namespace strata
