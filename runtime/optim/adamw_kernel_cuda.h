// CudaAdamWKernel: the AdamW update as a kernel on one GPU's streams (adamw_launch.cu).
#pragma once

#include "runtime/optim/adamw_kernel.h"

namespace strata {

class CudaDevice;

class CudaAdamWKernel : public AdamWKernel {
 public:
  explicit CudaAdamWKernel(Device& device);  // a CUDA device, else kInvalidArgument
  void update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg, double lr,
              std::int64_t t, bool decay, float* nonfinite, Stream& stream) override;

 private:
  CudaDevice& device_;
};

}  // namespace strata
