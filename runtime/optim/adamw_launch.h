// The launcher of the CUDA AdamW kernel (adamw_launch.cu). Plain C++17 with CUDA runtime types only, so that nvcc
// never sees fmt: errors come back as cudaError_t and adamw_kernel_cuda.cc turns them into strata::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace strata::cuda_adamw {

// The f32 constants of one AdamW step (strata::AdamWScalars, field for field).
struct Scalars {
  float shrink, b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_sqrt, eps;
};

// `nonfinite` (device memory, may be null) is set to 1 when an updated element of p is not finite.
cudaError_t update(float* p, const float* g, float* m, float* v, std::size_t n, Scalars k, float* nonfinite,
                   cudaStream_t s);

}  // namespace strata::cuda_adamw
