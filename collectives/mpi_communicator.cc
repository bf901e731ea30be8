// MpiCommunicator: nonblocking MPI collectives on per-stream lanes, polled with a deadline.
#include "collectives/mpi_communicator.h"

#include <charconv>
#include <chrono>
#include <cstring>
#include <vector>

#include "collectives/host_reduce.h"
#include "collectives/mpi_util.h"
#include "core/backoff.h"
#include "core/error.h"
#include "core/in_flight.h"
#include "core/logging.h"
#include "core/tracer.h"

namespace strata {
namespace {

// Point-to-point tags: from the per-peer sequence number (mod a window that keeps tags below MPI's guaranteed
// 32767): data, the sender's validation header, the receiver's validation header.
constexpr std::uint64_t kTagWindow = 4096;
int data_tag(std::uint64_t seq) { return static_cast<int>(4 * (seq % kTagWindow)); }
int header_tag(std::uint64_t seq, OpKind from) {
  return static_cast<int>(4 * (seq % kTagWindow)) + (from == OpKind::kSend ? 1 : 2);
}

MPI_Comm dup_bounded(MPI_Comm parent, double timeout_s, const std::string& what) {
  InFlightScope scope(what);
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Comm_idup(parent, &out, &req));
  mpi_wait(req, timeout_s, what);
  return out;
}

// Whether every rank of `comm` shares this node's memory. Collective; called right after a bounded operation on
// `comm` that every rank completed, so MPI_Comm_split_type cannot wait without bound.
bool on_one_node(MPI_Comm comm, int size) {
  MPI_Comm node = MPI_COMM_NULL;
  STRATA_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_size = 0;
  int rc = MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  STRATA_CHECK_MPI(rc);
  return node_size == size;
}

// What a running collective's lazy hang-report entries refer to; it lives on the stream thread's stack for the
// operation's duration, so the entry's function captures one pointer (no allocation).
struct OpRef {
  const MpiCommunicator* comm;
  const OpDesc* desc;
  const std::string* what;
};

// "all_gather seq=12 count=1024 dtype=f32 group=world(2) stream=comm", appended to `out`.
void append_op_line(std::string& out, const OpDesc& desc, const std::string& group, int size,
                    const std::string& stream) {
  desc.describe_to(out);
  out += " group=";
  out += group;
  char digits[16];
  out += '(';
  out.append(digits, std::to_chars(digits, digits + sizeof(digits), size).ptr);
  out += ") stream=";
  out += stream;
}

// A running operation's line, written into its thread's reused buffer (no allocation once the buffer has grown),
// or into its own string when an operation runs inside another one on the same thread.
class OpLine {
 public:
  OpLine() : text_(buffer_in_use_ ? own_ : buffer_), owns_buffer_(!buffer_in_use_) { buffer_in_use_ = true; }
  ~OpLine() {
    if (owns_buffer_) buffer_in_use_ = false;
  }
  OpLine(const OpLine&) = delete;
  OpLine& operator=(const OpLine&) = delete;
  const std::string& write(const OpDesc& desc, const std::string& group, int size, const std::string& stream) {
    text_.clear();
    append_op_line(text_, desc, group, size, stream);
    return text_;
  }

