// STRATA_CHECK_CUDA(call): throws strata::Error(kCuda) naming the CUDA runtime call and its error.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/error.h"

// The message reads "call to cudaMalloc(&p, bytes) failed: out of memory (cudaErrorMemoryAllocation)". The
// runtime's last-error slot is cleared first, so a later cudaGetLastError() does not report the same failure twice.
#define STRATA_CHECK_CUDA(call)                                                                                     \
  do {                                                                                                              \
    cudaError_t strata_cuda_rc_ = (call);                                                                           \
    if (strata_cuda_rc_ != cudaSuccess) [[unlikely]] {                                                              \
      (void)cudaGetLastError();                                                                                     \
      ::strata::throw_error(::strata::ErrorCode::kCuda, __FILE__, __LINE__,                                         \
                            ::fmt::format("call to {} failed: {} ({})", #call, cudaGetErrorString(strata_cuda_rc_), \
                                          cudaGetErrorName(strata_cuda_rc_)));                                      \
    }                                                                                                               \
  } while (0)
