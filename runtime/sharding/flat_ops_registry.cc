// create_flat_ops: the one place in strata_runtime that tests STRATA_WITH_CUDA (as device_registry.cc in core).
#include "core/config.h"
#include "core/error.h"
#include "runtime/sharding/flat_ops.h"

#if STRATA_WITH_CUDA
#include "runtime/sharding/flat_ops_cuda.h"
#endif

namespace strata {

std::unique_ptr<FlatOps> create_flat_ops(Device& device) {
  if (device.kind() == DeviceKind::kCpu) return create_host_flat_ops();
#if STRATA_WITH_CUDA
  return std::make_unique<CudaFlatOps>(device);
#else
  STRATA_THROW(ErrorCode::kUnsupported, "no flat operations for {}: this build has no CUDA", device.name());
#endif
}

}  // namespace strata
