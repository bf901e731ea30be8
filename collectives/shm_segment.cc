// ShmSegment: the shared-memory object of a lane's slots, the step protocol and its bounded waits.
#include "collectives/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "collectives/host_reduce.h"
#include "collectives/mpi_util.h"
#include "core/backoff.h"
#include "core/error.h"
#include "core/in_flight.h"
#include "core/logging.h"
#include "core/streaming_copy.h"
#include "core/wait_hooks.h"

namespace strata {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// A peer usually publishes within microseconds when it runs on its own core: spin that long before yielding.
constexpr int kSpins = 2000;

void copy_plain(char* dst, const char* src, std::size_t len) { std::memcpy(dst, src, len); }

}  // namespace

std::unique_ptr<ShmSegment> ShmSegment::create(MPI_Comm comm, double timeout_s, const std::string& what) {
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->timeout_s_ = timeout_s;
  STRATA_CHECK_MPI(MPI_Comm_rank(comm, &seg->rank_));
  STRATA_CHECK_MPI(MPI_Comm_size(comm, &seg->size_));
  const int me = seg->rank_, n = seg->size_;
  // reduce_scatter puts one piece per destination rank in each buffer.
  STRATA_CHECK(static_cast<std::size_t>(n) * 8 <= kPiece, "{}: {} ranks on one node exceed the shared-memory path's {}",
               what, n, kPiece / 8);
  const std::size_t total = static_cast<std::size_t>(n) * seg->slot_bytes_;
  // Group rank 0 creates the object with its space reserved (a full /dev/shm is an error here, not a SIGBUS later)
  // and sends its name, or "!" and the reason.
  char name[128] = {};
  static std::atomic<std::uint64_t> counter{0};
  if (me == 0) {
    std::string n0 = fmt::format("/strata-{}-{}", ::getpid(), counter++);
    std::string problem;
    int fd = ::shm_open(n0.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      problem = fmt::format("shm_open({}): {}", n0, std::strerror(errno));
    } else {
      int rc = ::ftruncate(fd, static_cast<off_t>(total)) == 0 ? 0 : errno;
      if (rc == 0) rc = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
      if (rc != 0) {
        problem = fmt::format("reserving {} bytes for {}: {}", total, n0, std::strerror(rc));
        ::shm_unlink(n0.c_str());
      }
      ::close(fd);
    }
    std::snprintf(name, sizeof(name), "%s", problem.empty() ? n0.c_str() : ("!" + problem).c_str());
  }
  // The name goes as soon as every rank has opened it, or given up, or this rank throws (a timeout below).
  struct Unlink {
    const char* name;
    ~Unlink() {
      if (name[0] == '/') ::shm_unlink(name);
    }
  } unlink_at_exit{me == 0 ? name : ""};
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Ibcast(name, sizeof(name), MPI_CHAR, 0, comm, &req));
  mpi_wait(req, timeout_s, what);
  std::string problem = name[0] == '!' ? std::string(name + 1) : std::string();
  if (problem.empty()) {
    int fd = ::shm_open(name, O_RDWR, 0600);
    if (fd < 0) {
      problem = fmt::format("shm_open({}) on group rank {}: {}", name, me, std::strerror(errno));
    } else {
      void* at = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (at == MAP_FAILED) {
        problem = fmt::format("mmap of {} bytes of {} on group rank {}: {}", total, name, me, std::strerror(errno));
      } else {
        seg->base_ = static_cast<char*>(at);
        seg->mapped_ = total;
      }
      ::close(fd);
    }
  }
  int ok = problem.empty() ? 1 : 0;
  if (ok) {
    for (int r = 0; r < n; ++r) seg->slots_.push_back(seg->base_ + static_cast<std::size_t>(r) * seg->slot_bytes_);
    // Counters from zero, and this rank's pages faulted in now rather than inside the first operation.
    std::memset(seg->slots_[static_cast<std::size_t>(me)], 0, seg->slot_bytes_);
    Header* h = new (seg->slots_[static_cast<std::size_t>(me)]) Header;
    h->published.value.store(0, std::memory_order_relaxed);
    h->consumed.value.store(0, std::memory_order_relaxed);
    h->ready.value.store(0, std::memory_order_relaxed);
    h->done.value.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // Whether every rank mapped it; this exchange also keeps every peer from reading a header before its owner set it.
  int all_ok = 0;
  STRATA_CHECK_MPI(MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm, &req));
  mpi_wait(req, timeout_s, what);
  unlink_at_exit = Unlink{""};
  if (me == 0 && name[0] == '/') ::shm_unlink(name);  // every rank has opened it or given up
  if (!all_ok) {
    if (me == 0 || !problem.empty())
      logger("comm").warn("{}: no shared-memory segment ({}); this lane stays on MPI", what,
                          problem.empty() ? "another rank could not map it" : problem);
    return nullptr;
  }
  seg->direct_ = PeerBlocks::probe(comm, timeout_s, what);
  seg->inputs_.resize(static_cast<std::size_t>(n));
  seg->outputs_.resize(static_cast<std::size_t>(n));
  return seg;
}

