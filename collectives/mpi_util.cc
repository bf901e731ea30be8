// Bounded MPI waits, MPI error strings, and DType -> MPI_Datatype.
#include "collectives/mpi_util.h"

#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/in_flight.h"

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
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    STRATA_CHECK_MPI(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    // Spin briefly for latency, then yield: the rank's compute thread may share this core.
    if (spins > 64) std::this_thread::yield();
    if ((spins & 1023u) == 0 && clock::now() > deadline) throw_timeout(__FILE__, __LINE__, what, timeout_s);
  }
}

void mpi_wait(MPI_Request& request, double timeout_s, const std::string& what) {
  mpi_wait_all(1, &request, timeout_s, what);
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
