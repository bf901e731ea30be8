// Which devices this build and this machine offer, and the factory for them. The only place that knows whether
// CUDA was built (see device_registry.cc).
#pragma once

#include <memory>

#include "core/device.h"

namespace strata {

bool cuda_built();        // configured with CUDA (STRATA_WITH_CUDA)
int cuda_device_count();  // visible GPUs; 0 when CUDA is not built or no driver/device is present

// A CPU device (index ignored) or cuda:index. Throws kUnsupported naming the reason when CUDA is unavailable.
std::unique_ptr<Device> create_device(DeviceKind kind, int index, double timeout_s);

// The host memory that `device` offloads to, as a Device of its own (named "host") so that it keeps its own
// ledger: plain host memory beside a CPU device, page-locked (cudaHostAlloc) memory beside a CUDA device.
std::unique_ptr<Device> create_host_device(const Device& device);

}  // namespace strata