ShmSegment::~ShmSegment() {
  if (base_) ::munmap(base_, mapped_);
}

void ShmSegment::wait_peers(Counter Header::*which, std::uint64_t target, const std::string& what) {
  auto ready = [&] {
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && (header(p).*which).value.load(std::memory_order_acquire) < target) return false;
    return true;
  };
  for (int i = 0; i < kSpins; ++i) {
    if (ready()) return;
    cpu_relax();
  }
  // Then as mpi_wait: the deadline, the WaitHooks pollers every 5 ms (the side channel's departure check), and the
  // core handed over, since the peer (or this rank's compute thread) may need it.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + to_duration(timeout_s_);
  auto next_hooks = start;
  for (;;) {
    if (ready()) return;
    auto now = Clock::now();
    if (now >= next_hooks) {
      WaitHooks::poll();
      next_hooks = now + std::chrono::milliseconds(5);
    }
    if (now > deadline) throw_timeout(__FILE__, __LINE__, what, timeout_s_);
    if (now - start < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

char* ShmSegment::begin_write(const std::string& what) {
  if (step_ >= kDepth) wait_peers(&Header::consumed, step_ + 1 - kDepth, what);
  return buffer(rank_, step_);
}

void ShmSegment::publish_and_wait(const std::string& what) {
  header(rank_).published.value.store(step_ + 1, std::memory_order_release);
  wait_peers(&Header::published, step_ + 1, what);
}

void ShmSegment::end_step() {
  header(rank_).consumed.value.store(step_ + 1, std::memory_order_release);
  ++step_;
}

bool ShmSegment::open_buffers(const void* send, std::size_t bytes, const std::string& what, const void* recv,
                              std::size_t recv_bytes) {
  ++direct_op_;
  auto publish = [](BufferRef& mine, const void* at, std::size_t len) {
    auto ref = SharedHostMemory::find(at, len);
    mine.shared = ref ? 1 : 0;
    if (ref) mine.block = *ref;
  };
  publish(header(rank_).input, send, bytes);
  if (recv) publish(header(rank_).output, recv, recv_bytes);
  header(rank_).ready.value.store(direct_op_, std::memory_order_release);
  wait_peers(&Header::ready, direct_op_, what);
  bool all = true;
  for (int p = 0; p < size_; ++p) all = all && header(p).input.shared != 0 && (!recv || header(p).output.shared != 0);
  if (!all) {
    close_buffers(what);  // nobody reads; this only keeps every BufferRef until its peers have looked at it
    return false;
  }
  for (int p = 0; p < size_; ++p) {
    const std::size_t i = static_cast<std::size_t>(p);
    inputs_[i] = p == rank_ ? static_cast<const char*>(send) : peers_.map(p, header(p).input.block, bytes, what);
    if (recv)
      outputs_[i] =
          p == rank_ ? static_cast<const char*>(recv) : peers_.map(p, header(p).output.block, recv_bytes, what);
  }
  return true;
}

void ShmSegment::close_buffers(const std::string& what) {
  header(rank_).done.value.store(direct_op_, std::memory_order_release);
  wait_peers(&Header::done, direct_op_, what);
}

void ShmSegment::end_direct(const std::string& what) {
  close_buffers(what);
  direct_done_.fetch_add(1, std::memory_order_relaxed);
}

void ShmSegment::all_gather(const void* send, void* recv, std::size_t bytes, const std::string& what) {
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  const std::size_t me = static_cast<std::size_t>(rank_), n = static_cast<std::size_t>(size_);
  const bool in_place = src == dst + me * bytes;
  auto copy_out = n * bytes >= kStreamingCopyMin ? copy_streaming : copy_plain;
  if (direct_ && bytes >= kDirectBytes && open_buffers(send, bytes, what)) {
    // Piece by piece, every rank starting with its own input: a piece one rank reads from memory the other reads
    // moments later from the shared cache.
    for (std::size_t off = 0; off < bytes; off += kPiece) {
      const std::size_t len = std::min(kPiece, bytes - off);
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t p = (me + k) % n;
        if (p != me || !in_place) copy_out(dst + p * bytes + off, inputs_[p] + off, len);
      }
    }
    stream_fence();
    end_direct(what);
    return;
  }
  for (std::size_t off = 0; off < bytes; off += kPiece) {
    const std::size_t len = std::min(kPiece, bytes - off);
    std::memcpy(begin_write(what), src + off, len);
    header(rank_).published.value.store(step_ + 1, std::memory_order_release);
    // Our own piece while the peers read theirs (from cache: it was just read).
    if (!in_place) copy_out(dst + me * bytes + off, src + off, len);
    wait_peers(&Header::published, step_ + 1, what);
    for (int p = 0; p < size_; ++p)
      if (p != rank_) copy_out(dst + static_cast<std::size_t>(p) * bytes + off, buffer(p, step_), len);
    end_step();
  }
  stream_fence();
}

void ShmSegment::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op,
                                const std::string& what) {
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  const std::size_t esz = dtype_size(dtype), n = static_cast<std::size_t>(size_), me = static_cast<std::size_t>(rank_);
  const std::size_t per = std::max<std::size_t>(1, kPiece / (n * esz));  // elements per destination per step
  std::vector<const void*> pieces(n);
  if (direct_ && recv_count * esz >= kDirectBytes && open_buffers(send, n * recv_count * esz, what)) {
    // Our part of every rank's input, read where it lies, reduced in rank order as below.
    const std::size_t step = kPiece / esz;
    for (std::size_t off = 0; off < recv_count; off += step) {
      const std::size_t len = std::min(step, recv_count - off);
      for (std::size_t q = 0; q < n; ++q) pieces[q] = inputs_[q] + (me * recv_count + off) * esz;
      reduce_pieces(pieces.data(), n, len, dtype, op, dst + off * esz);  // in place: dst aliases pieces[me]
    }
    end_direct(what);
    return;
  }
  for (std::size_t off = 0; off < recv_count; off += per) {
    const std::size_t len = std::min(per, recv_count - off);
    char* mine = begin_write(what);
    // Piece r of the buffer is for rank r; our own we read from `send` directly.
    for (std::size_t r = 0; r < n; ++r)
      if (r != me) std::memcpy(mine + r * per * esz, src + (r * recv_count + off) * esz, len * esz);
    publish_and_wait(what);
    for (std::size_t q = 0; q < n; ++q)
      pieces[q] = q == me ? src + (me * recv_count + off) * esz : buffer(static_cast<int>(q), step_) + me * per * esz;
    reduce_pieces(pieces.data(), n, len, dtype, op, dst + off * esz);  // in place: dst aliases pieces[me]
    end_step();
  }
}

