// StagedCommunicator: copies into host staging, MpiCommunicator's operation in place on it, copies back.
#include "collectives/staged_communicator.h"

#include <exception>
#include <functional>
#include <utility>

#include "collectives/mpi_communicator.h"
#include "collectives/mpi_util.h"
#include "core/cpu_device.h"
#include "core/device_registry.h"
#include "core/error.h"
#include "core/logging.h"

namespace strata {
namespace {

// A caller's stream as the inner MpiCommunicator sees it: a stream of the inner's host device with the caller
// stream's id and name (so the inner opens one lane per caller stream, and its logs and hang reports name that
// stream), whose host work is enqueued on the caller's stream, between the copies around it.
class ForwardingStream : public Stream {
 public:
  ForwardingStream(Device& host, Stream& target) : Stream(host, target.name(), target.id()), target_(target) {}
  void enqueue_host(std::function<void()> fn) override { target_.enqueue_host(hold(std::move(fn))); }
  void enqueue_bounded(std::function<void()> fn) override { target_.enqueue_bounded(hold(std::move(fn))); }
  // While holding, a task's failure is kept instead of failing the caller's stream, so that the work after it (the
  // copies back) still runs; rethrow_held() enqueues the task that then fails the stream with it. The caller stream's
  // order serialises every access to the held failure.
  void set_holding(bool holding) { holding_ = holding; }
  void rethrow_held() {
    target_.enqueue_bounded([this] {
      if (!held_) return;
      std::exception_ptr failure;
      std::swap(failure, held_);
      std::rethrow_exception(failure);
    });
  }
  // MpiCommunicator only enqueues work on its streams.
  void record(Event&) override { refuse("record"); }
  void wait(Event&) override { refuse("wait"); }
  void synchronize() override { refuse("synchronize"); }

 private:
  [[noreturn]] void refuse(const char* what) const {
    STRATA_THROW(ErrorCode::kInternal, "{} on the staged communicator's stand-in for stream '{}'", what, name());
  }
  std::function<void()> hold(std::function<void()> fn) {
    if (!holding_) return fn;
    return [this, fn = std::move(fn)] {
      try {
        fn();
      } catch (...) {
        held_ = std::current_exception();
      }
    };
  }

  Stream& target_;
  bool holding_ = false;
  std::exception_ptr held_;
};

}  // namespace

struct StagedCommunicator::HostDevices {
  std::unique_ptr<Device> staging;  // create_host_device: page-locked beside a CUDA device
  std::unique_ptr<Device> mpi;      // the inner communicator's device: plain host memory
};

struct StagedCommunicator::Lane {
  std::unique_ptr<ForwardingStream> stream;
  Buffer staging;  // grow-only
  struct Retired {
    Buffer buffer;
    std::unique_ptr<Event> passed;  // recorded on the caller's stream after the buffer's last use
  };
  std::vector<Retired> retired;
};

StagedCommunicator::StagedCommunicator(Device& device, MPI_Comm parent, std::string name, CommOptions options)
    : Communicator(device, mpi_rank(parent), mpi_size(parent), std::move(name), options),
      host_(std::make_shared<HostDevices>()) {
  host_->staging = create_host_device(device);
  host_->mpi = std::make_unique<CpuDevice>(device.timeout_s(), "host");
  inner_ = std::make_unique<MpiCommunicator>(*host_->mpi, parent, this->name(), options);
  set_world_ranks(inner_->world_ranks());
  logger("comm").debug("communicator '{}' (mpi-staged): rank {} of {}, {} staged through {}", this->name(), rank(),
                       size(), device.name(), host_->staging->name());
}

StagedCommunicator::StagedCommunicator(Device& device, std::shared_ptr<HostDevices> host,
                                       std::unique_ptr<Communicator> inner, CommOptions options)
    : Communicator(device, inner->rank(), inner->size(), inner->name(), options),
      host_(std::move(host)),
      inner_(std::move(inner)) {
  set_world_ranks(inner_->world_ranks());
}

// Members go in reverse: the lanes' buffers before the inner communicator, both before the host devices.
StagedCommunicator::~StagedCommunicator() = default;

const Device& StagedCommunicator::staging_device() const { return *host_->staging; }

StagedCommunicator::Lane& StagedCommunicator::lane_for(Stream& stream) {
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  std::unique_ptr<Lane>& lane = lanes_[stream.id()];
  if (!lane) {
    lane = std::make_unique<Lane>();
    lane->stream = std::make_unique<ForwardingStream>(*host_->mpi, stream);
  }
  return *lane;
}

char* StagedCommunicator::staging(Lane& lane, std::size_t bytes, Stream& stream) {
  // Outgrown buffers whose last use the stream has passed go back now. An event whose work failed has completed too
  // (the failure is the stream's, rethrown by its synchronize()).
  for (std::size_t i = lane.retired.size(); i-- > 0;) {
    bool passed = true;
    try {
      passed = lane.retired[i].passed->query();
    } catch (const Error&) {
    }
    if (passed) lane.retired.erase(lane.retired.begin() + static_cast<std::ptrdiff_t>(i));
  }
  if (lane.staging.bytes() < bytes) {
    if (lane.staging) {
      Lane::Retired old{std::move(lane.staging), device().create_event()};
      stream.record(*old.passed);
      lane.retired.push_back(std::move(old));
    }
    lane.staging = host_->staging->allocate(bytes, MemCategory::kCommBuffer);
  }
  return lane.staging.as<char>();
}

void StagedCommunicator::copy(void* dst, const void* src, std::size_t bytes, Stream& stream) {
  if (bytes > 0) device().copy(dst, src, bytes, stream);
}

// Each operation refuses its arguments as the inner MpiCommunicator would (mpi_count, the peer and root checks), but
// before numbering it: the inner one numbers an operation before refusing its count, so both counts stay equal.
void StagedCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Stream& stream) {
  check_stream(stream, "all_gather");
  mpi_count(send_count, "all_gather");
  next_op(OpKind::kAllGather, send_count, dtype);
  const std::size_t bytes = send_count * dtype_size(dtype), n = static_cast<std::size_t>(size());
  Lane& lane = lane_for(stream);
  char* stage = staging(lane, n * bytes, stream);
  char* mine = stage + static_cast<std::size_t>(rank()) * bytes;
  copy(mine, send, bytes, stream);
  inner_->all_gather(mine, stage, send_count, dtype, *lane.stream);
  copy(recv, stage, n * bytes, stream);
}

void StagedCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                                        Stream& stream) {
  check_stream(stream, "reduce_scatter");
  mpi_count(recv_count, "reduce_scatter");
  next_op(OpKind::kReduceScatter, recv_count, dtype, op);
  const std::size_t bytes = recv_count * dtype_size(dtype), n = static_cast<std::size_t>(size());
  Lane& lane = lane_for(stream);
  char* stage = staging(lane, n * bytes, stream);
  char* mine = stage + static_cast<std::size_t>(rank()) * bytes;
  copy(stage, send, n * bytes, stream);
  inner_->reduce_scatter(stage, mine, recv_count, dtype, op, *lane.stream);
  copy(recv, mine, bytes, stream);
}

void StagedCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                                    Stream& stream) {
  check_stream(stream, "all_reduce");
  mpi_count(count, "all_reduce");
  next_op(OpKind::kAllReduce, count, dtype, op);
  const std::size_t bytes = count * dtype_size(dtype);
  Lane& lane = lane_for(stream);
  char* stage = staging(lane, bytes, stream);
  copy(stage, send, bytes, stream);
  inner_->all_reduce(stage, stage, count, dtype, op, *lane.stream);
  copy(recv, stage, bytes, stream);
}

void StagedCommunicator::broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                                   Stream& stream) {
  check_stream(stream, "broadcast");
  STRATA_CHECK(root >= 0 && root < size(), "broadcast root {} outside group '{}' of size {}", root, name(), size());
  mpi_count(count, "broadcast");
  next_op(OpKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
  const std::size_t bytes = count * dtype_size(dtype);
  const bool is_root = rank() == root;
  Lane& lane = lane_for(stream);
  char* stage = staging(lane, bytes, stream);
  if (is_root) copy(stage, send, bytes, stream);
  inner_->broadcast(stage, stage, count, dtype, root, *lane.stream);
  if (!is_root || send != recv) copy(recv, stage, bytes, stream);
}

void StagedCommunicator::send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) {
  check_stream(stream, "send");
  STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(), "send to peer {} in group '{}' of size {} from rank {}",
               peer, name(), size(), rank());
  mpi_count(count, "send");
  next_op(OpKind::kSend, count, dtype, ReduceOp::kSum, -1, peer);
  const std::size_t bytes = count * dtype_size(dtype);
  Lane& lane = lane_for(stream);
  char* stage = staging(lane, bytes, stream);
  copy(stage, buf, bytes, stream);
  inner_->send(stage, count, dtype, peer, *lane.stream);
}

void StagedCommunicator::recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) {
  check_stream(stream, "recv");
  STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(), "recv from peer {} in group '{}' of size {} on rank {}",
               peer, name(), size(), rank());
  mpi_count(count, "recv");
  next_op(OpKind::kRecv, count, dtype, ReduceOp::kSum, -1, peer);
  const std::size_t bytes = count * dtype_size(dtype);
  Lane& lane = lane_for(stream);
  char* stage = staging(lane, bytes, stream);
  inner_->recv(stage, count, dtype, peer, *lane.stream);
  copy(buf, stage, bytes, stream);
}

void StagedCommunicator::barrier(Stream& stream) {
  check_stream(stream, "barrier");
  next_op(OpKind::kBarrier, 0, DType::kF32);
  inner_->barrier(*lane_for(stream).stream);
}

void StagedCommunicator::batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) {
  check_stream(stream, "batch_send_recv");
  for (const P2POp& op : ops) mpi_count(op.count, "batch_send_recv");
  next_p2p_batch(ops);  // checks the batch (kInvalidArgument) before numbering it
  if (ops.empty()) return;
  // Each op gets its own part of the staging: sends copied in, the batch on the staging, receives copied out.
  std::vector<std::size_t> offset(ops.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    offset[i] = total;
    total += ops[i].count * dtype_size(ops[i].dtype);
  }
  Lane& lane = lane_for(stream);
  char* stage = staging(lane, total, stream);
  std::vector<P2POp> staged = ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    staged[i].buf = stage + offset[i];
    if (ops[i].kind == OpKind::kSend) copy(staged[i].buf, ops[i].buf, ops[i].count * dtype_size(ops[i].dtype), stream);
  }
  // The ops that pair deliver even when others of the batch mismatch (communicator.h): the batch's failure waits
  // until its receives are copied back.
  lane.stream->set_holding(true);
  try {
    inner_->batch_send_recv(staged, *lane.stream);
  } catch (...) {
    lane.stream->set_holding(false);
    throw;
  }
  lane.stream->set_holding(false);
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::kRecv) copy(ops[i].buf, staged[i].buf, ops[i].count * dtype_size(ops[i].dtype), stream);
  lane.stream->rethrow_held();
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key, const std::string& label) {
  std::unique_ptr<Communicator> child = inner_->split(color, key, label);
  if (!child) return nullptr;
  return std::unique_ptr<Communicator>(new StagedCommunicator(device(), host_, std::move(child), options()));
}

}  // namespace strata
