// AdamWKernel: the AdamW update (adamw_update's arithmetic) on flat f32 ranges of one Device's memory, enqueued on one
// of its streams: host loops for host memory, a kernel on a CUDA device (adamw_kernel_cuda.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "runtime/optim/adamw.h"

namespace strata {

class AdamWKernel {
 public:
  virtual ~AdamWKernel() = default;
  // adamw_update on n elements at step t (t >= 1), in `stream` order. Pointers are the device's memory. When
  // `nonfinite` is not null (one float of the device's memory), it is set to 1 if any updated element of p is not
  // finite, and left as it is otherwise.
  virtual void update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg, double lr,
                      std::int64_t t, bool decay, float* nonfinite, Stream& stream) = 0;
};

// The kernel for `device`'s memory: host loops for a CPU device (host memory), CUDA kernels for a CUDA device.
std::unique_ptr<AdamWKernel> create_adamw_kernel(Device& device);
// Host loops (adamw_update), run in stream order on the stream's thread or inline.
std::unique_ptr<AdamWKernel> create_host_adamw_kernel();

}  // namespace strata
