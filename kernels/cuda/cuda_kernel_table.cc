// CudaKernels: Kernels on a CUDA device. The kernels of kernels/cuda/ops.h, cudaMemsetAsync through the Device,
// the runtime's FlatOps for dtype conversion, token uploads from page-locked staging, and the loss sum copied back
// behind an event: all of it on the device's compute stream, none of it touching device memory from the host.
#include "kernels/cuda/cuda_kernel_table.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <exception>

#include "kernels/cuda/ops.h"
#include "core/cuda_check.h"
#include "core/device_registry.h"
#include "core/error.h"
#include "core/logging.h"
#include "runtime/sharding/flat_ops.h"

namespace strata::cuda {
namespace {

// The compute stream's cudaStream_t, with `device` made current on this thread (the Blas binds to the current
// device, and the kernels launch on it).
cudaStream_t activate(Device& device) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, device.kind() == DeviceKind::kCuda,
                    "the CUDA GPT kernels were asked for on {}, which is not a CUDA device", device.name());
  void* handle = device.compute_stream().native_handle();
  STRATA_CHECK(handle != nullptr, "the compute stream of {} has no cudaStream_t", device.name());
  STRATA_CHECK_CUDA(cudaSetDevice(device.index()));
  return static_cast<cudaStream_t>(handle);
}

class CudaKernels final : public Kernels {
 public:
  CudaKernels(Device& device, bool bf16)
      : device_(device),
        bf16_(bf16),
        s_(activate(device)),
        stream_(device.compute_stream()),
        blas_(s_),
        ops_(create_flat_ops(device)),
        host_(create_host_device(device)),
        losses_copied_(device.create_event()),
        workspace_free_(device.create_event()) {
    for (Staging& slot : tokens_) slot.copied = device.create_event();
  }

  // The staging buffers and the Blas must outlive the work that uses them: wait for it (bounded) before they go.
  ~CudaKernels() override {
    try {
      stream_.record(*losses_copied_);
      losses_copied_->synchronize();
    } catch (const std::exception& e) {
      try {
        logger("gpt").error("kernels on {}: waiting for the compute stream before teardown failed: {}",
                            device_.name(), e.what());
      } catch (...) {  // logging must not turn a failed wait into std::terminate
      }
    }
  }

