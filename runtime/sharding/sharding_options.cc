// ShardingOptions: names, validation and description.
#include "runtime/sharding/sharding_options.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

const char* zero_stage_name(ZeroStage s) {
  switch (s) {
    case ZeroStage::kNone: return "0 (DDP)";
    case ZeroStage::kOptimizerState: return "1 (optimizer state)";
    case ZeroStage::kGradients: return "2 (gradients)";
    case ZeroStage::kParameters: return "3 (parameters)";
  }
  return "?";
}

ZeroStage zero_stage_from_int(int stage) {
  STRATA_CHECK(stage >= 0 && stage <= 3, "ZeRO stage {} does not exist (use 0, 1, 2 or 3)", stage);
  return static_cast<ZeroStage>(stage);
}

const char* offload_name(OffloadPolicy p) {
  switch (p) {
    case OffloadPolicy::kNone: return "none";
    case OffloadPolicy::kOptimizer: return "optimizer";
    case OffloadPolicy::kOptimizerAndParams: return "optimizer+params";
  }
  return "?";
}

OffloadPolicy offload_from_name(const std::string& name) {
  for (OffloadPolicy p : {OffloadPolicy::kNone, OffloadPolicy::kOptimizer, OffloadPolicy::kOptimizerAndParams})
    if (name == offload_name(p)) return p;
  STRATA_THROW(ErrorCode::kInvalidArgument, "offload policy '{}' does not exist (use none, optimizer or "
               "optimizer+params)", name);
}

void ShardingOptions::validate() const {
  STRATA_CHECK(offload != OffloadPolicy::kOptimizerAndParams || stage == ZeroStage::kParameters,
               "offload of the parameters needs ZeRO stage 3 (stage {} keeps the full parameters on every device); "
               "use offload 'optimizer' instead",
               zero_stage_name(stage));
  STRATA_CHECK(prefetch_depth >= 0 && prefetch_depth <= 8, "prefetch_depth {} must be in [0, 8]", prefetch_depth);
  STRATA_CHECK(align_elements >= 1, "align_elements must be at least 1, not {}", align_elements);
  const DType pdt = mixed_precision.param_dtype;
  STRATA_CHECK(pdt == DType::kF32 || pdt == DType::kBF16 || pdt == DType::kF16,
               "param_dtype {} is not supported (use f32, bf16 or f16)", dtype_name(pdt));
  STRATA_CHECK(mixed_precision.reduce_dtype == DType::kF32 || mixed_precision.reduce_dtype == DType::kBF16,
               "reduce_dtype {} is not supported (use f32 or bf16)", dtype_name(mixed_precision.reduce_dtype));
}

std::string ShardingOptions::describe() const {
  return fmt::format("ZeRO stage {}, param_dtype {}, reduce_dtype {}, reshard_after_forward {}, prefetch depth {}, "
                     "offload {}",
                     zero_stage_name(stage), dtype_name(mixed_precision.param_dtype),
                     dtype_name(mixed_precision.reduce_dtype), reshard_after_forward, prefetch_depth,
                     offload_name(offload));
}

}  // namespace strata
