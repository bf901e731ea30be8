// Communicator's backend-independent parts: options from the environment and sequence numbering.
#include "collectives/communicator.h"

#include "core/env.h"

namespace strata {

CommOptions CommOptions::from_env() {
  CommOptions o;
  o.timeout_s = env().timeout_s;
  o.validate = env().validate;
  return o;
}

OpDesc Communicator::next_op(OpKind kind, std::size_t count, DType dtype, ReduceOp op, int root, int peer) {
  OpDesc d;
  if (kind == OpKind::kSend || kind == OpKind::kRecv) {
    auto& counters = kind == OpKind::kSend ? sent_ : received_;
    if (counters.empty()) counters.assign(static_cast<std::size_t>(size_), 0);
    d.seq = counters[static_cast<std::size_t>(peer)]++;
  } else {
    d.seq = seq_++;
  }
  d.kind = kind;
  d.op = op;
  d.count = count;
  d.dtype = dtype;
  d.root = root;
  d.peer = peer;
  return d;
}

}  // namespace strata
