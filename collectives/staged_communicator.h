// StagedCommunicator: the Communicator on any device through MPI on host copies of its buffers (STRATA_COMM=mpi on a
// CUDA device, where several ranks may share one GPU, which NCCL refuses).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace strata {

// Every operation is three steps in the caller's stream order: the device buffers are copied into host staging
// (page-locked beside a CUDA device, so the copies run asynchronously), the same operation runs in place on the
// staging through an MpiCommunicator of the same ranks and name, and the results are copied back. The MPI step is a
// host task of the caller's stream (on CUDA a cudaLaunchHostFunc, so it makes no CUDA call: it runs MPI, host
// reductions and bounded waits only). The results are therefore bitwise those of MpiCommunicator on the same inputs,
// and so are its semantics: the per-stream lanes, send / recv numbered per peer whatever the stream, validation
// (STRATA_VALIDATE) failing at the stream's synchronize(), in-place forms as communicator.h allows them, and every
// wait bounded by STRATA_TIMEOUT_S. Arguments are checked, and the operation numbered, before anything is enqueued;
// this communicator and the inner one number the same operations, so sequence() is the inner one's.
// Each stream keeps a grow-only staging buffer (MemCategory::kCommBuffer on staging_device()), reused by every
// operation on that stream: the stream's order keeps one operation's copies from overlapping the next one's. An
// outgrown buffer is freed once the stream has passed its last use. Streams must be synchronised before the
// communicator is destroyed.
// On CUDA the MPI step waits for the peers inside a host function, which CUDA may run one at a time with other
// streams' host functions (and which holds back the work queued behind it): staged operations on two streams that the
// ranks reach in different orders can then wait for each other until STRATA_TIMEOUT_S names them. That, and two copies
// per operation, is the price of not needing a GPU per rank; NCCL stays the default on CUDA.
class StagedCommunicator : public Communicator {
 public:
  // Collective over `parent`, which it duplicates (and leaves to the caller).
  StagedCommunicator(Device& device, MPI_Comm parent, std::string name, CommOptions options);
  ~StagedCommunicator() override;

  const char* backend_name() const override { return "mpi-staged"; }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                      Stream& stream) override;
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, Stream& stream) override;
  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root, Stream& stream) override;
  void send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  void recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  void barrier(Stream& stream) override;
  void batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) override;
  // The child is staged too, sharing this communicator's host devices.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& label) override;

  // The host memory the staging buffers live in, with a ledger of its own (page-locked beside a CUDA device). The
  // inner MPI communicator's reduction scratch is plain host memory on a second host device: it is allocated inside
  // the MPI step, where a CUDA host task may not call cudaHostAlloc.
  const Device& staging_device() const;

 private:
  struct HostDevices;
  struct Lane;
  StagedCommunicator(Device& device, std::shared_ptr<HostDevices> host, std::unique_ptr<Communicator> inner,
                     CommOptions options);
  Lane& lane_for(Stream& stream);
  // `bytes` of the lane's staging, grown (and the outgrown buffer retired) where too small.
  char* staging(Lane& lane, std::size_t bytes, Stream& stream);
  void copy(void* dst, const void* src, std::size_t bytes, Stream& stream);

  std::shared_ptr<HostDevices> host_;    // shared with split children
  std::unique_ptr<Communicator> inner_;  // an MpiCommunicator on host_->mpi, of the same ranks and name
  std::mutex lanes_mutex_;
  std::map<std::uint64_t, std::unique_ptr<Lane>> lanes_;  // by the caller stream's id
};

}  // namespace strata
