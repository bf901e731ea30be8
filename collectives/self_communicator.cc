// SelfCommunicator: the one-rank group's collectives as copies, self sends paired with self recvs. Nothing is
// counted in the ProgressLedger: no peer can wait on this group.
#include "collectives/self_communicator.h"

#include "core/error.h"

namespace strata {

SelfCommunicator::SelfCommunicator(Device& device, std::string name, CommOptions options)
    : Communicator(device, 0, 1, std::move(name), options) {}

void SelfCommunicator::copy(const void* send, void* recv, std::size_t count, DType dtype, Stream& stream) {
  if (count > 0 && send != recv) device().copy(recv, send, count * dtype_size(dtype), stream);
}

void SelfCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) {
  copy(send, recv, send_count, dtype, stream);
}

void SelfCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp,
                                      Stream& stream) {
  copy(send, recv, recv_count, dtype, stream);  // the sum, mean or maximum of one value is that value
}

void SelfCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp,
                                  Stream& stream) {
  copy(send, recv, count, dtype, stream);
}

void SelfCommunicator::broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                                 Stream& stream) {
  STRATA_CHECK(root == 0, "broadcast on '{}' (one rank) from root {}", name(), root);
  copy(send, recv, count, dtype, stream);
}

void SelfCommunicator::send(const void*, std::size_t, DType, int peer, Stream&) {
  STRATA_THROW(ErrorCode::kUnsupported,
               "send to {} on '{}' (one rank): a send to self needs its recv in the same "
               "batch_send_recv",
               peer, name());
}

void SelfCommunicator::recv(void*, std::size_t, DType, int peer, Stream&) {
  STRATA_THROW(ErrorCode::kUnsupported,
               "recv from {} on '{}' (one rank): a recv from self needs its send in the "
               "same batch_send_recv",
               peer, name());
}

void SelfCommunicator::batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) {
  std::vector<const P2POp*> sends, recvs;
  for (const P2POp& op : ops) {
    STRATA_CHECK(op.peer == 0, "batch_send_recv on '{}' (one rank): peer {}", name(), op.peer);
    (op.kind == OpKind::kSend ? sends : recvs).push_back(&op);
  }
  STRATA_CHECK(sends.size() == recvs.size(), "batch_send_recv on '{}' (one rank): {} sends to self, {} recvs", name(),
               sends.size(), recvs.size());
  for (std::size_t i = 0; i < sends.size(); ++i) {
    STRATA_CHECK(sends[i]->count == recvs[i]->count && sends[i]->dtype == recvs[i]->dtype,
                 "batch_send_recv on '{}' (one rank): send {} of {} elements, its recv of {}", name(), i,
                 sends[i]->count, recvs[i]->count);
    copy(sends[i]->buf, recvs[i]->buf, sends[i]->count, sends[i]->dtype, stream);
  }
}

std::unique_ptr<Communicator> SelfCommunicator::split(int color, int, const std::string& label) {
  if (color < 0) return nullptr;
  return std::make_unique<SelfCommunicator>(device(), child_name(color, label), options());
}

}  // namespace strata
