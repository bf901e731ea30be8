// NcclCommunicator: MPI bootstrap, non-blocking NCCL calls polled against a deadline, validation, split, teardown.
#include "collectives/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "collectives/mpi_util.h"
#include "core/backoff.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/in_flight.h"
#include "core/logging.h"
#include "core/wait_hooks.h"

namespace strata {
namespace {
using Clock = std::chrono::steady_clock;

constexpr int kP2pValidationTag = 0x5354;  // control-communicator tag of the send/recv OpDesc exchange
// Control-communicator tags of the batch_send_recv OpDesc exchange, one per direction.
constexpr int kP2pBatchSendTag = 0x5355;  // a batched send's OpDesc, from its sender
constexpr int kP2pBatchRecvTag = 0x5356;  // a batched recv's OpDesc, from its receiver
constexpr auto kAbortLockWait = std::chrono::seconds(5);  // a timeout handler waits this long for a busy comm
// ncclCommAbort frees device memory, which waits for all work on the device: a host callback that never returns,
// or a kernel NCCL does not own, would hold it indefinitely. Its caller waits this long and then leaves it running.
constexpr auto kAbortCallWait = std::chrono::seconds(3);

static_assert(std::is_trivially_copyable_v<OpDesc>, "OpDesc travels between ranks as bytes");

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kF64: return ncclFloat64;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "dtype value {} has no NCCL type", static_cast<int>(t));
}

// The NCCL operation for `op` in a communicator of `size` ranks. One rank's average is its input, which ncclSum
// copies exactly: the one-rank ncclAvg of the NCCL in the H200 image (a pip wheel) left the elements from 2^20 on
// unwritten (all_reduce and reduce_scatter of 2^20 + 3 elements, every dtype; tests/collectives/cuda/test_nccl_communicator.cc).
ncclRedOp_t nccl_op(ReduceOp op, int size) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return size == 1 ? ncclSum : ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "reduction value {} has no NCCL operation", static_cast<int>(op));
}

