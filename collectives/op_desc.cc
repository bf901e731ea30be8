// OpDesc names, description and the cross-rank comparison used by validation mode.
#include "collectives/op_desc.h"

#include <charconv>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kBarrier: return "barrier";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg") return ReduceOp::kAvg;
  if (name == "max") return ReduceOp::kMax;
  STRATA_THROW(ErrorCode::kInvalidArgument, "unknown reduction '{}' (use sum, avg or max)", name);
}

namespace {
void append_number(std::string& out, std::int64_t v) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof(digits), v).ptr;
  out.append(digits, end);
}
}  // namespace

void OpDesc::describe_to(std::string& out) const {
  // Appended by hand: a collective's in-flight line is written once per operation, on its hot path.
  out += op_kind_name(kind);
  out += " seq=";
  append_number(out, static_cast<std::int64_t>(seq));
  out += " count=";
  append_number(out, static_cast<std::int64_t>(count));
  out += " dtype=";
  out += dtype_name(dtype);
  if (kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce) (out += " op=") += reduce_op_name(op);
  if (kind == OpKind::kBroadcast) append_number(out += " root=", root);
  if (kind == OpKind::kSend || kind == OpKind::kRecv) append_number(out += " peer=", peer);
}

std::string OpDesc::describe() const {
  std::string s;
  describe_to(s);
  return s;
}

std::string compare_op_descs(const std::vector<OpDesc>& all, const std::string& group) {
  if (all.empty()) return {};
  const OpDesc& ref = all[0];
  struct Field {
    const char* name;
    bool (*same)(const OpDesc&, const OpDesc&);
  };
  static const Field fields[] = {
      {"op", [](const OpDesc& a, const OpDesc& b) { return a.kind == b.kind; }},
      {"sequence number", [](const OpDesc& a, const OpDesc& b) { return a.seq == b.seq; }},
      {"count", [](const OpDesc& a, const OpDesc& b) { return a.count == b.count; }},
      {"dtype", [](const OpDesc& a, const OpDesc& b) { return a.dtype == b.dtype; }},
      {"reduction", [](const OpDesc& a, const OpDesc& b) { return a.op == b.op; }},
      {"root", [](const OpDesc& a, const OpDesc& b) { return a.root == b.root; }},
  };
  for (const Field& f : fields) {
    std::vector<int> differing;
    for (std::size_t r = 1; r < all.size(); ++r)
      if (!f.same(ref, all[r])) differing.push_back(static_cast<int>(r));
    if (differing.empty()) continue;
    std::string msg = fmt::format("collective mismatch in group '{}': ranks {} differ from rank 0 in {}; calls:",
                                  group, fmt::join(differing, ","), f.name);
    for (std::size_t r = 0; r < all.size(); ++r) msg += fmt::format("\n  rank {}: {}", r, all[r].describe());
    return msg;
  }
  return {};
}

std::string compare_p2p_descs(const OpDesc& mine, const OpDesc& theirs, int rank, const std::string& group) {
  std::vector<const char*> differing;
  bool opposite = (mine.kind == OpKind::kSend && theirs.kind == OpKind::kRecv) ||
                  (mine.kind == OpKind::kRecv && theirs.kind == OpKind::kSend);
  if (!opposite) differing.push_back("op");
  if (theirs.seq != mine.seq) differing.push_back("sequence number");
  if (theirs.count != mine.count) differing.push_back("count");
  if (theirs.dtype != mine.dtype) differing.push_back("dtype");
  if (theirs.peer != rank) differing.push_back("peer");
  if (differing.empty()) return {};
  return fmt::format("point-to-point mismatch in group '{}': rank {} called {} but peer rank {} called {} ({} {})",
                     group, rank, mine.describe(), mine.peer, theirs.describe(), fmt::join(differing, ", "),
                     differing.size() == 1 ? "differs" : "differ");
}

}  // namespace strata
