// strata::Error, its ErrorCode, and the STRATA_CHECK macros that name the call, the rank and file:line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace strata {

enum class ErrorCode {
  kInternal,
  kInvalidArgument,  // a caller passed something wrong
  kMismatch,         // ranks disagree (validation mode, shapes, counts)
  kTimeout,          // a bounded wait ran past STRATA_TIMEOUT_S
  kMpi,
  kCuda,
  kNccl,
  kIo,
  kUnsupported,  // the feature does not exist on this backend
  kOutOfMemory,
  kRemote,  // another rank failed first
  kNonFinite,  // a NaN or an infinity where values must be finite (weights, gradients)
};

const char* error_code_name(ErrorCode code);

// The one exception type. what() reads "[rank 3/8] runtime/x.cc:142: <message>".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// The process's identity for error prefixes and log lines; set once by strata::Runtime.
void set_process_identity(int rank, int world_size);
int process_rank();
int process_world_size();

// "[rank r/w] file:line: " (or "[rank ?] ..." before initialisation).
std::string error_prefix(const char* file, int line);

[[noreturn]] void throw_error(ErrorCode code, const char* file, int line, const std::string& message);

}  // namespace strata

#define STRATA_THROW(code, ...) ::strata::throw_error((code), __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// STRATA_CHECK(cond, "fmt", args...): throws kInvalidArgument naming the condition.
#define STRATA_CHECK(cond, ...)                                                                                 \
  do {                                                                                                          \
    if (!(cond)) [[unlikely]]                                                                                   \
      ::strata::throw_error(::strata::ErrorCode::kInvalidArgument, __FILE__, __LINE__,                          \
                            ::fmt::format("check failed: {}: {}", #cond, ::fmt::format(__VA_ARGS__)));          \
  } while (0)

#define STRATA_CHECK_CODE(code, cond, ...)                                                                      \
  do {                                                                                                          \
    if (!(cond)) [[unlikely]]                                                                                   \
      ::strata::throw_error((code), __FILE__, __LINE__, ::fmt::format(__VA_ARGS__));                            \
  } while (0)

// STRATA_CHECK_MPI(MPI_Comm_rank(comm, &r)): names the call and MPI's own error string.
#define STRATA_CHECK_MPI(call)                                                                                  \
  do {                                                                                                          \
    int strata_mpi_rc_ = (call);                                                                                \
    if (strata_mpi_rc_ != 0) [[unlikely]]                                                                       \
      ::strata::throw_error(::strata::ErrorCode::kMpi, __FILE__, __LINE__,                                      \
                            ::fmt::format("call to {} failed: {}", #call,                                       \
                                          ::strata::detail::mpi_error_string(strata_mpi_rc_)));                 \
  } while (0)

namespace strata::detail {
std::string mpi_error_string(int rc);  // defined in collectives (the only MPI user below the bootstrap)
}  // namespace strata::detail
