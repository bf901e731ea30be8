// The Communicator seam: NCCL-style collectives enqueued on a Stream. MPI (host memory) and NCCL implement it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/op_desc.h"
#include "collectives/progress_ledger.h"
#include "core/device.h"
#include "core/dtype.h"

namespace strata {

// Options every communicator takes; defaults come from strata::env().
struct CommOptions {
  double timeout_s = 600.0;  // STRATA_TIMEOUT_S: bound on every wait
  bool validate = false;     // STRATA_VALIDATE: cross-rank check of op, count, dtype before each collective
  bool shm = true;           // STRATA_SHM: the MPI backend's shared-memory path for groups on one node
  static CommOptions from_env();
};

// One operation of a batched group (Communicator::batch_send_recv).
struct P2POp {
  OpKind kind = OpKind::kSend;  // kSend or kRecv
  void* buf = nullptr;          // kSend: read; kRecv: written (buffers on the communicator's device)
  std::size_t count = 0;
  DType dtype = DType::kF32;
  int peer = -1;  // rank in this communicator; may be this rank (a send to self pairs with a recv from self in the
                  // same batch)
  static P2POp send(const void* buf, std::size_t count, DType dtype, int peer);
  static P2POp recv(void* buf, std::size_t count, DType dtype, int peer);
};

// Counts follow NCCL: all_gather takes the per-rank send count (recv holds size() * send_count elements);
// reduce_scatter takes the per-rank recv count (send holds size() * recv_count elements). Buffers live on the
// communicator's device. Every operation is enqueued on `stream` and returns at once: order it against other
// streams with events, and read results after synchronising. In-place use is allowed where NCCL allows it
// (all_gather with send == recv + rank * send_count, reduce_scatter with recv == send + rank * recv_count,
// all_reduce and broadcast with send == recv).
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "world", or the parent's name with "/c<color>" appended by split().
  const std::string& name() const { return name_; }
  Device& device() const { return device_; }
  const CommOptions& options() const { return options_; }
  virtual const char* backend_name() const = 0;  // "mpi", "nccl"

  virtual void all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) = 0;
  virtual void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                              Stream& stream) = 0;
  virtual void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                          Stream& stream) = 0;
  virtual void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                         Stream& stream) = 0;
  virtual void send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) = 0;
  virtual void recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) = 0;
  virtual void barrier(Stream& stream) = 0;
  // Issues every op together (NCCL: one ncclGroupStart/End; MPI: all nonblocking, then one bounded wait), so two
  // ranks may each send to and receive from the other in either order without deadlock. Enqueued on `stream`
  // (use a stream of its own for point-to-point traffic); later work on the stream waits for all of them. Ops are
  // numbered per peer and direction like send/recv (the k-th send to a peer, single or batched, pairs with that
  // peer's k-th recv from us). In validation mode each op's descriptor is checked against its peer's matching op
  // (kind, count, dtype): a difference throws kMismatch on both sides naming the group, both ranks and both calls.
  // The ops that do match still run, so ranks outside a mismatched pair are not left waiting. Arguments are
  // checked before any op is numbered (kInvalidArgument): kind send or recv, peer in range, a buffer when count > 0,
  // and the i-th send to self matched by the i-th recv from self of the same count and dtype. An empty batch is a
  // no-op.
  virtual void batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) = 0;

  // Collective over this communicator, on the calling thread (bounded): ranks with the same color form a new
  // communicator, ordered by (key, rank). A negative color opts out and returns nullptr. The child is named
  // name() + "/" + label, or name() + "/c<color>" without a label (logs and errors name groups so).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& label = {}) = 0;

  // Collectives issued so far (the sequence number of the next one). send / recv are numbered per peer and
  // direction instead (the k-th send to a peer pairs with that peer's k-th recv from us), since ranks outside
  // the pair do not take part.
  std::uint64_t sequence() const { return seq_; }

  // Each group rank's rank in MPI_COMM_WORLD (empty when the backend does not know them).
  const std::vector<int>& world_ranks() const { return world_ranks_; }

 protected:
  Communicator(Device& device, int rank, int size, std::string name, CommOptions options)
      : device_(device), rank_(rank), size_(size), name_(std::move(name)), options_(options) {}
  // The descriptor of the next collective; bumps the sequence number and counts it in the ProgressLedger.
  OpDesc next_op(OpKind kind, std::size_t count, DType dtype, ReduceOp op = ReduceOp::kSum, int root = -1,
                 int peer = -1);
  // Checks a batch's arguments as batch_send_recv promises (kInvalidArgument, before any numbering), then returns
  // the descriptors of its ops in order, each numbered per peer and direction.
  std::vector<OpDesc> next_p2p_batch(const std::vector<P2POp>& ops);
  // The name of a split's child (see split).
  std::string child_name(int color, const std::string& label) const;
  // kInvalidArgument naming `op`, this communicator and both devices unless `stream` is on this communicator's device.
  void check_stream(const Stream& stream, const char* op) const;
  // What waiting in `desc` needs from the other ranks, for a PeerWaitScope (collectives/progress_ledger.h); no
  // needs without world_ranks().
  PeerWait peer_wait(const OpDesc& desc, const std::string& what) const;
  void set_world_ranks(std::vector<int> ranks) { world_ranks_ = std::move(ranks); }

 private:
  Device& device_;
  int rank_;
  int size_;
  std::string name_;
  CommOptions options_;
  std::uint64_t seq_ = 0;
  std::vector<std::uint64_t> sent_;      // per peer
  std::vector<std::uint64_t> received_;  // per peer
  // This communicator's ProgressLedger counters, looked up on first use (the per-peer ones per peer).
  std::atomic<std::uint64_t>* issued_ = nullptr;
  std::vector<std::atomic<std::uint64_t>*> sent_counters_, received_counters_;
  std::vector<int> world_ranks_;
};

}  // namespace strata
