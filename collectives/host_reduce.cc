// reduce_chunks: blocked, rank-ordered reduction with an f32 accumulator for 16-bit floats.
#include "collectives/host_reduce.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace strata {
namespace {

constexpr std::size_t kBlock = 2048;

struct Bf16Codec {
  static float load(std::uint16_t v) { return bf16_to_f32(v); }
  static std::uint16_t store(float v) { return f32_to_bf16(v); }
};
struct F16Codec {
  static float load(std::uint16_t v) { return f16_to_f32(v); }
  static std::uint16_t store(float v) { return f32_to_f16(v); }
};

template <typename Acc>
Acc combine(Acc a, Acc b, ReduceOp op) {
  return op == ReduceOp::kMax ? std::max(a, b) : a + b;
}

// T stored and accumulated as itself (f32, i32, i64).
// Chunk r starts at chunks[r]. Each block is read whole into `acc` before it is written, so `out` may alias a chunk.
template <typename T>
void reduce_native(const void* const* chunks, std::size_t n, std::size_t count, ReduceOp op, T* out) {
  T acc[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    std::size_t len = std::min(kBlock, count - base);
    const T* c0 = static_cast<const T*>(chunks[0]) + base;
    for (std::size_t i = 0; i < len; ++i) acc[i] = c0[i];
    for (std::size_t r = 1; r < n; ++r) {
      const T* c = static_cast<const T*>(chunks[r]) + base;
      if (op == ReduceOp::kMax) {
        for (std::size_t i = 0; i < len; ++i) acc[i] = std::max(acc[i], c[i]);
      } else {
        for (std::size_t i = 0; i < len; ++i) acc[i] += c[i];
      }
    }
    if (op == ReduceOp::kAvg) {
      T div = static_cast<T>(n);
      for (std::size_t i = 0; i < len; ++i) acc[i] /= div;
    }
    std::copy(acc, acc + len, out + base);
  }
}

// 16-bit floats: accumulate in f32, round once.
template <typename Conv>
void reduce_half(const void* const* chunks, std::size_t n, std::size_t count, ReduceOp op, std::uint16_t* out) {
  float acc[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    std::size_t len = std::min(kBlock, count - base);
    const std::uint16_t* c0 = static_cast<const std::uint16_t*>(chunks[0]) + base;
    for (std::size_t i = 0; i < len; ++i) acc[i] = Conv::load(c0[i]);
    for (std::size_t r = 1; r < n; ++r) {
      const std::uint16_t* c = static_cast<const std::uint16_t*>(chunks[r]) + base;
      for (std::size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], Conv::load(c[i]), op);
    }
    float div = static_cast<float>(n);
    for (std::size_t i = 0; i < len; ++i) out[base + i] = Conv::store(op == ReduceOp::kAvg ? acc[i] / div : acc[i]);
  }
}

}  // namespace

void reduce_pieces(const void* const* chunks, std::size_t n, std::size_t count, DType dtype, ReduceOp op, void* out) {
  if (count == 0) return;
  STRATA_CHECK(n > 0, "reduce over {} chunks", n);
  switch (dtype) {
    case DType::kF32: return reduce_native(chunks, n, count, op, static_cast<float*>(out));
    case DType::kI32: return reduce_native(chunks, n, count, op, static_cast<std::int32_t*>(out));
    case DType::kI64: return reduce_native(chunks, n, count, op, static_cast<std::int64_t*>(out));
    case DType::kF64: return reduce_native(chunks, n, count, op, static_cast<double*>(out));
    case DType::kBF16: return reduce_half<Bf16Codec>(chunks, n, count, op, static_cast<std::uint16_t*>(out));
    case DType::kF16: return reduce_half<F16Codec>(chunks, n, count, op, static_cast<std::uint16_t*>(out));
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "reduce of unknown dtype {}", static_cast<int>(dtype));
}

void reduce_chunks(const void* chunks, std::size_t n, std::size_t stride, std::size_t count, DType dtype,
                   ReduceOp op, void* out) {
  if (count == 0) return;
  std::vector<const void*> at(n);
  for (std::size_t r = 0; r < n; ++r) at[r] = static_cast<const char*>(chunks) + r * stride * dtype_size(dtype);
  reduce_pieces(at.data(), n, count, dtype, op, out);
}

}  // namespace strata