// Waits for `n` MPI requests, bounded by `timeout_s`, running the WaitHooks pollers meanwhile.
void wait_mpi(MPI_Request* reqs, int n, double timeout_s, const std::string& what) {
  poll_until(
      [&] {
        int done = 0;
        STRATA_CHECK_MPI(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        return done != 0;
      },
      [&] { return what; }, timeout_s);
}

// Posts non-blocking MPI operations on `storage` (post returns how many requests, at most 2, it started) and waits
// for them. On failure MPI may still write into `storage`, so it is leaked rather than freed: a failed exchange
// (timeout, MPI error) ends the process anyway.
template <typename Storage, typename Post>
void mpi_exchange(std::unique_ptr<Storage>& storage, Post&& post, double timeout_s, const std::string& what) {
  std::array<MPI_Request, 2> reqs{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  try {
    int n = post(*storage, reqs.data());
    wait_mpi(reqs.data(), n, timeout_s, what);
  } catch (...) {
    (void)storage.release();
    throw;
  }
}

// Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress. Throws kNccl on an error, kTimeout after
// `timeout_s` (the WaitHooks timeout handler, or the owner's State, then aborts the communicator).
void wait_comm_ready(ncclComm_t comm, double timeout_s, const std::string& what) {
  ncclResult_t state = ncclInProgress;
  STRATA_CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
  if (state == ncclInProgress) {
    InFlightScope scope(what);
    const auto deadline = Clock::now() + to_duration(timeout_s);
    Backoff backoff;
    while (state == ncclInProgress) {
      if (Clock::now() >= deadline) throw_timeout(__FILE__, __LINE__, what, timeout_s);
      backoff.pause();
      STRATA_CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
    }
  }
  STRATA_CHECK_CODE(ErrorCode::kNccl, state == ncclSuccess, "{} failed: {}", what, detail::nccl_error_text(state));
}

void log_op(const std::string& comm_name, const OpDesc& desc, const Stream& stream) {
  spdlog::logger& log = logger("comm");
  if (log.should_log(spdlog::level::debug)) {
    log.debug("'{}' (nccl): {} on stream '{}'", comm_name, desc.describe(), stream.name());
  }
}
}  // namespace

// ---- State ------------------------------------------------------------------------------------------------------

struct NcclCommunicator::State {
  State(std::string comm_name, int device_index) : name(std::move(comm_name)), cuda_device(device_index) {}
  ~State() { abort("it was released without a clean shutdown"); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // The communicator, for a caller holding `mutex`; throws kNccl once it was aborted.
  ncclComm_t usable() const {
    STRATA_CHECK_CODE(ErrorCode::kNccl, comm != nullptr, "NCCL communicator '{}' is unusable: it was aborted ({})",
                      name, abort_reason.empty() ? "before it was initialised" : abort_reason);
    return comm;
  }

  // The WaitHooks poller: throws kNccl when NCCL reports an asynchronous error. A communicator busy on another
  // thread is skipped: that thread polls it itself.
  void poll_async_error() {
    std::unique_lock<std::recursive_timed_mutex> lock(mutex, std::try_to_lock);
    if (!lock.owns_lock() || comm == nullptr) return;
    ncclResult_t state = ncclSuccess;
    STRATA_CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess || state == ncclInProgress) return;
    STRATA_THROW(ErrorCode::kNccl, "NCCL communicator '{}' reported an asynchronous error: {}", name,
                 detail::nccl_error_text(state));
  }

  void abort(const std::string& why) noexcept {
    try {
      std::unique_lock<std::recursive_timed_mutex> lock(mutex, std::defer_lock);
      if (!lock.try_lock_for(kAbortLockWait)) {
        logger("comm").error("could not abort NCCL communicator '{}' ({}): it stayed busy on another thread", name,
                             why);
        return;
      }
      abort_locked(why);
    } catch (...) {  // a timeout handler and a destructor must not throw
    }
  }

  // Finalises (bounded by timeout_s) and destroys a healthy communicator, aborts an unhealthy one. Never throws.
  void shutdown(double timeout_s) noexcept {
    try {
      std::unique_lock<std::recursive_timed_mutex> lock(mutex, std::defer_lock);
      if (!lock.try_lock_for(to_duration(timeout_s))) {
        logger("comm").error("NCCL communicator '{}' stayed busy on another thread; not finalised", name);
        return;  // ~State aborts it
      }
      if (comm == nullptr) return;
      (void)cudaSetDevice(cuda_device);
      ncclResult_t state = ncclInProgress;
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclSuccess) {
        abort_locked(fmt::format("it was in state '{}' at shutdown", ncclGetErrorString(state)));
        return;
      }
      ncclResult_t rc = ncclCommFinalize(comm);
      if (rc != ncclSuccess && rc != ncclInProgress) {
        abort_locked("call to ncclCommFinalize failed: " + detail::nccl_error_text(rc));
        return;
      }
      const auto deadline = Clock::now() + to_duration(timeout_s);
      Backoff backoff;
      for (;;) {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
        if (state != ncclInProgress || Clock::now() >= deadline) break;
        backoff.pause();
      }
      if (state == ncclInProgress) {
        abort_locked(fmt::format("ncclCommFinalize did not finish within {} s; in flight on this rank:\n{}", timeout_s,
                                 InFlightTable::global().describe()));
        return;
      }
      if (state != ncclSuccess) {
        abort_locked("ncclCommFinalize failed: " + detail::nccl_error_text(state));
        return;
      }
      rc = ncclCommDestroy(comm);  // blocking even on a non-blocking communicator; local once finalised
      comm = nullptr;
      if (rc != ncclSuccess) {
        logger("comm").warn("call to ncclCommDestroy for '{}' failed: {}", name, detail::nccl_error_text(rc));
      }
    } catch (...) {
    }
  }

  std::recursive_timed_mutex mutex;  // recursive: a timeout inside a locked wait runs abort() on the same thread
  ncclComm_t comm = nullptr;
  std::string name;
  int cuda_device;
  std::string abort_reason;  // why the communicator was aborted

 private:
  // Aborts on a thread of its own, waited for at most kAbortCallWait: the communicator is unusable from here on
  // either way, and a timed-out wait must throw within its bound.
  void abort_locked(const std::string& why) {
    if (comm == nullptr) return;
    ncclComm_t doomed = comm;
    comm = nullptr;
    abort_reason = why;
    struct Call {
      std::mutex m;
      std::condition_variable cv;
      bool done = false;
      ncclResult_t rc = ncclSuccess;
    };
    auto call = std::make_shared<Call>();
    std::thread([call, doomed, device = cuda_device] {
      (void)cudaSetDevice(device);
      ncclResult_t rc = ncclCommAbort(doomed);
      std::lock_guard<std::mutex> lock(call->m);
      call->rc = rc;
      call->done = true;
      call->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(call->m);
    if (!call->cv.wait_for(lock, kAbortCallWait, [&] { return call->done; })) {
      logger("comm").warn("aborted NCCL communicator '{}': {} (ncclCommAbort still running after {} s, left to finish: "
                          "it waits for the device's other work)",
                          name, why, kAbortCallWait.count());
      return;
    }
    logger("comm").warn("aborted NCCL communicator '{}': {}{}", name, why,
                        call->rc == ncclSuccess ? "" : " (ncclCommAbort: " + detail::nccl_error_text(call->rc) + ")");
  }
};

// ---- construction and teardown ----------------------------------------------------------------------------------

NcclCommunicator::OwnedMpiComm::~OwnedMpiComm() {
  if (comm_ == MPI_COMM_NULL) return;
  int finalized = 1;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) (void)MPI_Comm_free(&comm_);
}

NcclCommunicator::NcclCommunicator(Device& device, MPI_Comm parent, std::string name, CommOptions options)
    : Communicator(device, mpi_rank(parent), mpi_size(parent), std::move(name), options) {
  STRATA_CHECK(device.kind() == DeviceKind::kCuda, "NCCL communicator '{}' needs a CUDA device, got {}", this->name(),
               device.name());
  const double timeout_s = this->options().timeout_s;

  // The control communicator, duplicated without an unbounded wait.
  auto dup = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  mpi_exchange(
      dup,
      [&](MPI_Comm& out, MPI_Request* reqs) {
        STRATA_CHECK_MPI(MPI_Comm_idup(parent, &out, &reqs[0]));
        return 1;
      },
      timeout_s, fmt::format("MPI_Comm_idup of the parent of NCCL communicator '{}'", this->name()));
  control_ = OwnedMpiComm(*dup);

  // Rank 0's ncclUniqueId, with a flag so that the other ranks fail at once when rank 0 could not make one.
  struct IdMessage {
    std::int32_t ok;
    ncclUniqueId id;
  };
  auto message = std::make_unique<IdMessage>();
  std::memset(message.get(), 0, sizeof(IdMessage));
  std::string id_error;
  if (rank() == 0) {
    ncclResult_t rc = ncclGetUniqueId(&message->id);
    message->ok = rc == ncclSuccess ? 1 : 0;
    if (rc != ncclSuccess) id_error = "call to ncclGetUniqueId failed: " + detail::nccl_error_text(rc);
  }
  mpi_exchange(
      message,
      [&](IdMessage& m, MPI_Request* reqs) {
        STRATA_CHECK_MPI(MPI_Ibcast(&m, sizeof(IdMessage), MPI_BYTE, 0, control_.get(), &reqs[0]));
        return 1;
      },
      timeout_s, fmt::format("MPI_Ibcast of the ncclUniqueId of NCCL communicator '{}'", this->name()));
  if (!id_error.empty()) STRATA_THROW(ErrorCode::kNccl, "{}", id_error);
  STRATA_CHECK_CODE(ErrorCode::kRemote, message->ok == 1,
                    "rank 0 of NCCL communicator '{}' could not create an ncclUniqueId", this->name());

  // The NCCL communicator, non-blocking so that its initialisation is polled with a deadline.
  STRATA_CHECK_CUDA(cudaSetDevice(device.index()));
  state_ = std::make_shared<State>(this->name(), device.index());
  {
    std::lock_guard<std::recursive_timed_mutex> lock(state_->mutex);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&state_->comm, size(), message->id, rank(), &config);
    STRATA_CHECK_CODE(ErrorCode::kNccl, rc == ncclSuccess || rc == ncclInProgress,
                      "call to ncclCommInitRankConfig for '{}' (rank {} of {}) failed: {}", this->name(), rank(),
                      size(), detail::nccl_error_text(rc));
    STRATA_CHECK_CODE(ErrorCode::kNccl, state_->comm != nullptr, "ncclCommInitRankConfig for '{}' gave no communicator",
                      this->name());
    wait_comm_ready(state_->comm, timeout_s,
                    fmt::format("ncclCommInitRankConfig of '{}' (rank {} of {})", this->name(), rank(), size()));
  }  // on any failure above, ~State aborts the half-made communicator
  finish_setup();
  int version = 0;
  (void)ncclGetVersion(&version);
  logger("comm").info("NCCL communicator '{}' ready: rank {} of {} on {}, NCCL {}.{}.{}{}", this->name(), rank(),
                      size(), device.name(), version / 10000, version / 100 % 100, version % 100,
                      this->options().validate ? " (validation on)" : "");
}

