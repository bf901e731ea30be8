// STRATA_CHECK_NCCL(call): throws strata::Error(kNccl) naming the NCCL call, its result and ncclGetLastError().
#pragma once

#include <fmt/format.h>
#include <nccl.h>

#include <string>

#include "core/error.h"

namespace strata::detail {
// "<result string> (last NCCL error: <ncclGetLastError text, or 'none'>)".
inline std::string nccl_error_text(ncclResult_t rc) {
  const char* last = ncclGetLastError(nullptr);  // the comm argument is unused by NCCL
  return fmt::format("{} (last NCCL error: {})", ncclGetErrorString(rc), last && *last ? last : "none");
}
}  // namespace strata::detail

// Anything but ncclSuccess fails, ncclInProgress included: calls on a non-blocking communicator that may return it
// are handled by NcclCommunicator itself.
#define STRATA_CHECK_NCCL(call)                                                                               \
  do {                                                                                                        \
    ncclResult_t strata_nccl_rc_ = (call);                                                                    \
    if (strata_nccl_rc_ != ncclSuccess) [[unlikely]]                                                          \
      ::strata::throw_error(                                                                                  \
          ::strata::ErrorCode::kNccl, __FILE__, __LINE__,                                                     \
          ::fmt::format("call to {} failed: {}", #call, ::strata::detail::nccl_error_text(strata_nccl_rc_))); \
  } while (0)