 private:
  static thread_local std::string buffer_;
  static thread_local bool buffer_in_use_;
  std::string own_;
  std::string& text_;
  bool owns_buffer_;
};
thread_local std::string OpLine::buffer_;
thread_local bool OpLine::buffer_in_use_ = false;

// Up to this many bytes in an operation's whole buffer (all_gather's output, reduce_scatter's input, all_reduce's
// buffer) on up to kPointToPointRanks ranks, the MPI path exchanges one message with every peer point to point:
// Open MPI's nonblocking collectives cost several times a blocking call at these sizes, its sends and receives do not.
constexpr std::size_t kPointToPointBytes = 64 << 10;
constexpr int kPointToPointRanks = 8;

struct Message {
  const void* at;
  std::size_t bytes;
};

// Sends to_peer(p) to every peer p and receives from_peer(p) from it, on `comm` (a lane: its operations run in the
// same order on every rank, so the messages of one pair match in order).
template <class ToPeer, class FromPeer>
void exchange(MPI_Comm comm, int rank, int size, ToPeer to_peer, FromPeer from_peer, double timeout_s,
              const std::string& what) {
  MPI_Request reqs[2 * kPointToPointRanks];
  int k = 0;
  for (int p = 0; p < size; ++p)
    if (p != rank) {
      const Message m = from_peer(p);
      STRATA_CHECK_MPI(
          MPI_Irecv(const_cast<void*>(m.at), static_cast<int>(m.bytes), MPI_BYTE, p, 0, comm, &reqs[k++]));
    }
  for (int p = 0; p < size; ++p)
    if (p != rank) {
      const Message m = to_peer(p);
      STRATA_CHECK_MPI(MPI_Isend(m.at, static_cast<int>(m.bytes), MPI_BYTE, p, 0, comm, &reqs[k++]));
    }
  mpi_wait_all(k, reqs, timeout_s, what);
}

// all_reduce of a small buffer point to point, rank r owning elements [r count / n, (r + 1) count / n) and every
// reduction in rank order as on every path. Where the n - 1 peers' whole buffers fit the staging reserved for the
// all-to-all path (2 n ceil(count / n) elements; up to 3 ranks), one exchange and every rank reduces the whole buffer;
// otherwise the all-to-all path's two steps: every rank's copy of our part in, our reduced part out to every rank.
void all_reduce_exchanged(MPI_Comm comm, int rank, int size, const char* in, char* out, char* gathered,
                          std::size_t count, DType dtype, ReduceOp op, double timeout_s, const std::string& what) {
  const std::size_t n = static_cast<std::size_t>(size), me = static_cast<std::size_t>(rank);
  const std::size_t esz = dtype_size(dtype), chunk = (count + n - 1) / n;
  const void* pieces[kPointToPointRanks];
  if ((n - 1) * count <= 2 * n * chunk) {
    const std::size_t bytes = count * esz;
    auto slot = [&](std::size_t p) { return gathered + (p < me ? p : p - 1) * bytes; };  // n - 1 of them
    auto whole = [&](int) { return Message{in, bytes}; };
    auto into_slot = [&](int p) { return Message{slot(static_cast<std::size_t>(p)), bytes}; };
    exchange(comm, rank, size, whole, into_slot, timeout_s, what);
    for (std::size_t q = 0; q < n; ++q) pieces[q] = q == me ? in : slot(q);
    return reduce_pieces(pieces, n, count, dtype, op, out);
  }
  auto part_of = [&](const char* base, std::size_t r) {
    const std::size_t begin = r * count / n, end = (r + 1) * count / n;
    return Message{base + begin * esz, (end - begin) * esz};
  };
  const Message mine = part_of(out, me);
  auto their_part = [&](int p) { return part_of(in, static_cast<std::size_t>(p)); };
  auto copy_of_mine = [&](int p) { return Message{gathered + static_cast<std::size_t>(p) * mine.bytes, mine.bytes}; };
  exchange(comm, rank, size, their_part, copy_of_mine, timeout_s, what);
  for (std::size_t q = 0; q < n; ++q) pieces[q] = q == me ? part_of(in, me).at : gathered + q * mine.bytes;
  reduce_pieces(pieces, n, mine.bytes / esz, dtype, op, const_cast<void*>(mine.at));
  auto reduced = [&](int) { return mine; };
  auto reduced_part = [&](int p) { return part_of(out, static_cast<std::size_t>(p)); };
  exchange(comm, rank, size, reduced, reduced_part, timeout_s, what);
}

}  // namespace