NcclCommunicator::NcclCommunicator(Device& device, OwnedMpiComm control, std::shared_ptr<State> state, int rank,
                                   int size, std::string name, CommOptions options)
    : Communicator(device, rank, size, std::move(name), options),
      control_(std::move(control)),
      state_(std::move(state)) {
  finish_setup();
}

void NcclCommunicator::finish_setup() {
  barrier_buffer_ = device().allocate(sizeof(std::int32_t), MemCategory::kCommBuffer);
  const std::int32_t zero = 0;
  device().copy_from_host(barrier_buffer_.data(), &zero, sizeof(zero));
  // The hooks hold the State, not `this`: a poller snapshot may run a moment after this object is gone.
  std::shared_ptr<State> state = state_;
  timeout_handler_id_ = WaitHooks::add_timeout_handler([state] { state->abort("a bounded wait timed out"); });
  try {
    poller_id_ = WaitHooks::add_poller([state] { state->poll_async_error(); });
  } catch (...) {
    WaitHooks::remove(timeout_handler_id_);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  try {
    WaitHooks::remove(poller_id_);
    WaitHooks::remove(timeout_handler_id_);
  } catch (...) {  // a destructor must not throw; the State below still shuts the communicator down
  }
  state_->shutdown(options().timeout_s);
}

// ---- operations -------------------------------------------------------------------------------------------------

cudaStream_t NcclCommunicator::stream_of(Stream& stream, const char* op) const {
  STRATA_CHECK(&stream.device() == &device(),
               "{} on NCCL communicator '{}' was given stream '{}' of {}, but the communicator lives on {}", op, name(),
               stream.name(), stream.device().name(), device().name());
  void* handle = stream.native_handle();
  STRATA_CHECK(handle != nullptr, "{} on NCCL communicator '{}' was given stream '{}', which is not a CUDA stream", op,
               name(), stream.name());
  return static_cast<cudaStream_t>(handle);
}

template <typename Describe, typename Call>
void NcclCommunicator::launch_described(Describe&& describe, const char* call_name, Call&& call) {
  std::lock_guard<std::recursive_timed_mutex> lock(state_->mutex);
  ncclComm_t comm = state_->usable();
  STRATA_CHECK_CUDA(cudaSetDevice(device().index()));
  ncclResult_t rc = call(comm);
  if (rc == ncclInProgress) {
    // A non-blocking communicator may return before the operation is enqueued; it must be ready before the next call.
    wait_comm_ready(comm, options().timeout_s, fmt::format("{} on '{}': {}", describe(), name(), call_name));
  } else if (rc != ncclSuccess) {
    STRATA_THROW(ErrorCode::kNccl, "call to {} for {} on '{}' failed: {}", call_name, describe(), name(),
                 detail::nccl_error_text(rc));
  }
}

void NcclCommunicator::validate_collective(const OpDesc& desc) {
  struct Exchange {
    OpDesc mine;
    std::vector<OpDesc> all;
  };
  auto ex = std::make_unique<Exchange>();
  ex->mine = desc;
  ex->all.resize(static_cast<std::size_t>(size()));
  mpi_exchange(
      ex,
      [&](Exchange& e, MPI_Request* reqs) {
        STRATA_CHECK_MPI(MPI_Iallgather(&e.mine, sizeof(OpDesc), MPI_BYTE, e.all.data(), sizeof(OpDesc), MPI_BYTE,
                                        control_.get(), &reqs[0]));
        return 1;
      },
      options().timeout_s, fmt::format("validation of {} on '{}'", desc.describe(), name()));
  std::string mismatch = compare_op_descs(ex->all, name());
  if (!mismatch.empty()) STRATA_THROW(ErrorCode::kMismatch, "{}", mismatch);
}

void NcclCommunicator::validate_p2p(const OpDesc& desc) {
  struct Exchange {
    OpDesc mine;
    OpDesc theirs;
  };
  auto ex = std::make_unique<Exchange>();
  ex->mine = desc;
  mpi_exchange(
      ex,
      [&](Exchange& e, MPI_Request* reqs) {
        STRATA_CHECK_MPI(
            MPI_Irecv(&e.theirs, sizeof(OpDesc), MPI_BYTE, desc.peer, kP2pValidationTag, control_.get(), &reqs[0]));
        STRATA_CHECK_MPI(
            MPI_Isend(&e.mine, sizeof(OpDesc), MPI_BYTE, desc.peer, kP2pValidationTag, control_.get(), &reqs[1]));
        return 2;
      },
      options().timeout_s, fmt::format("validation of {} on '{}'", desc.describe(), name()));
  // The exchange pairs the pair's calls in the order each side makes them, which is also the order ungrouped NCCL
  // point-to-point operations must match in.
  const OpDesc& theirs = ex->theirs;
  std::string mismatch = compare_p2p_descs(desc, theirs, rank(), name());
  if (!mismatch.empty()) {
    STRATA_THROW(ErrorCode::kMismatch, "{}{}", mismatch,
                 theirs.kind == desc.kind
                     ? "; each side's next call to the other must be the opposite op: an ungrouped "
                       "NCCL send waits for its recv (batch_send_recv pairs in either order)"
                     : "");
  }
}

std::string NcclCommunicator::validate_p2p_batch(const std::vector<OpDesc>& descs, std::vector<char>& run) {
  // Each op sends its OpDesc on its direction's tag and receives the peer's matching op on the other one. MPI keeps
  // messages of one tag between two ranks in order, so our k-th batched send meets the peer's k-th batched recv from us
  // (and the other way round), whatever the order of the ops inside either batch.
  struct Exchange {
    std::vector<OpDesc> mine;
    std::vector<OpDesc> theirs;
    std::vector<MPI_Request> reqs;
  };
  const std::size_t n = descs.size();
  auto ex = std::make_unique<Exchange>();
  ex->mine = descs;
  ex->theirs.resize(n);
  ex->reqs.assign(2 * n, MPI_REQUEST_NULL);
  try {
    for (std::size_t i = 0; i < n; ++i) {
      const OpDesc& d = ex->mine[i];
      const bool send = d.kind == OpKind::kSend;
      STRATA_CHECK_MPI(MPI_Isend(&d, sizeof(OpDesc), MPI_BYTE, d.peer, send ? kP2pBatchSendTag : kP2pBatchRecvTag,
                                 control_.get(), &ex->reqs[2 * i]));
      STRATA_CHECK_MPI(MPI_Irecv(&ex->theirs[i], sizeof(OpDesc), MPI_BYTE, d.peer,
                                 send ? kP2pBatchRecvTag : kP2pBatchSendTag, control_.get(), &ex->reqs[2 * i + 1]));
    }
    wait_mpi(ex->reqs.data(), static_cast<int>(ex->reqs.size()), options().timeout_s,
             fmt::format("validation of batch_send_recv of {} ops on '{}'", n, name()));
  } catch (...) {
    (void)ex.release();  // MPI may still write into it; a failed exchange ends the process anyway
    throw;
  }
  std::string mismatches;
  for (std::size_t i = 0; i < n; ++i) {
    std::string m = compare_p2p_descs(ex->mine[i], ex->theirs[i], rank(), name());
    if (m.empty()) continue;
    run[i] = 0;
    mismatches += (mismatches.empty() ? "" : "\n") + m;
  }
  return mismatches;
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) {
  ncclDataType_t type = nccl_dtype(dtype);
  cudaStream_t s = stream_of(stream, "all_gather");
  OpDesc desc = next_op(OpKind::kAllGather, send_count, dtype);
  if (options().validate) validate_collective(desc);
  log_op(name(), desc, stream);
  if (send_count == 0) return;
  launch(desc, "ncclAllGather", [&](ncclComm_t comm) { return ncclAllGather(send, recv, send_count, type, comm, s); });
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                                      Stream& stream) {
  ncclDataType_t type = nccl_dtype(dtype);
  ncclRedOp_t red = nccl_op(op, size());
  cudaStream_t s = stream_of(stream, "reduce_scatter");
  OpDesc desc = next_op(OpKind::kReduceScatter, recv_count, dtype, op);
  if (options().validate) validate_collective(desc);
  log_op(name(), desc, stream);
  if (recv_count == 0) return;
  launch(desc, "ncclReduceScatter",
         [&](ncclComm_t comm) { return ncclReduceScatter(send, recv, recv_count, type, red, comm, s); });
}

void NcclCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                                  Stream& stream) {
  ncclDataType_t type = nccl_dtype(dtype);
  ncclRedOp_t red = nccl_op(op, size());
  cudaStream_t s = stream_of(stream, "all_reduce");
  OpDesc desc = next_op(OpKind::kAllReduce, count, dtype, op);
  if (options().validate) validate_collective(desc);
  log_op(name(), desc, stream);
  if (count == 0) return;
  launch(desc, "ncclAllReduce", [&](ncclComm_t comm) { return ncclAllReduce(send, recv, count, type, red, comm, s); });
}

