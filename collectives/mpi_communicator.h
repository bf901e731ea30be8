// MpiCommunicator: the Communicator on host memory over MPI, each operation run by the stream's thread.
#pragma once

#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/shm_segment.h"

namespace strata {

// Every stream that carries operations of this communicator gets its own duplicate of the MPI communicator (a
// "lane"), created collectively the first time the stream is used, so operations on different streams never
// interleave on one MPI communicator and each lane sees the same order on every rank. Ranks must therefore use
// streams in the same order (they do in SPMD code). Every wait polls with the STRATA_TIMEOUT_S deadline.
// send / recv do not use lanes: they run on one point-to-point duplicate, tagged with the per-peer sequence
// number, so a send on any stream pairs with the peer's matching recv on any stream. batch_send_recv is one task that
// posts all its ops on that duplicate with the same tags (so single and batched ops pair with each other) and waits
// for them together. In validation mode it exchanges every op's descriptor with the peer's matching op at once and
// posts each op as soon as its own exchange is done, so a peer making single calls is never waiting on the batch.
// Reductions run as an all-to-all of chunks followed by a rank-ordered local sum (bf16 / f16 in f32), which is
// deterministic and moves the same bytes as a ring; see docs/notes/mpi-reductions.md.
// When every rank of the group shares this node's memory (MPI_COMM_TYPE_SHARED) and CommOptions::shm is on
// (STRATA_SHM, default 1), all_gather, reduce_scatter and all_reduce run through a shared-memory segment of each lane
// instead (collectives/shm_segment.h), with the same rank-ordered reduction, so results are bitwise those of MPI.
// Streams must be synchronised before the communicator is destroyed.
class MpiCommunicator : public Communicator {
 public:
  // Collective over `parent`, which it duplicates (and leaves to the caller).
  MpiCommunicator(Device& device, MPI_Comm parent, std::string name, CommOptions options);
  ~MpiCommunicator() override;

  const char* backend_name() const override { return "mpi"; }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                      Stream& stream) override;
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                  Stream& stream) override;
  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root, Stream& stream) override;
  void send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  void recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  void barrier(Stream& stream) override;
  void batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& label) override;

  // Whether all_gather, reduce_scatter and all_reduce may take the shared-memory path: the group is on one node and
  // CommOptions::shm is on (decided at construction; a lane whose segment cannot be mapped stays on MPI).
  bool uses_shared_memory() const { return node_local_; }
  // all_gather and reduce_scatter calls, over every lane, that read the peers' inputs where they lie (every rank's
  // input in shared host memory: ShmSegment) rather than through the slots.
  std::uint64_t shm_direct_operations();

 private:
  struct Lane {
    MPI_Comm comm = MPI_COMM_NULL;
    Buffer staging;                   // grow-only scratch for reductions (MemCategory::kCommBuffer)
    std::unique_ptr<ShmSegment> shm;  // the lane's shared-memory slots, when the group is node-local
  };
  Lane& lane_for(Stream& stream);
  void* staging(Lane& lane, std::size_t bytes);
  // Enqueues body(lane, what) on `stream` behind the validation exchange, registered in the in-flight table; `what`
  // is the operation's line ("all_gather seq=12 ... group=world(2) stream=comm").
  template <class Body>
  void launch(Stream& stream, const OpDesc& desc, Body body);
  std::string describe(const OpDesc& desc, const Stream& stream) const;  // the same line
  void validate(Lane& lane, const OpDesc& desc, const std::string& what);
  // Exchanges the descriptors of a batch's ops with the peers' matching ops and calls post(i) for each op i as soon as
  // it pairs. Returns the mismatches (empty when every op pairs).
  std::string validate_batch(const std::vector<OpDesc>& descs, const std::string& what,
                             const std::function<void(std::size_t)>& post);
  // Whether an operation of `bytes` in all on the MPI path goes point to point (mpi_communicator.cc).
  bool point_to_point(std::size_t bytes) const;

  MPI_Comm control_ = MPI_COMM_NULL;  // used only by the calling thread: lane creation and split
  bool node_local_ = false;           // the shared-memory path is on (see the class comment)
  Lane p2p_;                          // send / recv from any stream thread (no staging)
  std::mutex lanes_mutex_;
  std::map<std::uint64_t, std::unique_ptr<Lane>> lanes_;  // by stream id
};

}  // namespace strata
