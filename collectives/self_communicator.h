// SelfCommunicator: a group of one rank, needing no MPI and no peer: every collective is the identity (a copy when
// the buffers differ) on the caller's stream, a send to self pairs with the recv from self of the same batch. For
// rehearsing a rank's protocol on a device of its own (the GPT memory planner runs one pipeline rank's step so) and
// for tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace strata {

class SelfCommunicator : public Communicator {
 public:
  explicit SelfCommunicator(Device& device, std::string name = "self", CommOptions options = {});
  const char* backend_name() const override { return "self"; }

  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                      Stream& stream) override;
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, Stream& stream) override;
  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root, Stream& stream) override;
  // A lone send or recv has no partner in a group of one: kUnsupported (batch_send_recv pairs them).
  void send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  void recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  void barrier(Stream&) override {}
  void batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& label = {}) override;

 private:
  // recv = send (count elements of dtype), on `stream`, unless they are the same buffer.
  void copy(const void* send, void* recv, std::size_t count, DType dtype, Stream& stream);
};

}  // namespace strata
