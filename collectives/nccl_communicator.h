// NcclCommunicator: the Communicator seam on NCCL (non-blocking communicators), bootstrapped and validated over MPI.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/nccl_check.h"

namespace strata {

// One rank of an NCCL communicator on a CudaDevice, with a duplicate of the parent MPI communicator (the control
// communicator) for bootstrap, validation and split. The NCCL communicator is non-blocking (config.blocking = 0):
// every NCCL call returns at once and this class polls ncclCommGetAsyncError with a deadline, so no host wait is
// unbounded. While it lives, a WaitHooks poller reports NCCL's asynchronous errors from any bounded wait, and a
// WaitHooks timeout handler aborts the communicator (ncclCommAbort) so that no kernel outlives a timed-out wait.
// After an abort every operation throws kNccl.
//
// Operations follow Communicator's contract. Buffers and streams must belong to the communicator's CudaDevice,
// which must outlive it.
// Each single send / recv is its own NCCL operation (no group): a send and its recv must not each wait behind
// another send/recv of the same pair, and a rank cannot send to itself (kUnsupported). batch_send_recv issues its ops
// in one NCCL group (ncclGroupStart / ncclGroupEnd), so a pair may post its sends and recvs in either order and a rank
// may exchange with itself. A count of 0 launches nothing (but still takes a sequence number and, in validation mode,
// is validated).
//
// In validation mode (CommOptions::validate) each collective first exchanges its OpDesc over the control
// communicator and every rank throws kMismatch with the same table when the ranks disagree; send/recv exchange
// OpDescs with the peer in call order, and both throw kMismatch unless the peer's next call to us is the opposite op
// with the same count, dtype and per-peer sequence number. batch_send_recv exchanges the OpDescs of all its ops at
// once, one channel (MPI tag) per direction, so a batched send meets the peer's next batched recv from us whatever the
// order inside either batch; the ops that pair still launch when others of the batch do not. Single and batched ops
// are validated on different channels, so in validation mode a single send / recv must not pair with a batched op of
// the peer: both would wait for the other's descriptor until the timeout (without validation they pair as NCCL
// pairs any send and recv). Validation and split run on the calling thread, bounded by CommOptions::timeout_s.
class NcclCommunicator : public Communicator {
 public:
  // Collective over `parent` (left untouched): duplicates it, shares an ncclUniqueId from rank 0 and initialises
  // the NCCL communicator on `device` (which must be a CudaDevice).
  NcclCommunicator(Device& device, MPI_Comm parent, std::string name, CommOptions options);
  // Never throws: finalises and destroys the NCCL communicator when it is healthy (bounded), else aborts it.
  ~NcclCommunicator() override;

  const char* backend_name() const override { return "nccl"; }

  void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                      Stream& stream) override;
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, Stream& stream) override;
  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root, Stream& stream) override;
  void send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  void recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) override;
  // An all_reduce of one int on a small device buffer the communicator owns, enqueued on `stream`.
  void barrier(Stream& stream) override;
  // One NCCL group on `stream`, after validation on the calling thread (see above).
  void batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) override;

  // ncclCommSplit for the NCCL communicator and MPI_Comm_split for the control communicator; the child is named
  // name() + "/c<color>".
  std::unique_ptr<Communicator> split(int color, int key, const std::string& label) override;

 private:
  // Frees an MPI communicator on destruction (unless MPI is already finalised).
  class OwnedMpiComm {
   public:
    explicit OwnedMpiComm(MPI_Comm comm = MPI_COMM_NULL) : comm_(comm) {}
    ~OwnedMpiComm();
    OwnedMpiComm(OwnedMpiComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
    OwnedMpiComm& operator=(OwnedMpiComm&& o) noexcept {
      std::swap(comm_, o.comm_);  // `o` frees what this held
      return *this;
    }
    MPI_Comm get() const { return comm_; }

   private:
    MPI_Comm comm_;
  };
  // The ncclComm_t with its lock and abort state, shared with the WaitHooks (which may outlive this object by a
  // moment); aborts a communicator it still holds when destroyed. Defined in the .cc.
  struct State;

  // The split child: adopts an initialised NCCL communicator and its control communicator.
  NcclCommunicator(Device& device, OwnedMpiComm control, std::shared_ptr<State> state, int rank, int size,
                   std::string name, CommOptions options);
  // Allocates the barrier buffer and registers the WaitHooks; the last step of both constructors.
  void finish_setup();

  cudaStream_t stream_of(Stream& stream, const char* op) const;
  void validate_collective(const OpDesc& desc);
  void validate_p2p(const OpDesc& desc);
  // Returns the mismatches of a batch with its peers' ops (empty when every op pairs) and clears `run[i]` for each op
  // i that does not pair.
  std::string validate_p2p_batch(const std::vector<OpDesc>& descs, std::vector<char>& run);
  // Runs `call(comm)` under the communicator's lock and waits (bounded) while NCCL reports ncclInProgress. `describe()`
  // names the operation in errors ("all_gather seq=3 count=8 dtype=f32").
  template <typename Describe, typename Call>
  void launch_described(Describe&& describe, const char* call_name, Call&& call);
  template <typename Call>
  void launch(const OpDesc& desc, const char* call_name, Call&& call) {
    launch_described([&] { return desc.describe(); }, call_name, std::forward<Call>(call));
  }

  OwnedMpiComm control_;
  std::shared_ptr<State> state_;
  Buffer barrier_buffer_;
  std::uint64_t poller_id_ = 0;
  std::uint64_t timeout_handler_id_ = 0;
};

}  // namespace strata