MpiCommunicator::MpiCommunicator(Device& device, MPI_Comm parent, std::string name, CommOptions options)
    : Communicator(device, mpi_rank(parent), mpi_size(parent), std::move(name), options) {
  STRATA_CHECK(device.kind() == DeviceKind::kCpu, "the MPI communicator works on host memory, not on {}",
               device.name());
  set_world_ranks(world_ranks_of(parent));
  control_ = dup_bounded(parent, options.timeout_s, fmt::format("creating communicator '{}'", this->name()));
  p2p_.comm = dup_bounded(parent, options.timeout_s, fmt::format("creating communicator '{}'", this->name()));
  node_local_ = options.shm && size() > 1 && on_one_node(control_, size());
  logger("comm").debug("communicator '{}' (mpi): rank {} of {}{}", this->name(), rank(), size(),
                       node_local_ ? ", shared memory" : "");
}

MpiCommunicator::~MpiCommunicator() {
  for (auto& [id, lane] : lanes_) MPI_Comm_free(&lane->comm);
  if (p2p_.comm != MPI_COMM_NULL) MPI_Comm_free(&p2p_.comm);
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
}

MpiCommunicator::Lane& MpiCommunicator::lane_for(Stream& stream) {
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  auto it = lanes_.find(stream.id());
  if (it != lanes_.end()) return *it->second;
  auto lane = std::make_unique<Lane>();
  lane->comm = dup_bounded(control_, options().timeout_s,
                           fmt::format("opening stream '{}' (id {}) on communicator '{}'", stream.name(),
                                       stream.id(), name()));
  // Every rank has completed the duplicate, so all of them are creating this lane: the segment's exchanges pair.
  if (node_local_)
    lane->shm = ShmSegment::create(
        lane->comm, options().timeout_s,
        fmt::format("mapping the shared-memory segment of stream '{}' on communicator '{}'", stream.name(), name()));
  return *lanes_.emplace(stream.id(), std::move(lane)).first->second;
}

bool MpiCommunicator::point_to_point(std::size_t bytes) const {
  return bytes <= kPointToPointBytes && size() <= kPointToPointRanks;
}

std::uint64_t MpiCommunicator::shm_direct_operations() {
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  std::uint64_t total = 0;
  for (auto& [id, lane] : lanes_)
    if (lane->shm) total += lane->shm->direct_operations();
  return total;
}

void* MpiCommunicator::staging(Lane& lane, std::size_t bytes) {
  if (lane.staging.bytes() < bytes) {
    lane.staging.reset();
    lane.staging = device().allocate(bytes, MemCategory::kCommBuffer);
  }
  return lane.staging.data();
}

template <class Body>
void MpiCommunicator::launch(Stream& stream, const OpDesc& desc, Body body) {
  check_stream(stream, op_kind_name(desc.kind));
  bool p2p = desc.kind == OpKind::kSend || desc.kind == OpKind::kRecv;
  Lane& lane = p2p ? p2p_ : lane_for(stream);  // lanes are collective; the pair must not create one
  static spdlog::logger& log = logger("comm");
  if (log.should_log(spdlog::level::trace)) log.trace("enqueue {}", describe(desc, stream));
  // One closure, holding no string: the operation's line is written on the thread that runs it, into that thread's
  // reused buffer, and the hang-report entries borrow it.
  stream.enqueue_bounded([this, &lane, &stream, desc, body = std::move(body)] {
    OpLine line;
    const std::string& what = line.write(desc, name(), size(), stream.name());
    InFlightScope scope(&what);
    const OpRef op{this, &desc, &what};
    PeerWaitScope peers([&op] { return op.comm->peer_wait(*op.desc, *op.what); });
    std::string args;  // trace span arguments, formatted only when tracing
    if (Tracer::global().enabled())
      args = fmt::format(R"("seq":{},"count":{},"dtype":"{}","group":"{}")", desc.seq, desc.count,
                         dtype_name(desc.dtype), name());
    TraceSpan span(op_kind_name(desc.kind), "comm", stream.name(), args);
    if (options().validate) validate(lane, desc, what);
    body(lane, what);
  });
}

std::string MpiCommunicator::describe(const OpDesc& desc, const Stream& stream) const {
  std::string out;
  append_op_line(out, desc, name(), size(), stream.name());
  return out;
}