void ShmSegment::all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                            const std::string& what) {
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  const std::size_t bytes = count * dtype_size(dtype), n = static_cast<std::size_t>(size_);
  if (direct_ && bytes >= n * kDirectBytes && open_buffers(send, bytes, what, recv, bytes))
    return all_reduce_direct(dst, count, dtype, op, what);
  if (bytes < kHalvesBytes) return all_reduce_whole(src, dst, count, dtype, op, what);
  all_reduce_in_halves(src, dst, count, dtype, op, what);
}

void ShmSegment::all_reduce_direct(char* dst, std::size_t count, DType dtype, ReduceOp op, const std::string& what) {
  // Rank r owns the elements [part(r), part(r + 1)): it reduces them from every rank's input in rank order into its
  // own output, and once every rank has, copies the other parts from their owners' outputs. In place each rank
  // writes only its own part of its own buffer, which no peer reads in the first half.
  const std::size_t esz = dtype_size(dtype), n = static_cast<std::size_t>(size_), me = static_cast<std::size_t>(rank_);
  auto part = [&](std::size_t r) { return r * count / n; };
  const std::size_t step = kPiece / esz;
  std::vector<const void*> pieces(n);
  for (std::size_t off = part(me); off < part(me + 1); off += step) {
    const std::size_t len = std::min(step, part(me + 1) - off);
    for (std::size_t q = 0; q < n; ++q) pieces[q] = inputs_[q] + off * esz;
    reduce_pieces(pieces.data(), n, len, dtype, op, dst + off * esz);  // in place: dst aliases pieces[me]
  }
  header(rank_).reduced.value.store(direct_op_, std::memory_order_release);
  wait_peers(&Header::reduced, direct_op_, what);
  auto copy_out = count * esz >= kStreamingCopyMin ? copy_streaming : copy_plain;
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t p = (me + k) % n;
    copy_out(dst + part(p) * esz, outputs_[p] + part(p) * esz, (part(p + 1) - part(p)) * esz);
  }
  stream_fence();
  end_direct(what);
}

