// Communicator's backend-independent parts: options from the environment, sequence numbering, batch arguments.
#include "collectives/communicator.h"

#include "core/env.h"
#include "core/error.h"

namespace strata {

CommOptions CommOptions::from_env() {
  CommOptions o;
  o.timeout_s = env().timeout_s;
  o.validate = env().validate;
  o.shm = env().shm;
  return o;
}

P2POp P2POp::send(const void* buf, std::size_t count, DType dtype, int peer) {
  // The buffer is only read; P2POp holds one pointer for both directions.
  return P2POp{OpKind::kSend, const_cast<void*>(buf), count, dtype, peer};
}

P2POp P2POp::recv(void* buf, std::size_t count, DType dtype, int peer) {
  return P2POp{OpKind::kRecv, buf, count, dtype, peer};
}

OpDesc Communicator::next_op(OpKind kind, std::size_t count, DType dtype, ReduceOp op, int root, int peer) {
  OpDesc d;
  // The ledger's counters are named from this rank's side (progress_ledger.h).
  std::atomic<std::uint64_t>* counter = nullptr;
  if (kind == OpKind::kSend || kind == OpKind::kRecv) {
    const bool sending = kind == OpKind::kSend;
    auto& counts = sending ? sent_ : received_;
    auto& counters = sending ? sent_counters_ : received_counters_;
    if (counts.empty()) {
      counts.assign(static_cast<std::size_t>(size_), 0);
      counters.assign(static_cast<std::size_t>(size_), nullptr);
    }
    const auto p = static_cast<std::size_t>(peer);
    d.seq = counts[p]++;
    if (!counters[p])
      counters[p] = ProgressLedger::global().counter(fmt::format("{} {}{}", name_, sending ? "send>" : "recv<", peer));
    counter = counters[p];
  } else {
    d.seq = seq_++;
    if (!issued_) issued_ = ProgressLedger::global().counter(name_);
    counter = issued_;
  }
  ProgressLedger::raise(counter, d.seq + 1);
  d.kind = kind;
  d.op = op;
  d.count = count;
  d.dtype = dtype;
  d.root = root;
  d.peer = peer;
  return d;
}

std::string Communicator::child_name(int color, const std::string& label) const {
  return label.empty() ? fmt::format("{}/c{}", name_, color) : fmt::format("{}/{}", name_, label);
}

void Communicator::check_stream(const Stream& stream, const char* op) const {
  STRATA_CHECK(&stream.device() == &device(), "{} on communicator '{}': stream '{}' belongs to {}, not {}", op, name(),
               stream.name(), stream.device().name(), device().name());
}

PeerWait Communicator::peer_wait(const OpDesc& desc, const std::string& what) const {
  PeerWait w;
  w.what = what;
  const bool p2p = desc.kind == OpKind::kSend || desc.kind == OpKind::kRecv;
  w.label = p2p ? fmt::format("{} seq={} peer={} group={}({})", op_kind_name(desc.kind), desc.seq, desc.peer, name_,
                              size_)
                : fmt::format("{} seq={} group={}({})", op_kind_name(desc.kind), desc.seq, name_, size_);
  if (world_ranks_.size() != static_cast<std::size_t>(size_)) return w;
  if (p2p) {
    if (desc.peer == rank_) return w;
    // Our k-th send to the peer needs its k-th receive from us, and the other way round.
    std::string counter = fmt::format("{} {}{}", name_, desc.kind == OpKind::kSend ? "recv<" : "send>", rank_);
    w.needs.push_back({world_ranks_[static_cast<std::size_t>(desc.peer)], counter, desc.seq});
    return w;
  }
  for (int g = 0; g < size_; ++g)
    if (g != rank_) w.needs.push_back({world_ranks_[static_cast<std::size_t>(g)], name_, desc.seq});
  return w;
}

std::vector<OpDesc> Communicator::next_p2p_batch(const std::vector<P2POp>& ops) {
  // The i-th send to self pairs with the i-th recv from self (single send / recv refuse self, so the two per-peer
  // counters of this rank are always equal when a batch starts).
  std::vector<std::size_t> self_sends, self_recvs;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    STRATA_CHECK(op.kind == OpKind::kSend || op.kind == OpKind::kRecv,
                 "batch_send_recv on '{}': op {} is {}, but a batch holds only send and recv", name_, i,
                 op_kind_name(op.kind));
    STRATA_CHECK(op.peer >= 0 && op.peer < size_, "batch_send_recv on '{}': op {} ({}) names peer {} outside [0, {})",
                 name_, i, op_kind_name(op.kind), op.peer, size_);
    STRATA_CHECK(op.buf != nullptr || op.count == 0,
                 "batch_send_recv on '{}': op {} ({} of {} elements, peer {}) has no buffer", name_, i,
                 op_kind_name(op.kind), op.count, op.peer);
    if (op.peer == rank_) (op.kind == OpKind::kSend ? self_sends : self_recvs).push_back(i);
  }
  STRATA_CHECK(self_sends.size() == self_recvs.size(),
               "batch_send_recv on '{}': rank {} sends to itself {} times but receives from itself {} times; each send "
               "to self needs a recv from self in the same batch",
               name_, rank_, self_sends.size(), self_recvs.size());
  for (std::size_t k = 0; k < self_sends.size(); ++k) {
    const P2POp& s = ops[self_sends[k]];
    const P2POp& r = ops[self_recvs[k]];
    STRATA_CHECK(
        s.count == r.count && s.dtype == r.dtype,
        "batch_send_recv on '{}': send to self (op {}: {} x {}) and its recv from self (op {}: {} x {}) differ", name_,
        self_sends[k], s.count, dtype_name(s.dtype), self_recvs[k], r.count, dtype_name(r.dtype));
  }
  std::vector<OpDesc> descs;
  descs.reserve(ops.size());
  for (const P2POp& op : ops) descs.push_back(next_op(op.kind, op.count, op.dtype, ReduceOp::kSum, -1, op.peer));
  return descs;
}

}  // namespace strata
