// The CUDA kernels' API (kernels/cuda/ops.h) except the matmuls: argument checks, then the launchers of the .cu files.
#include "kernels/cuda/ops.h"

#include "kernels/cuda/launch.h"
#include "core/cuda_check.h"
#include "core/error.h"

namespace strata::cuda {
namespace {

void check_rows(int B, int T, int C) {
  STRATA_CHECK(B >= 0 && T >= 0 && C >= 0, "sizes must not be negative: B = {}, T = {}, C = {}", B, T, C);
}

// D = C / NH, KVH divides NH, and the attention kernels' shared memory for D fits the current device.
void check_attention(int B, int T, int C, int NH, int KVH) {
  check_rows(B, T, C);
  STRATA_CHECK(NH > 0 && C > 0 && C % NH == 0, "C = {} must be a positive multiple of NH = {}", C, NH);
  STRATA_CHECK(KVH > 0 && NH % KVH == 0, "KVH = {} key / value heads must divide NH = {} query heads", KVH, NH);
  int device = 0, limit = 0;
  STRATA_CHECK_CUDA(cudaGetDevice(&device));
  STRATA_CHECK_CUDA(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const std::size_t need = detail::attention_shared_bytes(C / NH);
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, need <= static_cast<std::size_t>(limit),
                    "attention with head size D = {} needs {} bytes of shared memory per block; cuda:{} allows {}",
                    C / NH, need, device, limit);
}

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream) {
  check_rows(B, T, C);
  STRATA_CHECK_CUDA(detail::launch_encoder_forward(out, tokens, wte, wpe, B, T, C, stream));
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                      cudaStream_t stream) {
  check_rows(B, T, C);
  STRATA_CHECK_CUDA(detail::launch_encoder_backward(dwte, dwpe, dout, tokens, B, T, C, stream));
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0, "N = {} must not be negative and C = {} must be positive", N, C);
  STRATA_CHECK_CUDA(detail::launch_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, stream));
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0, "N = {} must not be negative and C = {} must be positive", N, C);
  STRATA_CHECK_CUDA(
      detail::launch_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream));
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C >= 1, "rmsnorm of N = {} rows of C = {} channels (need N >= 0, C >= 1)", N, C);
  STRATA_CHECK(eps >= 0.0f, "rmsnorm eps {} must be >= 0", eps);
  STRATA_CHECK_CUDA(detail::launch_rmsnorm_forward(out, rstd, inp, weight, N, C, eps, stream));
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C >= 1, "rmsnorm of N = {} rows of C = {} channels (need N >= 0, C >= 1)", N, C);
  STRATA_CHECK_CUDA(detail::launch_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, stream));
}

namespace {

// kernels/cpu/rope.cc's checks: sizes, an even head, a position, and strides that keep rows apart.
void check_rope(int B, int T, int heads, int D, int pos0, std::size_t row_stride, std::size_t batch_stride) {
  STRATA_CHECK(B >= 0 && T >= 0 && heads >= 0, "rope of B = {}, T = {}, heads = {} (each must be >= 0)", B, T, heads);
  STRATA_CHECK(D >= 2 && D % 2 == 0, "rope head dimension D = {} must be even and >= 2", D);
  STRATA_CHECK(pos0 >= 0, "rope start position pos0 = {} must be >= 0", pos0);
  const std::size_t width = static_cast<std::size_t>(heads) * D;
  STRATA_CHECK(T <= 1 || row_stride >= width, "rope rows overlap: row_stride {} < heads * D = {}", row_stride, width);
  STRATA_CHECK(B <= 1 || batch_stride >= width, "rope rows overlap: batch_stride {} < heads * D = {}", batch_stride,
               width);
}

}  // namespace

void rope_forward(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                  std::size_t row_stride, std::size_t batch_stride, cudaStream_t stream) {
  check_rope(B, T, heads, D, pos0, row_stride, batch_stride);
  STRATA_CHECK_CUDA(
      detail::launch_rope(x, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride, /*inverse=*/false, stream));
}

