// AttentionKernels' bf16 defaults: kUnsupported, naming the method.
#include "runtime/context/attention_kernels.h"

#include "core/error.h"

namespace strata {
namespace {

[[noreturn]] void no_bf16(const char* kernel) {
  STRATA_THROW(ErrorCode::kUnsupported,
               "{}: these attention kernels have no bf16 activations (implement AttentionKernels::{} or run the ring "
               "in f32; the CPU kernel table has them)",
               kernel, kernel);
}

}  // namespace

void AttentionKernels::attention_block_forward_bf16(const AttentionBlock&, RowsOut, RowStatsOut, Bf16Rows, Bf16Rows,
                                                    Bf16Rows) {
  no_bf16("attention_block_forward_bf16");
}
void AttentionKernels::attention_block_backward_bf16(const AttentionBlock&, RowsOut, RowsOut, RowsOut, Bf16Rows,
                                                     RowStats, RowStats, Bf16Rows, Bf16Rows, Bf16Rows) {
  no_bf16("attention_block_backward_bf16");
}
void AttentionKernels::attention_row_dot_bf16(const AttentionBlock&, RowStatsOut, Bf16Rows, Bf16Rows) {
  no_bf16("attention_row_dot_bf16");
}
void AttentionKernels::copy_rows_bf16(Bf16RowsOut, Bf16Rows, int, int, int) { no_bf16("copy_rows_bf16"); }
void AttentionKernels::round_rows_bf16(Bf16RowsOut, Rows, int, int, int, bool) { no_bf16("round_rows_bf16"); }

}  // namespace strata
