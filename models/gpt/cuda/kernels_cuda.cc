// The CUDA kernels' API (kernels_cuda.h) except the matmuls: argument checks, then the launchers of the .cu files.
#include "models/gpt/cuda/kernels_cuda.h"

#include "models/gpt/cuda/launch.h"
#include "core/cuda_check.h"
#include "core/error.h"

namespace strata::gpt::cuda {
namespace {

void check_rows(int B, int T, int C) {
  STRATA_CHECK(B >= 0 && T >= 0 && C >= 0, "sizes must not be negative: B = {}, T = {}, C = {}", B, T, C);
}

// D = C / NH, and the attention kernels' shared memory for it fits the current device.
void check_attention(int B, int T, int C, int NH) {
  check_rows(B, T, C);
  STRATA_CHECK(NH > 0 && C > 0 && C % NH == 0, "C = {} must be a positive multiple of NH = {}", C, NH);
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

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  check_attention(B, T, C, NH);
  STRATA_CHECK_CUDA(detail::launch_attention_forward(out, lse, qkv, B, T, C, NH, stream));
}

void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                        int T, int C, int NH, cudaStream_t stream) {
  check_attention(B, T, C, NH);
  STRATA_CHECK_CUDA(detail::launch_attention_backward(dqkv, dout, out, lse, qkv, B, T, C, NH, stream));
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

}  // namespace strata::gpt::cuda
