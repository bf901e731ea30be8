// DType names and sizes.
#include "core/dtype.h"

#include "core/error.h"

namespace strata {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kF64: return 8;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "unknown dtype {}", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF64: return "f64";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "fp32" || name == "float") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "float16" || name == "fp16" || name == "half") return DType::kF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  if (name == "i64" || name == "int64") return DType::kI64;
  if (name == "f64" || name == "float64" || name == "double") return DType::kF64;
  STRATA_THROW(ErrorCode::kInvalidArgument, "unknown dtype '{}' (use f32, bf16, f16, i32, i64 or f64)", name);
}

bool dtype_is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF64; }

}  // namespace strata