void MpiCommunicator::validate(Lane& lane, const OpDesc& desc, const std::string& what) {
  if (desc.kind == OpKind::kSend || desc.kind == OpKind::kRecv) {
    // Pairwise: each side sends its descriptor and checks the peer's.
    OpDesc peer_desc;
    MPI_Request reqs[2];
    OpKind expected = desc.kind == OpKind::kSend ? OpKind::kRecv : OpKind::kSend;
    STRATA_CHECK_MPI(MPI_Isend(&desc, sizeof(OpDesc), MPI_BYTE, desc.peer, header_tag(desc.seq, desc.kind),
                               p2p_.comm, &reqs[0]));
    STRATA_CHECK_MPI(MPI_Irecv(&peer_desc, sizeof(OpDesc), MPI_BYTE, desc.peer, header_tag(desc.seq, expected),
                               p2p_.comm, &reqs[1]));
    mpi_wait_all(2, reqs, options().timeout_s, "validation of " + what);
    std::string mismatch = compare_p2p_descs(desc, peer_desc, rank(), name());
    if (!mismatch.empty()) STRATA_THROW(ErrorCode::kMismatch, "{}", mismatch);
    return;
  }
  std::vector<OpDesc> all(static_cast<std::size_t>(size()));
  MPI_Request req;
  STRATA_CHECK_MPI(
      MPI_Iallgather(&desc, sizeof(OpDesc), MPI_BYTE, all.data(), sizeof(OpDesc), MPI_BYTE, lane.comm, &req));
  mpi_wait(req, options().timeout_s, "validation of " + what);
  std::string mismatch = compare_op_descs(all, name());
  if (!mismatch.empty()) STRATA_THROW(ErrorCode::kMismatch, "{}", mismatch);
}

std::string MpiCommunicator::validate_batch(const std::vector<OpDesc>& descs, const std::string& what,
                                            const std::function<void(std::size_t)>& post) {
  // The headers of single send / recv validation, all posted at once: op i's descriptor goes out on its own
  // direction's tag and the peer's matching op comes back on the opposite one.
  std::size_t n = descs.size();
  std::vector<OpDesc> theirs(n);
  std::vector<MPI_Request> sent(n, MPI_REQUEST_NULL), received(n, MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < n; ++i) {
    const OpDesc& d = descs[i];
    OpKind expected = d.kind == OpKind::kSend ? OpKind::kRecv : OpKind::kSend;
    STRATA_CHECK_MPI(MPI_Isend(&d, sizeof(OpDesc), MPI_BYTE, d.peer, header_tag(d.seq, d.kind), p2p_.comm, &sent[i]));
    STRATA_CHECK_MPI(
        MPI_Irecv(&theirs[i], sizeof(OpDesc), MPI_BYTE, d.peer, header_tag(d.seq, expected), p2p_.comm, &received[i]));
  }
  // Each op's data goes out as soon as its own header arrives, not after the whole batch's: the peer may be making
  // single calls, and its send may need our recv posted before it reaches the recv that validates our send.
  std::string mismatches;
  std::vector<int> done(n);
  const auto deadline = std::chrono::steady_clock::now() + to_duration(options().timeout_s);
  Backoff backoff;
  for (std::size_t left = n; left > 0;) {
    int count = 0;
    STRATA_CHECK_MPI(MPI_Testsome(static_cast<int>(n), received.data(), &count, done.data(), MPI_STATUSES_IGNORE));
    if (count == 0 || count == MPI_UNDEFINED) {
      if (std::chrono::steady_clock::now() > deadline)
        throw_timeout(__FILE__, __LINE__, "validation of " + what, options().timeout_s);
      backoff.pause();
      continue;
    }
    for (int k = 0; k < count; ++k) {
      std::size_t i = static_cast<std::size_t>(done[static_cast<std::size_t>(k)]);
      std::string m = compare_p2p_descs(descs[i], theirs[i], rank(), name());
      if (m.empty()) {
        post(i);
      } else {
        mismatches += (mismatches.empty() ? "" : "\n") + m;
      }
    }
    left -= static_cast<std::size_t>(count);
  }
  mpi_wait_all(static_cast<int>(n), sent.data(), options().timeout_s, "validation of " + what);
  return mismatches;
}

void MpiCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DType dtype,
                                 Stream& stream) {
  OpDesc desc = next_op(OpKind::kAllGather, send_count, dtype);
  int count = mpi_count(send_count, "all_gather");
  std::size_t bytes = send_count * dtype_size(dtype);
  std::size_t n = static_cast<std::size_t>(size()), me = static_cast<std::size_t>(rank());
  bool in_place = send == static_cast<const char*>(recv) + me * bytes;
  launch(stream, desc, [=, this](Lane& lane, const std::string& what) {
    if (count == 0) return;
    if (lane.shm) return lane.shm->all_gather(send, recv, bytes, what);
    if (point_to_point(n * bytes)) {
      char* out = static_cast<char*>(recv);
      if (!in_place) std::memcpy(out + me * bytes, send, bytes);
      return exchange(
          lane.comm, rank(), size(), [&](int) { return Message{send, bytes}; },
          [&](int p) { return Message{out + static_cast<std::size_t>(p) * bytes, bytes}; }, options().timeout_s, what);
    }
    MPI_Datatype t = mpi_datatype(dtype);
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, count, t, recv, count, t, lane.comm, &req));
    mpi_wait(req, options().timeout_s, what);
  });
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                                     Stream& stream) {
  OpDesc desc = next_op(OpKind::kReduceScatter, recv_count, dtype, op);
  int count = mpi_count(recv_count, "reduce_scatter");
  std::size_t n = static_cast<std::size_t>(size()), me = static_cast<std::size_t>(rank());
  launch(stream, desc, [=, this](Lane& lane, const std::string& what) {
    if (count == 0) return;
    // Chunk r of every rank lands on rank r; then a rank-ordered local reduction. The shared-memory path does not
    // use the staging buffer, but reserves it all the same (untouched pages cost no memory): the memory planner
    // models this backend's comm_buffer by the MPI path, and the ledger stays equal to it whichever path runs.
    void* gathered = staging(lane, n * recv_count * dtype_size(dtype));
    if (lane.shm) return lane.shm->reduce_scatter(send, recv, recv_count, dtype, op, what);
    const std::size_t chunk = recv_count * dtype_size(dtype);
    if (point_to_point(n * chunk)) {
      // Chunk p of our input to rank p; every rank's chunk of ours into the staging; ours read in place.
      const char* in = static_cast<const char*>(send);
      char* got = static_cast<char*>(gathered);
      exchange(
          lane.comm, rank(), size(), [&](int p) { return Message{in + static_cast<std::size_t>(p) * chunk, chunk}; },
          [&](int p) { return Message{got + static_cast<std::size_t>(p) * chunk, chunk}; }, options().timeout_s,
          what);
      const void* pieces[kPointToPointRanks];
      for (std::size_t q = 0; q < n; ++q) pieces[q] = q == me ? in + me * chunk : got + q * chunk;
      return reduce_pieces(pieces, n, recv_count, dtype, op, recv);
    }
    MPI_Datatype t = mpi_datatype(dtype);
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Ialltoall(send, count, t, gathered, count, t, lane.comm, &req));
    mpi_wait(req, options().timeout_s, what);
    reduce_chunks(gathered, n, recv_count, recv_count, dtype, op, recv);
  });
}

void MpiCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                                 Stream& stream) {
  OpDesc desc = next_op(OpKind::kAllReduce, count, dtype, op);
  mpi_count(count, "all_reduce");
  std::size_t n = static_cast<std::size_t>(size());
  std::size_t chunk = (count + n - 1) / n;
  std::size_t esz = dtype_size(dtype);
  std::size_t me = static_cast<std::size_t>(rank());
  launch(stream, desc, [=, this](Lane& lane, const std::string& what) {
    if (count == 0) return;
    // Rank r owns the elements [part(r), part(r + 1)): an all-to-all brings it every rank's copy of them, it reduces
    // them in rank order into its own part of `recv`, and an all-gather in place fills the other parts. No copy of
    // the whole buffer, in place or not (send's part r has gone out before recv's part r is written). The staging
    // is reserved at its former size, 2 n chunk elements, on every path: the memory planner models this backend's
    // comm_buffer by it (see reduce_scatter).
    char* gathered = static_cast<char*>(staging(lane, 2 * n * chunk * esz));
    if (lane.shm) return lane.shm->all_reduce(send, recv, count, dtype, op, what);
    char* out = static_cast<char*>(recv);
    if (point_to_point(count * esz))
      return all_reduce_exchanged(lane.comm, rank(), size(), static_cast<const char*>(send), out, gathered, count,
                                  dtype, op, options().timeout_s, what);
    auto part = [&](std::size_t r) { return static_cast<int>(r * count / n); };
    const int mine = part(me + 1) - part(me);
    std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
    for (std::size_t r = 0; r < n; ++r) {
      send_counts[r] = part(r + 1) - part(r);
      send_displs[r] = part(r);
      recv_counts[r] = mine;
      recv_displs[r] = static_cast<int>(r) * mine;
    }
    MPI_Datatype t = mpi_datatype(dtype);
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Ialltoallv(send, send_counts.data(), send_displs.data(), t, gathered, recv_counts.data(),
                                    recv_displs.data(), t, lane.comm, &req));
    mpi_wait(req, options().timeout_s, what);
    reduce_chunks(gathered, n, static_cast<std::size_t>(mine), static_cast<std::size_t>(mine), dtype, op,
                  out + static_cast<std::size_t>(part(me)) * esz);
    STRATA_CHECK_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, t, out, send_counts.data(), send_displs.data(), t, lane.comm,
                                     &req));
    mpi_wait(req, options().timeout_s, what);
  });
}

void MpiCommunicator::broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                                Stream& stream) {
  STRATA_CHECK(root >= 0 && root < size(), "broadcast root {} outside group '{}' of size {}", root, name(), size());
  OpDesc desc = next_op(OpKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
  int c = mpi_count(count, "broadcast");
  bool is_root = rank() == root;
  launch(stream, desc, [=, this](Lane& lane, const std::string& what) {
    if (c == 0) return;
    // The root broadcasts from `send` itself and copies into its own `recv` while the broadcast is in flight.
    void* buf = is_root ? const_cast<void*>(send) : recv;
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Ibcast(buf, c, mpi_datatype(dtype), root, lane.comm, &req));
    if (is_root && send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
    mpi_wait(req, options().timeout_s, what);
  });
}

void MpiCommunicator::send(const void* buf, std::size_t count, DType dtype, int peer, Stream& stream) {
  STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(), "send to peer {} in group '{}' of size {} from rank {}",
               peer, name(), size(), rank());
  OpDesc desc = next_op(OpKind::kSend, count, dtype, ReduceOp::kSum, -1, peer);
  int c = mpi_count(count, "send");
  launch(stream, desc, [=, this](Lane&, const std::string& what) {
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Isend(buf, c, mpi_datatype(dtype), peer, data_tag(desc.seq), p2p_.comm, &req));
    mpi_wait(req, options().timeout_s, what);
  });
}

void MpiCommunicator::recv(void* buf, std::size_t count, DType dtype, int peer, Stream& stream) {
  STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(),
               "recv from peer {} in group '{}' of size {} on rank {}", peer, name(), size(), rank());
  OpDesc desc = next_op(OpKind::kRecv, count, dtype, ReduceOp::kSum, -1, peer);
  int c = mpi_count(count, "recv");
  launch(stream, desc, [=, this](Lane&, const std::string& what) {
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Irecv(buf, c, mpi_datatype(dtype), peer, data_tag(desc.seq), p2p_.comm, &req));
    mpi_wait(req, options().timeout_s, what);
  });
}