void rope_backward(float* dx, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                   std::size_t row_stride, std::size_t batch_stride, cudaStream_t stream) {
  check_rope(B, T, heads, D, pos0, row_stride, batch_stride);
  STRATA_CHECK_CUDA(
      detail::launch_rope(dx, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride, /*inverse=*/true, stream));
}

void swiglu_forward(float* out, const float* gu, int N, int F, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && F >= 0, "swiglu of N = {} rows of F = {} features (each must be >= 0)", N, F);
  STRATA_CHECK_CUDA(detail::launch_swiglu_forward(out, gu, N, F, stream));
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && F >= 0, "swiglu of N = {} rows of F = {} features (each must be >= 0)", N, F);
  STRATA_CHECK_CUDA(detail::launch_swiglu_backward(dgu, dout, gu, N, F, stream));
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                       cudaStream_t stream, bool bf16_products) {
  check_attention(B, T, C, NH, KVH);
  STRATA_CHECK_CUDA(detail::launch_attention_forward(out, lse, qkv, B, T, C, NH, KVH, bf16_products, stream));
}

void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                        int T, int C, int NH, int KVH, cudaStream_t stream, bool bf16_products) {
  check_attention(B, T, C, NH, KVH);
  STRATA_CHECK_CUDA(
      detail::launch_attention_backward(dqkv, dout, out, lse, qkv, B, T, C, NH, KVH, bf16_products, stream));
}

void attention_block_forward(const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows k, Rows v,
                             cudaStream_t stream) {
  STRATA_CHECK(blk.batch >= 0 && blk.q_rows >= 0 && blk.kv_rows >= 0 && blk.heads > 0 && blk.width > 0 &&
                   blk.width % blk.heads == 0,
               "attention block: batch {}, {} query rows, {} key rows, width {} over {} heads", blk.batch, blk.q_rows,
               blk.kv_rows, blk.width, blk.heads);
  STRATA_CHECK(blk.kv_heads >= 0 && blk.heads % blk.kv_head_count() == 0,
               "attention block: kv_heads = {} must divide heads = {} (0: as many as heads)", blk.kv_heads, blk.heads);
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, blk.width / blk.heads <= 32 * detail::kMaxPerLane,
                    "attention block: a head of {} columns; the CUDA kernel takes at most {}", blk.width / blk.heads,
                    32 * detail::kMaxPerLane);
  detail::AttentionBlockArgs a;
  a.batch = blk.batch;
  a.heads = blk.heads;
  a.kv_heads = blk.kv_head_count();
  a.width = blk.width;
  a.q_rows = blk.q_rows;
  a.q_pos = blk.q_pos;
  a.kv_rows = blk.kv_rows;
  a.kv_pos = blk.kv_pos;
  a.out = out.data;
  a.out_rs = out.row_stride;
  a.out_bs = out.batch_stride;
  a.lse = lse.data;
  a.lse_hs = lse.head_stride;
  a.lse_bs = lse.batch_stride;
  a.q = q.data;
  a.q_rs = q.row_stride;
  a.q_bs = q.batch_stride;
  a.k = k.data;
  a.k_rs = k.row_stride;
  a.k_bs = k.batch_stride;
  a.v = v.data;
  a.v_rs = v.row_stride;
  a.v_bs = v.batch_stride;
  STRATA_CHECK_CUDA(detail::launch_attention_block_forward(a, stream));
}

void copy_rows(RowsOut dst, Rows src, int batch, int rows, int columns, bool add, cudaStream_t stream) {
  STRATA_CHECK(batch >= 0 && rows >= 0 && columns >= 0, "copy_rows: batch {}, {} rows, {} columns", batch, rows,
               columns);
  STRATA_CHECK_CUDA(detail::launch_copy_rows(dst.data, dst.row_stride, dst.batch_stride, src.data, src.row_stride,
                                             src.batch_stride, batch, rows, columns, add, stream));
}

