// Test helpers: the shared Runtime, rank-agreed verdicts, verifiable data.
#include "tests/support/test_support.h"

#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::test {
namespace {
std::unique_ptr<Runtime> g_runtime;
}

void start_runtime(int* argc, char*** argv) { g_runtime = std::make_unique<Runtime>(argc, argv); }
void stop_runtime() { g_runtime.reset(); }
Runtime& runtime() { return *g_runtime; }

bool all_ranks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

void fill_verifiable(void* dst, std::size_t count, DType dtype, int seed, int rank) {
  for (std::size_t i = 0; i < count; ++i) {
    int v = verifiable_int(seed, rank, i);
    switch (dtype) {
      case DType::kF32: static_cast<float*>(dst)[i] = static_cast<float>(v); break;
      case DType::kBF16: static_cast<std::uint16_t*>(dst)[i] = f32_to_bf16(static_cast<float>(v)); break;
      case DType::kF16: static_cast<std::uint16_t*>(dst)[i] = f32_to_f16(static_cast<float>(v)); break;
      case DType::kI32: static_cast<std::int32_t*>(dst)[i] = v; break;
      case DType::kI64: static_cast<std::int64_t*>(dst)[i] = v; break;
      case DType::kF64: static_cast<double*>(dst)[i] = v; break;
    }
  }
}

double element(const void* src, std::size_t i, DType dtype) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(src)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    case DType::kI32: return static_cast<const std::int32_t*>(src)[i];
    case DType::kI64: return static_cast<double>(static_cast<const std::int64_t*>(src)[i]);
    case DType::kF64: return static_cast<const double*>(src)[i];
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "unknown dtype");
}

SharedScratchDir::SharedScratchDir(const std::string& what) {
  int root_pid = ::getpid();
  MPI_Bcast(&root_pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  path_ = (std::filesystem::temp_directory_path() / fmt::format("strata_{}_{}", what, root_pid)).string();
  if (runtime().rank() == 0) std::filesystem::remove_all(path_);
  MPI_Barrier(MPI_COMM_WORLD);
}

SharedScratchDir::~SharedScratchDir() {
  MPI_Barrier(MPI_COMM_WORLD);
  std::error_code ec;
  if (runtime().rank() == 0) std::filesystem::remove_all(path_, ec);
  MPI_Barrier(MPI_COMM_WORLD);
}

ScratchDir::ScratchDir(const std::string& what)
    : path_((std::filesystem::temp_directory_path() /
             fmt::format("strata_{}_{}_{}", what, ::getpid(), runtime().rank()))
                .string()) {
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace strata::test
