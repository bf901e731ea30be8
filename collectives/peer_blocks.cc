// PeerBlocks: opening a peer's memfd through /proc, and the cache of what is mapped.
#include "collectives/peer_blocks.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collectives/mpi_util.h"
#include "core/error.h"
#include "core/logging.h"

namespace strata {
namespace {

std::string proc_path(std::int32_t pid, std::int32_t fd) { return fmt::format("/proc/{}/fd/{}", pid, fd); }

}  // namespace

bool PeerBlocks::probe(MPI_Comm comm, double timeout_s, const std::string& what) {
  int me = 0, n = 1;
  STRATA_CHECK_MPI(MPI_Comm_rank(comm, &me));
  STRATA_CHECK_MPI(MPI_Comm_size(comm, &n));
  // Each rank offers a one-page block; each tries to open every other rank's.
  void* mine = SharedHostMemory::allocate(1);
  std::int32_t offer[2] = {0, -1};
  if (mine) {
    auto ref = SharedHostMemory::find(mine, 1);
    offer[0] = ref->pid;
    offer[1] = ref->fd;
  }
  std::vector<std::int32_t> all(2 * static_cast<std::size_t>(n));
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Iallgather(offer, 2, MPI_INT32_T, all.data(), 2, MPI_INT32_T, comm, &req));
  mpi_wait(req, timeout_s, what);
  int ok = 1;
  std::string problem;
  for (int p = 0; p < n && ok; ++p) {
    const std::int32_t pid = all[2 * static_cast<std::size_t>(p)], fd = all[2 * static_cast<std::size_t>(p) + 1];
    if (fd < 0) {
      ok = 0;
      problem = fmt::format("group rank {} has no shared host memory", p);
    } else if (p != me) {
      int f = ::open(proc_path(pid, fd).c_str(), O_RDONLY | O_CLOEXEC);
      if (f < 0) {
        ok = 0;
        problem = fmt::format("opening {} (group rank {}): {}", proc_path(pid, fd), p, std::strerror(errno));
      } else {
        ::close(f);
      }
    }
  }
  // Every rank has tried every other's before any frees its block.
  int all_ok = 0;
  STRATA_CHECK_MPI(MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm, &req));
  mpi_wait(req, timeout_s, what);
  if (mine) SharedHostMemory::release(mine);
  if (!problem.empty())
    logger("comm").debug("{}: peers' buffers are copied through the segment ({})", what, problem);
  return all_ok == 1;
}

PeerBlocks::~PeerBlocks() {
  for (const Mapping& m : maps_) ::munmap(m.base, m.bytes);
}

void PeerBlocks::unmap(std::size_t i) {
  ::munmap(maps_[i].base, maps_[i].bytes);
  maps_.erase(maps_.begin() + static_cast<std::ptrdiff_t>(i));
}

const char* PeerBlocks::map(int peer, const SharedBlockRef& ref, std::size_t bytes, const std::string& what) {
  STRATA_CHECK(ref.offset <= ref.block_bytes && bytes <= ref.block_bytes - ref.offset,
               "{}: group rank {} offers {} bytes at offset {} of a block of {}", what, peer, bytes, ref.offset,
               ref.block_bytes);
  ++clock_;
  for (Mapping& m : maps_)
    if (m.peer == peer && m.id == ref.id) {
      m.last_use = clock_;
      return m.base + ref.offset;
    }
  // The peer's descriptor number now names another block, so the one mapped under it was freed: let it go.
  std::size_t of_peer = 0;
  for (std::size_t i = maps_.size(); i-- > 0;) {
    if (maps_[i].peer != peer) continue;
    if (maps_[i].fd == ref.fd) {
      unmap(i);
    } else {
      ++of_peer;
    }
  }
  if (of_peer >= kMaxPerPeer) {
    std::size_t oldest = maps_.size();
    for (std::size_t i = 0; i < maps_.size(); ++i)
      if (maps_[i].peer == peer && (oldest == maps_.size() || maps_[i].last_use < maps_[oldest].last_use)) oldest = i;
    unmap(oldest);
  }
  const std::string path = proc_path(ref.pid, ref.fd);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STRATA_CHECK(fd >= 0, "{}: opening group rank {}'s buffer ({}): {}", what, peer, path, std::strerror(errno));
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= ref.block_bytes;
  void* at = sized ? ::mmap(nullptr, ref.block_bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int err = errno;
  ::close(fd);
  STRATA_CHECK(sized, "{}: group rank {}'s buffer ({}) is smaller than the {} bytes it offers", what, peer, path,
               ref.block_bytes);
  STRATA_CHECK(at != MAP_FAILED, "{}: mapping {} bytes of group rank {}'s buffer ({}): {}", what, ref.block_bytes,
               peer, path, std::strerror(err));
  char* base = static_cast<char*>(at);
#ifdef MADV_POPULATE_READ
  // Fault in the range asked for in one call rather than a page at a time during the copy. Only that range: a read
  // fault on a page the owner never touched would allocate it (MAP_POPULATE would do so for the whole block). A
  // kernel before 5.14 refuses the advice, and the pages fault in as they are read.
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t first = ref.offset / page * page;
  ::madvise(base + first, ref.offset + bytes - first, MADV_POPULATE_READ);
#endif
  maps_.push_back(Mapping{peer, ref.fd, ref.id, base, ref.block_bytes, clock_});
  return base + ref.offset;
}

}  // namespace strata