void MpiCommunicator::barrier(Stream& stream) {
  OpDesc desc = next_op(OpKind::kBarrier, 0, DType::kF32);
  launch(stream, desc, [this](Lane& lane, const std::string& what) {
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Ibarrier(lane.comm, &req));
    mpi_wait(req, options().timeout_s, what);
  });
}

void MpiCommunicator::batch_send_recv(const std::vector<P2POp>& ops, Stream& stream) {
  check_stream(stream, "batch_send_recv");
  for (const P2POp& op : ops) mpi_count(op.count, "batch_send_recv");
  std::vector<OpDesc> descs = next_p2p_batch(ops);
  if (ops.empty()) return;
  std::vector<std::string> whats;  // one in-flight entry per op
  for (const OpDesc& d : descs)
    whats.push_back(describe(d, stream));
  std::string what =
      fmt::format("batch_send_recv of {} ops group={}({}) stream={}", ops.size(), name(), size(), stream.name());
  logger("comm").trace("enqueue {}", what);
  std::string args;
  if (Tracer::global().enabled()) args = fmt::format(R"("ops":{},"group":"{}")", ops.size(), name());
  stream.enqueue_bounded([this, ops, descs, whats, what, args, track = stream.name()] {
    std::vector<std::unique_ptr<InFlightScope>> scopes;
    std::vector<std::unique_ptr<PeerWaitScope>> peers;
    for (std::size_t i = 0; i < whats.size(); ++i) {
      scopes.push_back(std::make_unique<InFlightScope>(whats[i]));
      peers.push_back(std::make_unique<PeerWaitScope>(peer_wait(descs[i], whats[i])));
    }
    TraceSpan span("batch_send_recv", "comm", track, args);
    std::vector<MPI_Request> reqs;
    reqs.reserve(ops.size());
    auto post = [&](std::size_t i) {
      const P2POp& op = ops[i];
      int c = static_cast<int>(op.count);
      MPI_Datatype t = mpi_datatype(op.dtype);
      int tag = data_tag(descs[i].seq);
      reqs.push_back(MPI_REQUEST_NULL);
      if (op.kind == OpKind::kRecv) {
        STRATA_CHECK_MPI(MPI_Irecv(op.buf, c, t, op.peer, tag, p2p_.comm, &reqs.back()));
      } else {
        STRATA_CHECK_MPI(MPI_Isend(op.buf, c, t, op.peer, tag, p2p_.comm, &reqs.back()));
      }
    };
    // Ops that pair run even when others do not, so that ranks outside a mismatched pair are not left waiting.
    std::string mismatches;
    if (options().validate) {
      mismatches = validate_batch(descs, what, post);
    } else {
      // Receives first, so that a message to self or from a fast peer finds its buffer.
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].kind == OpKind::kRecv) post(i);
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].kind == OpKind::kSend) post(i);
    }
    if (!reqs.empty()) mpi_wait_all(static_cast<int>(reqs.size()), reqs.data(), options().timeout_s, what);
    if (!mismatches.empty()) STRATA_THROW(ErrorCode::kMismatch, "{}", mismatches);
  });
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& label) {
  // Gather (color, key) first with a bounded wait: once every rank has arrived, MPI_Comm_split cannot hang.
  int mine[2] = {color, key};
  std::vector<int> all(2 * static_cast<std::size_t>(size()));
  std::string what = fmt::format("split of communicator '{}' (color {}, key {})", name(), color, key);
  InFlightScope scope(what);
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Iallgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, control_, &req));
  mpi_wait(req, options().timeout_s, what);
  MPI_Comm child = MPI_COMM_NULL;
  STRATA_CHECK_MPI(MPI_Comm_split(control_, color < 0 ? MPI_UNDEFINED : color, key, &child));
  if (child == MPI_COMM_NULL) return nullptr;
  auto out = std::make_unique<MpiCommunicator>(device(), child, child_name(color, label), options());
  MPI_Comm_free(&child);
  return out;
}

}  // namespace strata
