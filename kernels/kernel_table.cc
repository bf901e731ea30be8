// make_gpt_kernels and the CPU GptKernels: cpu_ops.h, std::memset and flat_ops.h's host loops, as GptModel called
// them before the seam, so that CPU results stay bitwise what they were.
#include "models/gpt/model/kernel_table.h"

#include <array>
#include <cstring>
#include <vector>

#include "models/gpt/model/cpu_ops.h"
#include "models/gpt/model/cpu_tp_ops.h"
#include "core/error.h"
#include "runtime/sharding/flat_ops.h"

// The one #if of models/gpt: whether strata_gpt_cuda is linked in (models/gpt/CMakeLists.txt).
#if STRATA_GPT_WITH_CUDA
#include "models/gpt/model/cuda/cuda_kernel_table.h"
#endif

namespace strata::gpt {
namespace {

// Host memory, work inline on the calling thread (the CPU compute stream). With bf16 products, the matmuls convert
// their operands themselves (blas_bf16.cc) and attention's q, k, v and dout are rounded into scratch vectors that
// grow to the largest operand seen (host memory outside the ledger, like attention's tiles and the matmuls' bf16
// copies).
class CpuGptKernels final : public GptKernels {
 public:
  explicit CpuGptKernels(bool bf16) : bf16_(bf16) {}

  void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                       int C) override {
    gpt::encoder_forward(out, tokens, wte, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                        int C) override {
    gpt::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    gpt::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    gpt::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) override {
    gpt::matmul_forward(out, inp, weight, bias, N, IC, OC, bf16_);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override {
    gpt::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, bf16_);
  }
  void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V) override {
    gpt::lm_head_forward(logits, inp, wte, N, C, V, bf16_);
  }
  void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N,
                        int C, int V) override {
    gpt::lm_head_backward(dinp, dwte, dlogits, inp, wte, N, C, V, bf16_);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) override {
    if (bf16_) qkv = rounded(0, qkv, std::size_t(B) * T * 3 * C);
    gpt::attention_forward(out, lse, qkv, B, T, C, NH, bf16_);
  }
  void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                          int T, int C, int NH) override {
    if (bf16_) {
      qkv = rounded(0, qkv, std::size_t(B) * T * 3 * C);
      dout = rounded(1, dout, std::size_t(B) * T * C);
    }
    gpt::attention_backward(dqkv, dout, out, lse, qkv, B, T, C, NH, bf16_);
  }
  // bf16 compute: the block's q, k, v (and dout) rounded into scratch first, as attention_* round qkv.
  void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k,
                               Rows v) override {
    if (bf16_) {
      q = rounded_rows(0, q, blk.batch, blk.q_rows, blk.width);
      k = rounded_rows(1, k, blk.batch, blk.kv_rows, blk.width);
      v = rounded_rows(2, v, blk.batch, blk.kv_rows, blk.width);
    }
    gpt::attention_block_forward(blk, out, lse, q, k, v, bf16_);
  }
  void attention_block_backward(const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Rows dout,
                                RowStats lse, RowStats di, Rows q, Rows k, Rows v) override {
    if (bf16_) {
      q = rounded_rows(0, q, blk.batch, blk.q_rows, blk.width);
      k = rounded_rows(1, k, blk.batch, blk.kv_rows, blk.width);
      v = rounded_rows(2, v, blk.batch, blk.kv_rows, blk.width);
      dout = rounded_rows(3, dout, blk.batch, blk.q_rows, blk.width);
    }
    gpt::attention_block_backward(blk, dq, dk, dv, dout, lse, di, q, k, v, bf16_);
  }
  void attention_merge(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows out_b, RowStats lse_b) override {
    gpt::attention_merge(blk, out, lse, out_b, lse_b);
  }
  void attention_row_dot(const AttentionBlock& blk, RowStatsOut di, Rows dout, Rows out) override {
    gpt::attention_row_dot(blk, di, dout, out);
  }
  void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add) override {
    gpt::copy_rows(dst, src, batch, rows, columns, add);
  }
  void gelu_forward(float* out, const float* inp, std::size_t n) override { gpt::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) override {
    gpt::gelu_backward(dinp, inp, dout, n);
  }
  void residual_forward(float* out, const float* a, const float* b, std::size_t n) override {
    gpt::residual_forward(out, a, b, n);
  }
  void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const std::int32_t* targets, int N,
                            int V, float dscale) override {
    gpt::crossentropy_softmax(losses, dlogits, logits, targets, N, V, dscale);
  }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int v_begin, int v_count, int N,
                         int C) override {
    gpt::embedding_forward(out, tokens, wte, v_begin, v_count, N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, int v_begin, int v_count, int N,
                          int C) override {
    gpt::embedding_backward(dwte, dout, tokens, v_begin, v_count, N, C);
  }
  void position_forward(float* out, const float* wpe, int B, int T, int t0, int C) override {
    gpt::position_forward(out, wpe, B, T, t0, C);
  }
  void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C) override {
    gpt::position_backward(dwpe, dout, B, T, t0, C);
  }
  void add_bias(float* out, const float* bias, int N, int C) override { gpt::add_bias(out, bias, N, C); }
  void vocab_max(float* row_max, const float* logits, int N, int V, int valid) override {
    gpt::vocab_max(row_max, logits, N, V, valid);
  }
  void vocab_sumexp(float* stats, const float* logits, const float* row_max, const std::int32_t* targets, int v_begin,
                    int N, int V, int valid) override {
    gpt::vocab_sumexp(stats, logits, row_max, targets, v_begin, N, V, valid);
  }
  void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max, const float* stats,
                          const std::int32_t* targets, int v_begin, int N, int V, int valid, float dscale) override {
    gpt::vocab_crossentropy(losses, dlogits, logits, row_max, stats, targets, v_begin, N, V, valid, dscale);
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
        gpt::round_to_bf16(dst.data() + b * per_batch + i * width, src.data + b * src.batch_stride + i * src.row_stride,
                           width);
    return Rows{dst.data(), width, per_batch};
  }
  // src rounded to bf16 in scratch slot `slot` (each call of a kernel uses distinct slots).
  const float* rounded(int slot, const float* src, std::size_t n) {
    std::vector<float>& dst = scratch_[slot];
    if (dst.size() < n) dst.resize(n);
    gpt::round_to_bf16(dst.data(), src, n);
    return dst.data();
  }

  bool bf16_;
  std::array<std::vector<float>, 4> scratch_;
};

}  // namespace

std::unique_ptr<GptKernels> make_gpt_kernels(Device& device, DType matmul_dtype) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, matmul_dtype == DType::kF32 || matmul_dtype == DType::kBF16,
                    "the GPT kernels compute in f32 or bf16, not {}", dtype_name(matmul_dtype));
  const bool bf16 = matmul_dtype == DType::kBF16;
  if (device.kind() == DeviceKind::kCpu) return std::make_unique<CpuGptKernels>(bf16);
#if STRATA_GPT_WITH_CUDA
  return cuda::make_cuda_gpt_kernels(device, bf16);
#else
  STRATA_THROW(ErrorCode::kUnsupported,
               "the GPT example has no kernels for {}: this build has no CUDA (configure with -DSTRATA_CUDA=ON)",
               device.name());
#endif
}

}  // namespace strata::gpt