  void encoder_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                       int C) override {
    cuda::encoder_forward(out, tokens, wte, wpe, B, T, C, s_);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int B, int T,
                        int C) override {
    cuda::encoder_backward(dwte, dwpe, dout, tokens, B, T, C, s_);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, s_);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, s_);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) override {
    if (!bf16_) return cuda::matmul_forward(out, inp, weight, bias, N, IC, OC, blas_);
    cuda::matmul_forward_bf16_operands(out, as_bf16(0, inp, std::size_t(N) * IC),
                                       as_bf16(1, weight, std::size_t(IC) * OC), bias, N, IC, OC, blas_);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override {
    if (!bf16_) return cuda::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, blas_);
    if (dbias != nullptr) cuda::bias_backward(dbias, dout, N, OC, blas_);
    cuda::matmul_backward_bf16_operands(dinp, dweight, as_bf16(0, dout, std::size_t(N) * OC),
                                        as_bf16(1, inp, std::size_t(N) * IC),
                                        as_bf16(2, weight, std::size_t(IC) * OC), N, IC, OC, blas_);
  }
  void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V) override {
    if (!bf16_) return cuda::lm_head_forward(logits, inp, wte, N, C, V, blas_);
    cuda::lm_head_forward_bf16_operands(logits, as_bf16(0, inp, std::size_t(N) * C),
                                        as_bf16(1, wte, std::size_t(V) * C), N, C, V, blas_);
  }
  void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N,
                        int C, int V) override {
    if (!bf16_) return cuda::lm_head_backward(dinp, dwte, dlogits, inp, wte, N, C, V, blas_);
    cuda::lm_head_backward_bf16_operands(dinp, dwte, as_bf16(0, dlogits, std::size_t(N) * V),
                                         as_bf16(1, inp, std::size_t(N) * C), as_bf16(2, wte, std::size_t(V) * C), N,
                                         C, V, blas_);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH) override {
    if (bf16_) qkv = rounded(0, qkv, std::size_t(B) * T * qkv_row(C, NH, KVH));
    cuda::attention_forward(out, lse, qkv, B, T, C, NH, KVH, s_, bf16_);
  }
  void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                          int T, int C, int NH, int KVH) override {
    if (bf16_) {
      qkv = rounded(0, qkv, std::size_t(B) * T * qkv_row(C, NH, KVH));
      dout = rounded(1, dout, std::size_t(B) * T * C);
    }
    cuda::attention_backward(dqkv, dout, out, lse, qkv, B, T, C, NH, KVH, s_, bf16_);
  }
  // The forward block and row copies (the decode path's attention over its KV cache), f32; ring attention
  // (context parallelism) also needs the merge and the backward, which run on the CPU backend only.
  void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k,
                               Rows v) override {
    STRATA_CHECK_CODE(ErrorCode::kUnsupported, !bf16_,
                      "the CUDA attention block is f32 only (bf16 products are not built for it)");
    cuda::attention_block_forward(blk, out, lse, q, k, v, s_);
  }
  void attention_block_backward(const AttentionBlock&, RowsOut, RowsOut, RowsOut, Rows, RowStats, RowStats, Rows, Rows,
                                Rows) override {
    no_ring();
  }
  void attention_merge(const AttentionBlock&, RowsOut, RowStatsOut, Rows, RowStats) override { no_ring(); }
  void attention_row_dot(const AttentionBlock&, RowStatsOut, Rows, Rows) override { no_ring(); }
  void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add) override {
    cuda::copy_rows(dst, src, batch, rows, columns, add, s_);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override {
    cuda::rmsnorm_forward(out, rstd, inp, weight, N, C, eps, s_);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int N, int C) override {
    cuda::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, s_);
  }
  void rope_forward(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                    std::size_t row_stride, std::size_t batch_stride) override {
    cuda::rope_forward(x, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride, s_);
  }
  void rope_backward(float* dx, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                     std::size_t row_stride, std::size_t batch_stride) override {
    cuda::rope_backward(dx, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride, s_);
  }
  void swiglu_forward(float* out, const float* gu, int N, int F) override { cuda::swiglu_forward(out, gu, N, F, s_); }
  void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F) override {
    cuda::swiglu_backward(dgu, dout, gu, N, F, s_);
  }
  void gelu_forward(float* out, const float* inp, std::size_t n) override { cuda::gelu_forward(out, inp, n, s_); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) override {
    cuda::gelu_backward(dinp, inp, dout, n, s_);
  }
  void residual_forward(float* out, const float* a, const float* b, std::size_t n) override {
    cuda::residual_forward(out, a, b, n, s_);
  }
  void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const std::int32_t* targets, int N,
                            int V, float dscale) override {
    cuda::crossentropy_softmax(losses, dlogits, logits, targets, N, V, dscale, s_);
  }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int v_begin, int v_count, int N,
                         int C) override {
    cuda::embedding_forward(out, tokens, wte, v_begin, v_count, N, C, s_);
  }
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, int v_begin, int v_count, int N,
                          int C) override {
    cuda::embedding_backward(dwte, dout, tokens, v_begin, v_count, N, C, s_);
  }
  void position_forward(float* out, const float* wpe, int B, int T, int t0, int C) override {
    cuda::position_forward(out, wpe, B, T, t0, C, s_);
  }
  void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C) override {
    cuda::position_backward(dwpe, dout, B, T, t0, C, s_);
  }
  void add_bias(float* out, const float* bias, int N, int C) override { cuda::add_bias(out, bias, N, C, s_); }
  void vocab_max(float* row_max, const float* logits, int N, int V, int valid) override {
    cuda::vocab_max(row_max, logits, N, V, valid, s_);
  }
  void vocab_sumexp(float* stats, const float* logits, const float* row_max, const std::int32_t* targets, int v_begin,
                    int N, int V, int valid) override {
    cuda::vocab_sumexp(stats, logits, row_max, targets, v_begin, N, V, valid, s_);
  }
  void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max,
                          const float* stats, const std::int32_t* targets, int v_begin, int N, int V, int valid,
                          float dscale) override {
    cuda::vocab_crossentropy(losses, dlogits, logits, row_max, stats, targets, v_begin, N, V, valid, dscale, s_);
  }

  void zero(void* p, std::size_t bytes) override { device_.fill_zero(p, bytes, stream_); }
  void to_f32(const void* src, DType dtype, float* dst, std::size_t n) override {
    ops_->convert(src, dtype, dst, DType::kF32, n, stream_);
  }
  void add_f32_into(void* dst, DType dtype, const float* src, std::size_t n) override {
    ops_->add_f32_into(dst, dtype, src, n, stream_);
  }

  // The tokens go through a page-locked slot, so the copy is truly asynchronous (from pageable memory the driver
  // would first wait, without a bound, for the stream). A slot is reused only after its last copy has finished.
  void upload_tokens(std::int32_t* device_dst, const std::int32_t* host_src, std::size_t n) override {
    if (n == 0) return;
    const std::size_t bytes = n * sizeof(std::int32_t);
    Staging& slot = tokens_[next_slot_];
    next_slot_ = (next_slot_ + 1) % tokens_.size();
    if (slot.pending) {
      slot.copied->synchronize();
      slot.pending = false;
    }
    if (slot.host.bytes() < bytes) slot.host = host_->allocate(bytes, MemCategory::kWorkspace);
    std::memcpy(slot.host.data(), host_src, bytes);
    device_.copy(device_dst, slot.host.data(), bytes, stream_);
    stream_.record(*slot.copied);
    slot.pending = true;
  }

  double sum(const float* device_values, std::size_t n) override {
    if (n == 0) return 0;
    const std::size_t bytes = n * sizeof(float);
    if (losses_host_.bytes() < bytes) losses_host_ = host_->allocate(bytes, MemCategory::kWorkspace);
    device_.copy(losses_host_.data(), device_values, bytes, stream_);
    stream_.record(*losses_copied_);
    losses_copied_->synchronize();  // bounded by the device timeout; reports a failed kernel of this stream
    const float* v = losses_host_.as<float>();
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += v[i];
    return s;
  }

 private:
  [[noreturn]] static void no_ring() {
    STRATA_THROW(ErrorCode::kUnsupported,
                 "ring attention (context parallelism) runs on the CPU backend only: its CUDA merge and backward are "
                 "not built yet (use --backend cpu)");
  }
  // Floats per qkv row, [q: C | k: KVH D | v: KVH D] (D = C / NH): the size of the rounded copy, so the shapes are
  // checked before it reads qkv (the kernels check them again).
  static std::size_t qkv_row(int C, int NH, int KVH) {
    STRATA_CHECK(C > 0 && NH > 0 && C % NH == 0 && KVH > 0 && NH % KVH == 0,
                 "attention of C = {} over NH = {} query heads and KVH = {} key / value heads (NH must divide C and "
                 "KVH divide NH)",
                 C, NH, KVH);
    return static_cast<std::size_t>(C) + 2 * static_cast<std::size_t>(KVH) * static_cast<std::size_t>(C / NH);
  }
  // src converted to bf16 (to nearest even) in workspace slot `slot`; a kernel uses distinct slots per operand.
  const __nv_bfloat16* as_bf16(int slot, const float* src, std::size_t n) {
    Buffer& dst = workspace(bf16_ws_[slot], n * sizeof(__nv_bfloat16));
    ops_->convert(src, DType::kF32, dst.data(), DType::kBF16, n, stream_);
    return dst.as<__nv_bfloat16>();
  }
  // src rounded to bf16 and widened back to f32 in f32 workspace slot `slot` (attention's operands).
  const float* rounded(int slot, const float* src, std::size_t n) {
    const __nv_bfloat16* half = as_bf16(slot, src, n);
    Buffer& dst = workspace(f32_ws_[slot], n * sizeof(float));
    ops_->convert(half, DType::kBF16, dst.data(), DType::kF32, n, stream_);
    return dst.as<float>();
  }
  // `buffer` with room for `bytes`: grown (in the ledger's workspace) after the work queued so far that may still
  // read the old one has finished. Shapes repeat from step to step, so this happens in the first step only.
  Buffer& workspace(Buffer& buffer, std::size_t bytes) {
    if (buffer.bytes() >= bytes) return buffer;
    if (buffer) {
      stream_.record(*workspace_free_);
      workspace_free_->synchronize();  // bounded by the device timeout
    }
    buffer = Buffer();
    buffer = device_.allocate(bytes, MemCategory::kWorkspace);
    return buffer;
  }

  struct Staging {
    Buffer host;  // page-locked, on host_
    std::unique_ptr<Event> copied;
    bool pending = false;
  };

  Device& device_;
  bool bf16_;  // bf16 products (make_kernels in kernel_table.h)
  cudaStream_t s_;
  Stream& stream_;
  Blas blas_;
  std::unique_ptr<FlatOps> ops_;
  std::unique_ptr<Device> host_;  // page-locked host memory beside device_, on its own ledger
  std::unique_ptr<Event> losses_copied_;
  std::unique_ptr<Event> workspace_free_;
  std::array<Buffer, 3> bf16_ws_;  // bf16 operands of the products
  std::array<Buffer, 2> f32_ws_;   // attention's operands, rounded to bf16 and held as f32
  Buffer losses_host_;
  std::array<Staging, 2> tokens_;  // a forward uploads inputs and targets
  std::size_t next_slot_ = 0;
};

}  // namespace

std::unique_ptr<Kernels> make_cuda_kernels(Device& device, bool bf16_products) {
  return std::make_unique<CudaKernels>(device, bf16_products);
}

}  // namespace strata::cuda
