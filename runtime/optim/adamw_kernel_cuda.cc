// CudaAdamWKernel: the scalars computed once on the host (adamw_scalars, as the host loops use), then the launcher.
#include "runtime/optim/adamw_kernel_cuda.h"

#include "core/cuda_check.h"
#include "core/cuda_device.h"
#include "core/error.h"
#include "runtime/optim/adamw_launch.h"

namespace strata {
namespace {

CudaDevice& as_cuda(Device& device) {
  auto* d = dynamic_cast<CudaDevice*>(&device);
  STRATA_CHECK(d != nullptr, "the CUDA AdamW kernel needs a CUDA device, not {}", device.name());
  return *d;
}

}  // namespace

CudaAdamWKernel::CudaAdamWKernel(Device& device) : device_(as_cuda(device)) {}

void CudaAdamWKernel::update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg,
                             double lr, std::int64_t t, bool decay, float* nonfinite, Stream& stream) {
  const AdamWScalars a = adamw_scalars(cfg, lr, t, decay);
  const cuda_adamw::Scalars k{a.shrink, a.b1, a.one_minus_b1, a.b2, a.one_minus_b2, a.step_size, a.bc2_sqrt, a.eps};
  STRATA_CHECK_CUDA(cuda_adamw::update(p, g, m, v, n, k, nonfinite, device_.cuda_stream(stream, "adamw")));
}

}  // namespace strata
