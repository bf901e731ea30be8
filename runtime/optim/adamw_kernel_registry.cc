// create_adamw_kernel: the one place in strata_optim that tests STRATA_WITH_CUDA (as device_registry.cc in core).
#include "core/config.h"
#include "core/error.h"
#include "runtime/optim/adamw_kernel.h"

#if STRATA_WITH_CUDA
#include "runtime/optim/adamw_kernel_cuda.h"
#endif

namespace strata {

std::unique_ptr<AdamWKernel> create_adamw_kernel(Device& device) {
  if (device.kind() == DeviceKind::kCpu) return create_host_adamw_kernel();
#if STRATA_WITH_CUDA
  return std::make_unique<CudaAdamWKernel>(device);
#else
  STRATA_THROW(ErrorCode::kUnsupported, "no AdamW kernel for {}: this build has no CUDA", device.name());
#endif
}

}  // namespace strata
