// OpDesc: what one collective call is (op, count, dtype, ...), exchanged in validation mode and logged in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata {

enum class OpKind : std::int32_t { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kSend, kRecv, kBarrier };
enum class ReduceOp : std::int32_t { kSum, kAvg, kMax };

const char* op_kind_name(OpKind k);
const char* reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(const std::string& name);  // "sum", "avg", "max"

// Plain data, so it can travel as bytes between ranks.
struct OpDesc {
  std::uint64_t seq = 0;
  OpKind kind = OpKind::kBarrier;
  ReduceOp op = ReduceOp::kSum;
  std::uint64_t count = 0;
  DType dtype = DType::kF32;
  std::int32_t root = -1;  // broadcast
  std::int32_t peer = -1;  // send / recv

  // "all_gather seq=12 count=1024 dtype=f32"
  std::string describe() const;
  void describe_to(std::string& out) const;  // appends the same to `out`
};

// Compares the descriptors gathered from every rank of a group (index = rank in the group). Returns an empty
// string when they agree, else a message naming the field and the ranks that differ from rank 0's call.
std::string compare_op_descs(const std::vector<OpDesc>& all, const std::string& group);

// Compares a send or recv of `rank` with the peer's op it pairs with: that must be the opposite op with the same
// per-peer sequence number, count and dtype, addressed to `rank`. Returns an empty string when they pair, else
// "point-to-point mismatch in group 'g': rank 0 called <mine> but peer rank 1 called <theirs> (count differs)". The
// verdict is symmetric, so both sides of a pair reach the same one.
std::string compare_p2p_descs(const OpDesc& mine, const OpDesc& theirs, int rank, const std::string& group);

}  // namespace strata
