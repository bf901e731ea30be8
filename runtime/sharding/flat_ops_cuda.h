// CudaFlatOps: FlatOps on one GPU's memory, as kernels on its streams (flat_ops_kernels.cu).
#pragma once

#include "runtime/sharding/flat_ops.h"

namespace strata {

class CudaDevice;

class CudaFlatOps : public FlatOps {
 public:
  explicit CudaFlatOps(Device& device);  // a CUDA device, else kInvalidArgument
  void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n, Stream& stream) override;
  void accumulate_f32(float* dst, const void* src, DType src_dtype, std::size_t n, Stream& stream) override;
  void add_f32_into(void* dst, DType dst_dtype, const float* src, std::size_t n, Stream& stream) override;
  void scale_f32(float* x, std::size_t n, float factor, Stream& stream) override;
  void add_sum_squares(const float* x, std::size_t n, double* out, Stream& stream) override;

 private:
  CudaDevice& device_;
  Buffer scratch_;  // the sum of squares' per-block partials (used in stream order on the compute stream)
};

}  // namespace strata
