// LinearKernels' and VocabKernels' bf16 defaults (kUnsupported) and the host linear kernels through f32 ones.
#include "runtime/tensor/tp_kernels.h"

#include "core/error.h"

namespace strata {
namespace {

[[noreturn]] void no_bf16(const char* kernel) {
  STRATA_THROW(ErrorCode::kUnsupported,
               "{}: these linear kernels have no bf16 activations (implement LinearKernels::{} or run the layer in "
               "f32; the CPU kernel table and host kernels through host_matmul_*_bf16 have them)",
               kernel, kernel);
}

[[noreturn]] void no_vocab_bf16(const char* kernel) {
  STRATA_THROW(ErrorCode::kUnsupported,
               "{}: these vocabulary kernels have no bf16 activations (implement VocabKernels::{} or run the "
               "embedding and the loss in f32; the CPU kernel table has them)",
               kernel, kernel);
}

void widen(float* out, const Bf16* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = in[i].value();
}

void round_into(Bf16* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = Bf16::from(in[i]);
}

std::size_t elements(int rows, int width) { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(width); }

}  // namespace

void LinearKernels::matmul_forward_bf16(Bf16*, const Bf16*, const float*, const float*, int, int, int) {
  no_bf16("matmul_forward_bf16");
}

void LinearKernels::matmul_backward_bf16(Bf16*, float*, float*, const Bf16*, const Bf16*, const float*, int, int, int) {
  no_bf16("matmul_backward_bf16");
}

void LinearKernels::add_bias_bf16(Bf16*, const float*, int, int) { no_bf16("add_bias_bf16"); }

void VocabKernels::embedding_forward_bf16(Bf16*, const std::int32_t*, const float*, int, int, int, int) {
  no_vocab_bf16("embedding_forward_bf16");
}
void VocabKernels::embedding_backward_bf16(float*, const Bf16*, const std::int32_t*, int, int, int, int) {
  no_vocab_bf16("embedding_backward_bf16");
}
void VocabKernels::vocab_max_bf16(float*, const Bf16*, int, int, int) { no_vocab_bf16("vocab_max_bf16"); }
void VocabKernels::vocab_sumexp_bf16(float*, const Bf16*, const float*, const std::int32_t*, int, int, int, int) {
  no_vocab_bf16("vocab_sumexp_bf16");
}
void VocabKernels::vocab_crossentropy_bf16(float*, Bf16*, const Bf16*, const float*, const float*, const std::int32_t*,
                                           int, int, int, int, float) {
  no_vocab_bf16("vocab_crossentropy_bf16");
}

void host_matmul_forward_bf16(LinearKernels& f32, std::vector<float>& scratch, Bf16* out, const Bf16* inp,
                              const float* weight, const float* bias, int N, int IC, int OC) {
  const std::size_t in = elements(N, IC), o = elements(N, OC);
  if (scratch.size() < in + o) scratch.resize(in + o);
  widen(scratch.data(), inp, in);
  f32.matmul_forward(scratch.data() + in, scratch.data(), weight, bias, N, IC, OC);
  round_into(out, scratch.data() + in, o);
}

void host_matmul_backward_bf16(LinearKernels& f32, std::vector<float>& scratch, Bf16* dinp, float* dweight,
                               float* dbias, const Bf16* dout, const Bf16* inp, const float* weight, int N, int IC,
                               int OC) {
  const std::size_t in = elements(N, IC), o = elements(N, OC);
  if (scratch.size() < 2 * in + o) scratch.resize(2 * in + o);
  float* inp32 = scratch.data();
  float* dout32 = inp32 + in;
  float* dinp32 = dout32 + o;
  widen(inp32, inp, in);
  widen(dout32, dout, o);
  if (dinp) widen(dinp32, dinp, in);
  f32.matmul_backward(dinp ? dinp32 : nullptr, dweight, dbias, dout32, inp32, weight, N, IC, OC);
  if (dinp) round_into(dinp, dinp32, in);
}

void host_add_bias_bf16(Bf16* out, const float* bias, int N, int C) {
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) {
      Bf16& v = out[elements(r, C) + static_cast<std::size_t>(c)];
      v = Bf16::from(v.value() + bias[c]);
    }
}

}  // namespace strata