void gelu_forward(float* out, const float* inp, std::size_t n, cudaStream_t stream) {
  STRATA_CHECK_CUDA(detail::launch_gelu_forward(out, inp, n, stream));
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n, cudaStream_t stream) {
  STRATA_CHECK_CUDA(detail::launch_gelu_backward(dinp, inp, dout, n, stream));
}

void residual_forward(float* out, const float* a, const float* b, std::size_t n, cudaStream_t stream) {
  STRATA_CHECK_CUDA(detail::launch_residual_forward(out, a, b, n, stream));
}

void crossentropy_softmax(float* losses, float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                          float dscale, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && V > 0, "N = {} must not be negative and V = {} must be positive", N, V);
  STRATA_CHECK_CUDA(detail::launch_crossentropy_softmax(losses, dlogits, logits, targets, N, V, dscale, stream));
}

// ---- tensor parallelism ---------------------------------------------------------------------------------------

namespace {

void check_vocab_rows(int v_begin, int v_count, int N, int C) {
  STRATA_CHECK(v_begin >= 0 && v_count >= 0 && N >= 0 && C >= 0,
               "sizes must not be negative: v_begin = {}, v_count = {}, N = {}, C = {}", v_begin, v_count, N, C);
}

void check_positions(int B, int T, int t0, int C) {
  check_rows(B, T, C);
  STRATA_CHECK(t0 >= 0, "the first position t0 = {} must not be negative", t0);
}

void check_vocab_columns(int v_begin, int N, int V, int valid) {
  STRATA_CHECK(v_begin >= 0 && N >= 0 && V >= 0, "sizes must not be negative: v_begin = {}, N = {}, V = {}", v_begin,
               N, V);
  STRATA_CHECK(valid >= 0 && valid <= V, "valid = {} must be in [0, V = {}]", valid, V);
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int v_begin, int v_count, int N, int C,
                       cudaStream_t stream) {
  check_vocab_rows(v_begin, v_count, N, C);
  STRATA_CHECK_CUDA(detail::launch_embedding_forward(out, tokens, wte, v_begin, v_count, N, C, stream));
}

void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int v_begin, int v_count, int N, int C,
                        cudaStream_t stream) {
  check_vocab_rows(v_begin, v_count, N, C);
  STRATA_CHECK_CUDA(detail::launch_embedding_backward(dwte, dout, tokens, v_begin, v_count, N, C, stream));
}

void position_forward(float* out, const float* wpe, int B, int T, int t0, int C, cudaStream_t stream) {
  check_positions(B, T, t0, C);
  STRATA_CHECK_CUDA(detail::launch_position_forward(out, wpe, B, T, t0, C, stream));
}

void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C, cudaStream_t stream) {
  check_positions(B, T, t0, C);
  STRATA_CHECK_CUDA(detail::launch_position_backward(dwpe, dout, B, T, t0, C, stream));
}

void add_bias(float* out, const float* bias, int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C >= 0, "sizes must not be negative: N = {}, C = {}", N, C);
  STRATA_CHECK_CUDA(detail::launch_add_bias(out, bias, N, C, stream));
}

void vocab_max(float* row_max, const float* logits, int N, int V, int valid, cudaStream_t stream) {
  check_vocab_columns(0, N, V, valid);
  STRATA_CHECK_CUDA(detail::launch_vocab_max(row_max, logits, N, V, valid, stream));
}

void vocab_sumexp(float* stats, const float* logits, const float* row_max, const int32_t* targets, int v_begin, int N,
                  int V, int valid, cudaStream_t stream) {
  check_vocab_columns(v_begin, N, V, valid);
  STRATA_CHECK_CUDA(detail::launch_vocab_sumexp(stats, logits, row_max, targets, v_begin, N, V, valid, stream));
}

void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max, const float* stats,
                        const int32_t* targets, int v_begin, int N, int V, int valid, float dscale,
                        cudaStream_t stream) {
  check_vocab_columns(v_begin, N, V, valid);
  STRATA_CHECK_CUDA(detail::launch_vocab_crossentropy(losses, dlogits, logits, row_max, stats, targets, v_begin, N, V,
                                                      valid, dscale, stream));
}

}  // namespace strata::cuda
