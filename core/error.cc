// strata::Error helpers: error-code names, the rank prefix, throw_error.
#include "core/error.h"

#include <atomic>

namespace strata {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_world{-1};
}  // namespace

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kMpi: return "mpi";
    case ErrorCode::kCuda: return "cuda";
    case ErrorCode::kNccl: return "nccl";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kOutOfMemory: return "out_of_memory";
    case ErrorCode::kRemote: return "remote";
    case ErrorCode::kNonFinite: return "non_finite";
  }
  return "unknown";
}

void set_process_identity(int rank, int world_size) {
  g_rank.store(rank);
  g_world.store(world_size);
}
int process_rank() { return g_rank.load(); }
int process_world_size() { return g_world.load(); }

std::string error_prefix(const char* file, int line) {
  int rank = g_rank.load();
  if (rank < 0) return fmt::format("[rank ?] {}:{}: ", file, line);
  return fmt::format("[rank {}/{}] {}:{}: ", rank, g_world.load(), file, line);
}

void throw_error(ErrorCode code, const char* file, int line, const std::string& message) {
  throw Error(code, error_prefix(file, line) + message);
}

}  // namespace strata
