// ShmSegment: a shared-memory segment of one communicator lane, and the intra-node all_gather, reduce_scatter and
// all_reduce that run through it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/op_desc.h"
#include "collectives/peer_blocks.h"
#include "core/dtype.h"

namespace strata {

// Every rank of the lane's communicator owns one slot: a header of two counters and kDepth buffers of kPiece bytes.
// An operation is cut into steps of at most kPiece bytes per rank; steps are numbered across the lane's operations,
// which every rank runs in the same order with the same counts, so the numbers agree. In step g a rank waits until
// every peer has consumed step g - kDepth (the last user of buffer g % kDepth), writes its piece there, publishes
// g + 1, waits for every peer's g + 1 and reads their pieces, then marks g + 1 consumed. A peer reads a piece while it
// is still in cache and the writer fills the next buffer. Reductions combine the pieces in rank order 0..n-1 with
// reduce_pieces, bitwise as the MPI path's reduce_chunks does. all_gather writes outputs of 8 MiB and more with
// streaming stores (they skip the read-for-ownership of each line). See docs/architecture.md ("Intra-node shared
// memory") and docs/benchmarks.md (collectives).
//
// all_reduce from kHalvesBytes is a reduce-scatter step then an all-gather step per stretch of the buffer, so each
// rank reduces 1/n of it; below that one exchange, and every rank reduces the whole buffer (one wait, not two).
//
// One copy instead of two: when every rank's input of an all_gather or reduce_scatter of at least kDirectBytes per
// rank (for an all_reduce of n * kDirectBytes or more, its input and its output) lies in shared host memory
// (core/shared_host_memory.h: the CPU device puts parameters, gradients and communication buffers there), each rank
// reads its peers' inputs where they lie (PeerBlocks) and the slots carry nothing. A direct all_reduce has rank r
// reduce the r-th part from every input into its own output, then ("reduced") copy the other parts from their
// owners' outputs. The ranks first publish where their input is and wait for each other ("ready"); if any input is not
// shared, all of them take the slot path. At the end each rank says it is done reading and waits for the others
// ("done"), since a caller may overwrite its input as soon as the call returns.
//
// Waits spin briefly, then yield, then sleep in short steps; each is bounded by the timeout and runs the WaitHooks
// pollers every 5 ms (a peer that left the job ends the wait with the side channel's error), as mpi_wait does.
// A segment is used by one thread at a time: whichever runs its lane's stream (the stream's own thread, or a caller of
// synchronize() that runs the queued work itself, core/cpu_device.h).
//
// The memory is a POSIX shared-memory object that group rank 0 creates and unlinks as soon as every rank has mapped
// it (so nothing is left to clean, whatever happens later), not an MPI_Win_allocate_shared window: MPI_Win_free is
// collective and would make a communicator's destructor wait for its peers, and the Runtime destroys its
// communicators before the side channel sends the notice that this rank has left (runtime/bootstrap/runtime.cc), so
// a peer waiting for a departed rank would see a timeout instead of the departure. munmap is local.
class ShmSegment {
 public:
  static constexpr std::size_t kPiece = 256 << 10;  // bytes per rank per step
  static constexpr std::size_t kDepth = 4;          // buffers per slot
  // all_reduce of at least this many bytes goes as a reduce-scatter then an all-gather (each rank reduces 1/n of the
  // buffer); below it, one exchange and every rank reduces the whole buffer.
  static constexpr std::size_t kHalvesBytes = 64 << 10;
  // all_gather and reduce_scatter read their peers' inputs in place from this many bytes per rank (all_reduce from n
  // times as many): the copy it saves costs more than the two extra waits from there.
  static constexpr std::size_t kDirectBytes = 16 << 10;

  // Collective over `comm`, whose ranks must all share this node's memory (MPI_COMM_TYPE_SHARED); every exchange is
  // bounded by `timeout_s`. Returns nullptr on every rank, after a warning, when some rank cannot create or map the
  // segment (e.g. /dev/shm is full or not shared): the lane then stays on MPI.
  static std::unique_ptr<ShmSegment> create(MPI_Comm comm, double timeout_s, const std::string& what);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Operations that read the peers' inputs in place (for tests and logs); any thread may ask.
  std::uint64_t direct_operations() const { return direct_done_.load(std::memory_order_relaxed); }