void NcclCommunicator::broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                                 Stream& stream) {
  ncclDataType_t type = nccl_dtype(dtype);
  cudaStream_t s = stream_of(stream, "broadcast");
  STRATA_CHECK(root >= 0 && root < size(), "broadcast on '{}' with root {} outside [0, {})", name(), root, size());
  OpDesc desc = next_op(OpKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
  if (options().validate) validate_collective(desc);
  log_op(name(), desc, stream);
  if (count == 0) return;
  launch(desc, "ncclBroadcast", [&](ncclComm_t comm) { return ncclBroadcast(send, recv, count, type, root, comm, s); });
}

void NcclCommunicator::send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) {
  ncclDataType_t type = nccl_dtype(dtype);
  cudaStream_t s = stream_of(stream, "send");
  STRATA_CHECK(peer >= 0 && peer < size(), "send on '{}' to peer {} outside [0, {})", name(), peer, size());
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, peer != rank(),
                    "send on '{}' from rank {} to itself: NCCL cannot match it with a recv outside a group", name(),
                    rank());
  OpDesc desc = next_op(OpKind::kSend, count, dtype, ReduceOp::kSum, -1, peer);
  if (options().validate) validate_p2p(desc);
  log_op(name(), desc, stream);
  if (count == 0) return;
  launch(desc, "ncclSend", [&](ncclComm_t comm) { return ncclSend(buf, count, type, peer, comm, s); });
}

