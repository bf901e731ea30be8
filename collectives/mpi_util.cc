// Bounded MPI waits, MPI error strings, and DType -> MPI_Datatype.
#include "collectives/mpi_util.h"

#include <chrono>
#include <climits>
#include <thread>

#include "core/error.h"
#include "core/in_flight.h"
#include "core/wait_hooks.h"

namespace strata {

namespace detail {
std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<std::size_t>(len));
}
}  // namespace detail

void mpi_wait_all(int n, MPI_Request* requests, double timeout_s, const std::string& what) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
  auto next_hooks = clock::now() + std::chrono::milliseconds(5);
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    STRATA_CHECK_MPI(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    // Spin briefly for latency, then yield: the rank's compute thread may share this core.
    if (spins > 64) std::this_thread::yield();
    if ((spins & 63u) == 0) {
      auto now = clock::now();
      if (now > deadline) throw_timeout(__FILE__, __LINE__, what, timeout_s);
      if (now >= next_hooks) {
        // The pollers (the side channel: a peer that left) may end the wait with their error.
        WaitHooks::poll();
        next_hooks = now + std::chrono::milliseconds(5);
      }
    }
  }
}

void mpi_wait(MPI_Request& request, double timeout_s, const std::string& what) {
  mpi_wait_all(1, &request, timeout_s, what);
}

int mpi_rank(MPI_Comm comm) {
  int r = 0;
  STRATA_CHECK_MPI(MPI_Comm_rank(comm, &r));
  return r;
}

int mpi_size(MPI_Comm comm) {
  int n = 0;
  STRATA_CHECK_MPI(MPI_Comm_size(comm, &n));
  return n;
}

int mpi_count(std::size_t count, const char* op) {
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, count <= static_cast<std::size_t>(INT_MAX),
                    "{}: {} elements per rank exceed the MPI backend's limit of INT_MAX", op, count);
  return static_cast<int>(count);
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 0;
  STRATA_CHECK_MPI(MPI_Comm_size(comm, &size));
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  STRATA_CHECK_MPI(MPI_Comm_group(comm, &group));
  STRATA_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> ranks(static_cast<std::size_t>(size)), out(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = i;
  int rc = MPI_Group_translate_ranks(group, size, ranks.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  STRATA_CHECK_MPI(rc);
  return out;
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kBF16:
    case DType::kF16: return MPI_UINT16_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kF64: return MPI_DOUBLE;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "no MPI datatype for dtype {}", static_cast<int>(dtype));
}

}  // namespace strata