  // Bytes of one rank's slot (the segment holds one per rank).
  std::size_t slot_bytes() const { return slot_bytes_; }

  // The Communicator's semantics (communicator.h) for a group on one node; `what` names the operation in waits.
  void all_gather(const void* send, void* recv, std::size_t bytes_per_rank, const std::string& what);
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                      const std::string& what);
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, const std::string& what);

 private:
  struct alignas(64) Counter {
    std::atomic<std::uint64_t> value;
    char pad[64 - sizeof(std::atomic<std::uint64_t>)];
  };
  struct alignas(64) BufferRef {  // where one of this rank's buffers of the current direct operation lies
    SharedBlockRef block;
    std::uint32_t shared;  // 0: not in shared host memory
  };
  struct Header {
    Counter published;  // steps whose piece is in this slot
    Counter consumed;   // steps this rank has read from every peer
    Counter ready;      // direct operations whose BufferRefs are set
    Counter reduced;    // direct all_reduces whose part this rank has reduced into its output
    Counter done;       // direct operations whose buffers this rank has finished reading
    BufferRef input;
    BufferRef output;  // a direct all_reduce's output, where peers read the reduced parts
  };
  static constexpr std::size_t kHeaderBytes = 4096;  // keeps the buffers page-aligned
  static_assert(sizeof(Header) <= kHeaderBytes, "the slot header must fit before the buffers");

  Header& header(int r) const { return *reinterpret_cast<Header*>(slots_[static_cast<std::size_t>(r)]); }
  char* buffer(int r, std::uint64_t step) const {
    return slots_[static_cast<std::size_t>(r)] + kHeaderBytes + (step % kDepth) * kPiece;
  }
  // Step `step_`: waits until buffer step_ % kDepth of this rank may be written again.
  char* begin_write(const std::string& what);
  // Publishes this rank's piece of step_, then waits until every peer has published its piece.
  void publish_and_wait(const std::string& what);
  // Marks step_ consumed by this rank and moves to the next step.
  void end_step();
  // Direct operation `direct_op_ + 1`: publishes where `send` (`bytes` of input) lies, and `recv` (`recv_bytes`)
  // when it is not null, and returns true, with inputs_[r] (and outputs_[r]) set to rank r's buffers as mapped here,
  // when every rank's are in shared host memory. Otherwise (after the done exchange) false, on every rank alike.
  bool open_buffers(const void* send, std::size_t bytes, const std::string& what, const void* recv = nullptr,
                    std::size_t recv_bytes = 0);
  // Says this rank is done reading its peers' buffers and waits until they all are.
  void close_buffers(const std::string& what);
  // close_buffers, and counts a direct operation done.
  void end_direct(const std::string& what);
  // all_reduce's three ways: the peers' inputs read in place, a reduce-scatter then an all-gather through the slots,
  // and (small buffers) one exchange after which every rank reduces the whole buffer.
  void all_reduce_direct(char* dst, std::size_t count, DType dtype, ReduceOp op, const std::string& what);
  void all_reduce_in_halves(const char* src, char* dst, std::size_t count, DType dtype, ReduceOp op,
                            const std::string& what);
  void all_reduce_whole(const char* src, char* dst, std::size_t count, DType dtype, ReduceOp op,
                        const std::string& what);
  // Waits until counter `which` of every peer reaches `target` (bounded, see the class comment).
  void wait_peers(Counter Header::*which, std::uint64_t target, const std::string& what);

  ShmSegment() = default;

  char* base_ = nullptr;  // the whole mapping: slot r at base_ + r * slot_bytes_
  std::size_t mapped_ = 0;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_ = 600;
  std::size_t slot_bytes_ = kHeaderBytes + kDepth * kPiece;
  std::vector<char*> slots_;  // each rank's slot, mapped in this process
  std::uint64_t step_ = 0;    // the next step on this lane
  bool direct_ = false;       // every rank can map every other's shared blocks (PeerBlocks::probe)
  std::uint64_t direct_op_ = 0;
  std::atomic<std::uint64_t> direct_done_{0};
  PeerBlocks peers_;
  std::vector<const char*> inputs_;
  std::vector<const char*> outputs_;
};

}  // namespace strata