void ShmSegment::all_reduce_in_halves(const char* src, char* dst, std::size_t count, DType dtype, ReduceOp op,
                                      const std::string& what) {
  // Each stretch of n * per elements is a reduce-scatter step (rank r reduces the r-th `per` of it) and then an
  // all-gather step of the reduced parts: every rank reduces 1/n of the buffer instead of all of it. In place, a
  // part that the all-gather overwrites was copied into the slot in the first step.
  const std::size_t esz = dtype_size(dtype), n = static_cast<std::size_t>(size_), me = static_cast<std::size_t>(rank_);
  // A buffer shorter than one stretch of slots is split evenly, or the first ranks would reduce it all.
  const std::size_t per = std::max<std::size_t>(1, std::min(kPiece / (n * esz), (count + n - 1) / n));
  std::vector<const void*> pieces(n);
  for (std::size_t off = 0; off < count; off += n * per) {
    auto begin = [&](std::size_t r) { return off + std::min(r * per, count - off); };
    auto len = [&](std::size_t r) { return begin(r + 1) - begin(r); };
    char* mine = begin_write(what);
    for (std::size_t r = 0; r < n; ++r)
      if (r != me) std::memcpy(mine + r * per * esz, src + begin(r) * esz, len(r) * esz);
    publish_and_wait(what);
    for (std::size_t q = 0; q < n; ++q)
      pieces[q] = q == me ? src + begin(me) * esz : buffer(static_cast<int>(q), step_) + me * per * esz;
    reduce_pieces(pieces.data(), n, len(me), dtype, op, dst + begin(me) * esz);  // in place: dst aliases pieces[me]
    end_step();
    std::memcpy(begin_write(what), dst + begin(me) * esz, len(me) * esz);
    publish_and_wait(what);
    for (std::size_t p = 0; p < n; ++p)
      if (p != me) std::memcpy(dst + begin(p) * esz, buffer(static_cast<int>(p), step_), len(p) * esz);
    end_step();
  }
}

void ShmSegment::all_reduce_whole(const char* src, char* dst, std::size_t count, DType dtype, ReduceOp op,
                                  const std::string& what) {
  // One exchange, then every rank reduces the whole buffer from the published pieces: for small buffers one wait
  // costs more than reducing n times as much.
  const std::size_t esz = dtype_size(dtype), n = static_cast<std::size_t>(size_), me = static_cast<std::size_t>(rank_);
  const std::size_t per = kPiece / esz;
  std::vector<const void*> pieces(n);
  for (std::size_t off = 0; off < count; off += per) {
    const std::size_t len = std::min(per, count - off);
    std::memcpy(begin_write(what), src + off * esz, len * esz);
    publish_and_wait(what);
    for (std::size_t q = 0; q < n; ++q) pieces[q] = q == me ? src + off * esz : buffer(static_cast<int>(q), step_);
    reduce_pieces(pieces.data(), n, len, dtype, op, dst + off * esz);  // in place: dst aliases pieces[me]
    end_step();
  }
}

}  // namespace strata
