// Host implementations of the flat-buffer operations.
#include "runtime/sharding/flat_ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace strata {
namespace {

float load(const void* src, DType t, std::size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(src)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    default: break;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "flat op on non-float dtype {}", dtype_name(t));
}

bool is_flat_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n) {
  STRATA_CHECK(is_flat_float(src_dtype) && is_flat_float(dst_dtype),
               "convert from {} to {}: float types only (f32, bf16, f16)", dtype_name(src_dtype), dtype_name(dst_dtype));
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memmove(dst, src, n * dtype_size(src_dtype));
    return;
  }
  switch (dst_dtype) {
    case DType::kF32: {
      float* d = static_cast<float*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = load(src, src_dtype, i);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(load(src, src_dtype, i));
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_f16(load(src, src_dtype, i));
      return;
    }
    default: break;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "convert to non-float dtype {}", dtype_name(dst_dtype));
}

void accumulate_f32(float* dst, const void* src, DType src_dtype, std::size_t n) {
  if (src_dtype == DType::kF32) {
    const float* s = static_cast<const float*>(src);
    for (std::size_t i = 0; i < n; ++i) dst[i] += s[i];
    return;
  }
  for (std::size_t i = 0; i < n; ++i) dst[i] += load(src, src_dtype, i);
}

void add_f32_into(void* dst, DType dst_dtype, const float* src, std::size_t n) {
  if (dst_dtype == DType::kF32) {
    accumulate_f32(static_cast<float*>(dst), src, DType::kF32, n);
    return;
  }
  constexpr std::size_t kBlock = 4096;
  float sum[kBlock];
  for (std::size_t base = 0; base < n; base += kBlock) {
    std::size_t len = std::min(kBlock, n - base);
    void* d = static_cast<char*>(dst) + base * dtype_size(dst_dtype);
    convert(d, dst_dtype, sum, DType::kF32, len);
    for (std::size_t i = 0; i < len; ++i) sum[i] += src[base + i];
    convert(sum, DType::kF32, d, dst_dtype, len);
  }
}

double sum_squares(const float* x, std::size_t n) {
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  return acc;
}

void scale_f32(float* x, std::size_t n, float factor) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= factor;
}

// ---- FlatOps on host memory: the loops above, in stream order ---------------------------------------------------

namespace {

class HostFlatOps : public FlatOps {
 public:
  void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n, Stream& stream) override {
    stream.enqueue_host([=] { strata::convert(src, src_dtype, dst, dst_dtype, n); });
  }
  void accumulate_f32(float* dst, const void* src, DType src_dtype, std::size_t n, Stream& stream) override {
    stream.enqueue_host([=] { strata::accumulate_f32(dst, src, src_dtype, n); });
  }
  void add_f32_into(void* dst, DType dst_dtype, const float* src, std::size_t n, Stream& stream) override {
    stream.enqueue_host([=] { strata::add_f32_into(dst, dst_dtype, src, n); });
  }
  void scale_f32(float* x, std::size_t n, float factor, Stream& stream) override {
    stream.enqueue_host([=] { strata::scale_f32(x, n, factor); });
  }
  void add_sum_squares(const float* x, std::size_t n, double* out, Stream& stream) override {
    stream.enqueue_host([=] { *out += sum_squares(x, n); });
  }
};

}  // namespace

std::unique_ptr<FlatOps> create_host_flat_ops() { return std::make_unique<HostFlatOps>(); }

}  // namespace strata
