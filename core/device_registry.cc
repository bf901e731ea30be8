// The device registry: the one file in strata_core where STRATA_WITH_CUDA is tested.
#include "core/device_registry.h"

#include "core/config.h"
#include "core/cpu_device.h"
#include "core/error.h"

#if STRATA_WITH_CUDA
#include "core/cuda_device.h"
#endif

namespace strata {

bool cuda_built() { return STRATA_WITH_CUDA != 0; }

int cuda_device_count() {
#if STRATA_WITH_CUDA
  return CudaDevice::device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Device> create_device(DeviceKind kind, int index, double timeout_s) {
  if (kind == DeviceKind::kCpu) return std::make_unique<CpuDevice>(timeout_s);
#if STRATA_WITH_CUDA
  int n = CudaDevice::device_count();
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, n > 0, "the CUDA backend was asked for but no GPU is visible");
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, index >= 0 && index < n, "cuda:{} asked for but {} GPU(s) visible",
                    index, n);
  install_nvtx_ranges();
  return std::make_unique<CudaDevice>(index, timeout_s);
#else
  (void)index;
  (void)timeout_s;
  STRATA_THROW(ErrorCode::kUnsupported,
               "the CUDA backend was asked for but this build has no CUDA (configure with -DSTRATA_CUDA=ON)");
#endif
}

std::unique_ptr<Device> create_host_device(const Device& device) {
#if STRATA_WITH_CUDA
  if (device.kind() == DeviceKind::kCuda) return std::make_unique<PinnedHostDevice>(device.index(), device.timeout_s());
#endif
  return std::make_unique<CpuDevice>(device.timeout_s(), "host");
}

}  // namespace strata
