// make_kernels and the CPU Kernels: kernels/cpu, std::memset and flat_ops.h's host loops, as GptModel called
// them before the seam, so that CPU results stay bitwise what they were.
#include "kernels/kernel_table.h"

#include <array>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/tp_ops.h"
#include "core/error.h"
#include "runtime/sharding/flat_ops.h"

// The one #if of kernels/: whether strata_kernels_cuda is linked in (kernels/CMakeLists.txt).
#if STRATA_KERNELS_WITH_CUDA
#include "kernels/cuda/cuda_kernel_table.h"
#endif

namespace strata {
namespace {

// Host memory, work inline on the calling thread (the CPU compute stream). With bf16 products, the matmuls convert
// their operands themselves (blas_bf16.cc) and attention's q, k, v and dout are rounded into scratch vectors that
// grow to the largest operand seen (host memory outside the ledger, like attention's tiles and the matmuls' bf16
// copies).
class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(bool bf16) : bf16_(bf16) {}

  void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                       int C) override {
    cpu::encoder_forward(out, tokens, wte, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                        int C) override {
    cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) override {
    cpu::matmul_forward(out, inp, weight, bias, N, IC, OC, bf16_);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, bf16_);
  }
  // bf16 activations (runtime/tensor's bf16 products): widened into scratch, the products above, rounded once.
  void matmul_forward_bf16(Bf16* out, const Bf16* inp, const float* weight, const float* bias, int N, int IC,
                           int OC) override {
    host_matmul_forward_bf16(*this, activation_scratch_, out, inp, weight, bias, N, IC, OC);
  }
  void matmul_backward_bf16(Bf16* dinp, float* dweight, float* dbias, const Bf16* dout, const Bf16* inp,
                            const float* weight, int N, int IC, int OC) override {
    host_matmul_backward_bf16(*this, activation_scratch_, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }
  void add_bias_bf16(Bf16* out, const float* bias, int N, int C) override { host_add_bias_bf16(out, bias, N, C); }
  void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V) override {
    cpu::lm_head_forward(logits, inp, wte, N, C, V, bf16_);
  }
  void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N,
                        int C, int V) override {
    cpu::lm_head_backward(dinp, dwte, dlogits, inp, wte, N, C, V, bf16_);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH) override {
    if (bf16_) qkv = rounded(0, qkv, std::size_t(B) * T * qkv_row(C, NH, KVH));
    cpu::attention_forward(out, lse, qkv, B, T, C, NH, KVH, bf16_);
  }
  void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                          int T, int C, int NH, int KVH) override {
    if (bf16_) {
      qkv = rounded(0, qkv, std::size_t(B) * T * qkv_row(C, NH, KVH));
      dout = rounded(1, dout, std::size_t(B) * T * C);
    }
    cpu::attention_backward(dqkv, dout, out, lse, qkv, B, T, C, NH, KVH, bf16_);
  }
  // bf16 compute: the block's q, k, v (and dout) rounded into scratch first, as attention_* round qkv.
  void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k,
                               Rows v) override {
    if (bf16_) {
      q = rounded_rows(0, q, blk.batch, blk.q_rows, blk.width);
      k = rounded_rows(1, k, blk.batch, blk.kv_rows, blk.kv_width());
      v = rounded_rows(2, v, blk.batch, blk.kv_rows, blk.kv_width());
    }
    cpu::attention_block_forward(blk, out, lse, q, k, v, bf16_);
  }
  void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Rows dout,
                                RowStats lse, RowStats di, Rows q, Rows k, Rows v) override {
    if (bf16_) {
      q = rounded_rows(0, q, blk.batch, blk.q_rows, blk.width);
      k = rounded_rows(1, k, blk.batch, blk.kv_rows, blk.kv_width());
      v = rounded_rows(2, v, blk.batch, blk.kv_rows, blk.kv_width());
      dout = rounded_rows(3, dout, blk.batch, blk.q_rows, blk.width);
    }
    cpu::attention_block_backward(blk, dq, dk, dv, dout, lse, di, q, k, v, bf16_);
  }
  void attention_merge(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows out_b, RowStats lse_b) override {
    cpu::attention_merge(blk, out, lse, out_b, lse_b);
  }
  void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Rows dout, Rows out) override {
    cpu::attention_row_dot(blk, di, dout, out);
  }
  void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add) override {
    cpu::copy_rows(dst, src, batch, rows, columns, add);
  }
  // bf16 activations: already bf16, so only the products' rounding (P and dS) depends on bf16 compute.
  void attention_block_forward_bf16(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Bf16Rows q, Bf16Rows k,
                                    Bf16Rows v) override {
    cpu::attention_block_forward(blk, out, lse, q, k, v, bf16_);
  }
  void attention_block_backward_bf16(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Bf16Rows dout,
                                     RowStats lse, RowStats di, Bf16Rows q, Bf16Rows k, Bf16Rows v) override {
    cpu::attention_block_backward(blk, dq, dk, dv, dout, lse, di, q, k, v, bf16_);
  }
  void attention_row_dot_bf16(const AttentionBlock& blk, RowStatsOut di, Bf16Rows dout, Bf16Rows out) override {
    cpu::attention_row_dot(blk, di, dout, out);
  }
  void copy_rows_bf16(Bf16RowsOut dst, Bf16Rows src, int batch, int rows, int columns) override {
    cpu::copy_rows(dst, src, batch, rows, columns);
  }
  void round_rows_bf16(Bf16RowsOut dst, Rows src, int batch, int rows, int columns, bool add) override {
    cpu::round_rows(dst, src, batch, rows, columns, add);
  }
  void gelu_forward(float* out, const float* inp, std::size_t n) override { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void residual_forward(float* out, const float* a, const float* b, std::size_t n) override {
    cpu::residual_forward(out, a, b, n);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int N, int C) override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void rope_forward(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                    std::size_t row_stride, std::size_t batch_stride) override {
    cpu::rope_forward(x, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride);
  }
  void rope_backward(float* dx, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                     std::size_t row_stride, std::size_t batch_stride) override {
    cpu::rope_backward(dx, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride);
  }
  void swiglu_forward(float* out, const float* gu, int N, int F) override { cpu::swiglu_forward(out, gu, N, F); }
  void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F) override {
    cpu::swiglu_backward(dgu, dout, gu, N, F);
  }
  void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const std::int32_t* targets, int N,
                            int V, float dscale) override {
    cpu::crossentropy_softmax(losses, dlogits, logits, targets, N, V, dscale);
  }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int v_begin, int v_count, int N,
                         int C) override {
    cpu::embedding_forward(out, tokens, wte, v_begin, v_count, N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, int v_begin, int v_count, int N,
                          int C) override {
    cpu::embedding_backward(dwte, dout, tokens, v_begin, v_count, N, C);
  }
  void position_forward(float* out, const float* wpe, int B, int T, int t0, int C) override {
    cpu::position_forward(out, wpe, B, T, t0, C);
  }
  void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C) override {
    cpu::position_backward(dwpe, dout, B, T, t0, C);
  }
  void add_bias(float* out, const float* bias, int N, int C) override { cpu::add_bias(out, bias, N, C); }
  void vocab_max(float* row_max, const float* logits, int N, int V, int valid) override {
    cpu::vocab_max(row_max, logits, N, V, valid);
  }
  void vocab_sumexp(float* stats, const float* logits, const float* row_max, const std::int32_t* targets, int v_begin,
                    int N, int V, int valid) override {
    cpu::vocab_sumexp(stats, logits, row_max, targets, v_begin, N, V, valid);
  }
  void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max, const float* stats,
                          const std::int32_t* targets, int v_begin, int N, int V, int valid, float dscale) override {
    cpu::vocab_crossentropy(losses, dlogits, logits, row_max, stats, targets, v_begin, N, V, valid, dscale);
  }
  void embedding_forward_bf16(Bf16* out, const std::int32_t* tokens, const float* wte, int v_begin, int v_count, int N,
                              int C) override {
    cpu::embedding_forward(out, tokens, wte, v_begin, v_count, N, C);
  }
  void embedding_backward_bf16(float* dwte, const Bf16* dout, const std::int32_t* tokens, int v_begin, int v_count,
                               int N, int C) override {
    cpu::embedding_backward(dwte, dout, tokens, v_begin, v_count, N, C);
  }
  void vocab_max_bf16(float* row_max, const Bf16* logits, int N, int V, int valid) override {
    cpu::vocab_max(row_max, logits, N, V, valid);
  }
  void vocab_sumexp_bf16(float* stats, const Bf16* logits, const float* row_max, const std::int32_t* targets,
                         int v_begin, int N, int V, int valid) override {
    cpu::vocab_sumexp(stats, logits, row_max, targets, v_begin, N, V, valid);
  }
  void vocab_crossentropy_bf16(float* losses, Bf16* dlogits, const Bf16* logits, const float* row_max,
                               const float* stats, const std::int32_t* targets, int v_begin, int N, int V, int valid,
                               float dscale) override {
    cpu::vocab_crossentropy(losses, dlogits, logits, row_max, stats, targets, v_begin, N, V, valid, dscale);
  }

  void zero(void* p, std::size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void to_f32(const void* src, DType dtype, float* dst, std::size_t n) override {
    strata::convert(src, dtype, dst, DType::kF32, n);
  }
  void add_f32_into(void* dst, DType dtype, const float* src, std::size_t n) override {
    strata::add_f32_into(dst, dtype, src, n);
  }
  void upload_tokens(std::int32_t* device_dst, const std::int32_t* host_src, std::size_t n) override {
    if (n) std::memcpy(device_dst, host_src, n * sizeof(std::int32_t));
  }
  double sum(const float* device_values, std::size_t n) override {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += device_values[i];
    return s;
  }

 private:
  // The `columns` floats of `rows` rows of `batch` batches of a view, rounded to bf16 into scratch slot `slot`: a
  // contiguous [batch, rows, columns] view of them.
  Rows rounded_rows(int slot, Rows src, int batch, int rows, int columns) {
    const std::size_t n = static_cast<std::size_t>(batch) * rows * columns;
    std::vector<float>& dst = scratch_[slot];
    if (dst.size() < n) dst.resize(n);
    const std::size_t width = static_cast<std::size_t>(columns), per_batch = static_cast<std::size_t>(rows) * width;
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
      for (std::size_t i = 0; i < static_cast<std::size_t>(rows); ++i)
        cpu::round_to_bf16(dst.data() + b * per_batch + i * width, src.data + b * src.batch_stride + i * src.row_stride,
                           width);
    return Rows{dst.data(), width, per_batch};
  }
  // Floats in a qkv row, C + 2 KVH D, once the heads are known to fit (before rounding that many).
  static std::size_t qkv_row(int C, int NH, int KVH) {
    STRATA_CHECK(NH > 0 && C > 0 && C % NH == 0 && KVH > 0 && NH % KVH == 0,
                 "attention: C = {} in NH = {} query heads and KVH = {} key / value heads (KVH dividing NH)", C, NH,
                 KVH);
    return static_cast<std::size_t>(C) + 2 * static_cast<std::size_t>(KVH) * (C / NH);
  }
  // src rounded to bf16 in scratch slot `slot` (each call of a kernel uses distinct slots).
  const float* rounded(int slot, const float* src, std::size_t n) {
    std::vector<float>& dst = scratch_[slot];
    if (dst.size() < n) dst.resize(n);
    cpu::round_to_bf16(dst.data(), src, n);
    return dst.data();
  }

  bool bf16_;
  std::array<std::vector<float>, 4> scratch_;
  std::vector<float> activation_scratch_;  // the bf16 linear kernels' f32 operands
};

}  // namespace

std::unique_ptr<Kernels> make_kernels(Device& device, DType matmul_dtype) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, matmul_dtype == DType::kF32 || matmul_dtype == DType::kBF16,
                    "the GPT kernels compute in f32 or bf16, not {}", dtype_name(matmul_dtype));
  const bool bf16 = matmul_dtype == DType::kBF16;
  if (device.kind() == DeviceKind::kCpu) return std::make_unique<CpuKernels>(bf16);
#if STRATA_KERNELS_WITH_CUDA
  return cuda::make_cuda_kernels(device, bf16);
#else
  STRATA_THROW(ErrorCode::kUnsupported,
               "the GPT example has no kernels for {}: this build has no CUDA (configure with -DSTRATA_CUDA=ON)",
               device.name());
#endif
}

}  // namespace strata