void NcclCommunicator::recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) {
  ncclDataType_t type = nccl_dtype(dtype);
  cudaStream_t s = stream_of(stream, "recv");
  STRATA_CHECK(peer >= 0 && peer < size(), "recv on '{}' from peer {} outside [0, {})", name(), peer, size());
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, peer != rank(),
                    "recv on '{}' by rank {} from itself: NCCL cannot match it with a send outside a group", name(),
                    rank());
  OpDesc desc = next_op(OpKind::kRecv, count, dtype, ReduceOp::kSum, -1, peer);
  if (options().validate) validate_p2p(desc);
  log_op(name(), desc, stream);
  if (count == 0) return;
  launch(desc, "ncclRecv", [&](ncclComm_t comm) { return ncclRecv(buf, count, type, peer, comm, s); });
}

void NcclCommunicator::barrier(Stream& stream) {
  cudaStream_t s = stream_of(stream, "barrier");
  OpDesc desc = next_op(OpKind::kBarrier, 1, DType::kI32);
  if (options().validate) validate_collective(desc);
  log_op(name(), desc, stream);
  void* buf = barrier_buffer_.data();
  launch(desc, "ncclAllReduce",
         [&](ncclComm_t comm) { return ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, s); });
}

void NcclCommunicator::batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) {
  cudaStream_t s = stream_of(stream, "batch_send_recv");
  std::vector<ncclDataType_t> types;
  types.reserve(ops.size());
  for (const P2POp& op : ops) types.push_back(nccl_dtype(op.dtype));
  std::vector<OpDesc> descs = next_p2p_batch(ops);
  if (ops.empty()) return;
  std::vector<char> run(ops.size(), 1);
  std::string mismatches;
  if (options().validate) mismatches = validate_p2p_batch(descs, run);
  bool any = false;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    log_op(name(), descs[i], stream);
    any = any || (run[i] && ops[i].count > 0);
  }
  if (any) {
    launch_described(
        [&] { return fmt::format("batch_send_recv of {} ops (first: {})", ops.size(), descs[0].describe()); },
        "ncclGroupStart / ncclSend / ncclRecv / ncclGroupEnd",
        [&](ncclComm_t comm) {
          ncclResult_t rc = ncclGroupStart();
          if (rc != ncclSuccess) return rc;
          for (std::size_t i = 0; i < ops.size() && (rc == ncclSuccess || rc == ncclInProgress); ++i) {
            const P2POp& op = ops[i];
            if (!run[i] || op.count == 0) continue;
            rc = op.kind == OpKind::kSend ? ncclSend(op.buf, op.count, types[i], op.peer, comm, s)
                                          : ncclRecv(op.buf, op.count, types[i], op.peer, comm, s);
          }
          ncclResult_t end = ncclGroupEnd();  // even after a failed call: the group depth belongs to this thread
          return rc == ncclSuccess || rc == ncclInProgress ? end : rc;
        });
  }
  if (!mismatches.empty()) STRATA_THROW(ErrorCode::kMismatch, "{}", mismatches);
}

// ---- split ------------------------------------------------------------------------------------------------------

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& label) {
  const double timeout_s = options().timeout_s;
  const std::string what = fmt::format("split of '{}' (color {}, key {})", name(), color, key);

  // Everyone's (color, key): the child's rank and size, and proof that every rank reached split().
  struct Exchange {
    std::array<int, 2> mine;
    std::vector<int> all;
  };
  auto ex = std::make_unique<Exchange>();
  ex->mine = {color, key};
  ex->all.resize(2 * static_cast<std::size_t>(size()));
  mpi_exchange(
      ex,
      [&](Exchange& e, MPI_Request* reqs) {
        STRATA_CHECK_MPI(MPI_Iallgather(e.mine.data(), 2, MPI_INT, e.all.data(), 2, MPI_INT, control_.get(), &reqs[0]));
        return 1;
      },
      timeout_s, what + ": exchange of colors");
  int child_rank = 0;
  int child_size = 0;
  if (color >= 0) {
    for (int r = 0; r < size(); ++r) {
      int c = ex->all[2 * static_cast<std::size_t>(r)];
      int k = ex->all[2 * static_cast<std::size_t>(r) + 1];
      if (c != color) continue;
      ++child_size;
      if (k < key || (k == key && r < rank())) ++child_rank;  // ordered by (key, parent rank), as MPI and NCCL do
    }
  }

  // MPI has no non-blocking split. Every rank has just completed the exchange above and nothing that can fail on
  // one rank alone runs in between, so this returns promptly.
  MPI_Comm child_control_raw = MPI_COMM_NULL;
  STRATA_CHECK_MPI(MPI_Comm_split(control_.get(), color >= 0 ? color : MPI_UNDEFINED, key, &child_control_raw));
  OwnedMpiComm child_control(child_control_raw);

  std::string child_name = this->child_name(color, label);
  std::shared_ptr<State> child_state;
  if (color >= 0) child_state = std::make_shared<State>(child_name, device().index());
  {
    std::lock_guard<std::recursive_timed_mutex> lock(state_->mutex);
    ncclComm_t comm = state_->usable();
    STRATA_CHECK_CUDA(cudaSetDevice(device().index()));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    // The split runs as an asynchronous job of the parent, which writes *out when it completes.
    auto out = std::make_unique<ncclComm_t>(nullptr);
    try {
      ncclResult_t rc = ncclCommSplit(comm, color >= 0 ? color : NCCL_SPLIT_NOCOLOR, key, out.get(), &config);
      STRATA_CHECK_CODE(ErrorCode::kNccl, rc == ncclSuccess || rc == ncclInProgress,
                        "call to ncclCommSplit for {} failed: {}", what, detail::nccl_error_text(rc));
      wait_comm_ready(comm, timeout_s, what + ": ncclCommSplit");
    } catch (...) {
      (void)out.release();  // the job may still write it
      throw;
    }
    if (child_state) {
      child_state->comm = *out;
      STRATA_CHECK_CODE(ErrorCode::kNccl, child_state->comm != nullptr, "{}: ncclCommSplit gave no communicator", what);
    }
  }
  if (!child_state) return nullptr;

  {
    std::lock_guard<std::recursive_timed_mutex> lock(child_state->mutex);
    wait_comm_ready(child_state->comm, timeout_s, what + ": initialisation of '" + child_name + "'");
    int nccl_rank = -1;
    int nccl_size = -1;
    STRATA_CHECK_NCCL(ncclCommUserRank(child_state->comm, &nccl_rank));
    STRATA_CHECK_NCCL(ncclCommCount(child_state->comm, &nccl_size));
    int control_rank = mpi_rank(child_control.get());
    int control_size = mpi_size(child_control.get());
    STRATA_CHECK_CODE(
        ErrorCode::kInternal,
        nccl_rank == child_rank && nccl_size == child_size && control_rank == child_rank && control_size == child_size,
        "{}: expected rank {} of {}, NCCL made rank {} of {}, MPI rank {} of {}", what, child_rank, child_size,
        nccl_rank, nccl_size, control_rank, control_size);
  }
  logger("comm").debug("'{}' split into '{}': rank {} of {}", name(), child_name, child_rank, child_size);
  return std::unique_ptr<Communicator>(new NcclCommunicator(device(), std::move(child_control), std::move(child_state),
                                                            child_rank, child_size, std::move(child_name), options()));
}

}  // namespace strata
