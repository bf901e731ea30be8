// detail::gemm_bf16: the bf16 products of --compute-dtype bf16 on the CPU. The operands are converted to bf16 (to
// nearest even) in the calling thread's scratch, transposed there when the product asks for it, and multiplied by
// oneDNN's matmul primitive into the f32 C (a sum post-op when beta is 1). Where this CPU has no bf16 matmul (oneDNN
// 2.6 needs AVX-512; AMX and AVX512_BF16 make it fast), the operands are rounded into f32 scratch and go through
// dnnl_sgemm: a product of two bf16 values is exact in f32, so both paths compute the same sums, in other orders.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu::detail {
namespace {

// STRATA_CHECK_DNNL(call): throws strata::Error naming the oneDNN call and its status.
#define STRATA_CHECK_DNNL(call)                                                          \
  do {                                                                                   \
    const dnnl_status_t strata_dnnl_rc_ = (call);                                        \
    STRATA_CHECK(strata_dnnl_rc_ == dnnl_success, "{} returned oneDNN status {}", #call, \
                 static_cast<int>(strata_dnnl_rc_));                                     \
  } while (0)

constexpr std::size_t kMinParallel = 1 << 14;

// The engine and stream of this process's CPU, and whether bf16 matmul is implemented here (decided once, by
// asking for a small primitive), with the implementation's name.
struct Engine {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  bool bf16 = false;
  std::string name;
};

dnnl_memory_desc_t plain_md(dnnl_dim_t rows, dnnl_dim_t cols, dnnl_dim_t ld, dnnl_data_type_t type) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols}, strides = {ld, 1};
  STRATA_CHECK_DNNL(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides));
  return md;
}

// The layouts of C[M,N] (+)= A[M,K] B[K,N]: bf16 A and B row-major and dense, f32 C with row stride ldc.
struct Layouts {
  dnnl_memory_desc_t a, b, c;
  Layouts(dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, dnnl_dim_t ldc)
      : a(plain_md(M, K, K, dnnl_bf16)), b(plain_md(K, N, N, dnnl_bf16)), c(plain_md(M, N, ldc, dnnl_f32)) {}
};

// The matmul primitive for `l`; nullptr (and no throw) when oneDNN does not implement it on this CPU.
dnnl_primitive_t make_matmul(dnnl_engine_t engine, const Layouts& l, bool accumulate, std::string* impl) {
  dnnl_matmul_desc_t desc;
  STRATA_CHECK_DNNL(dnnl_matmul_desc_init(&desc, &l.a, &l.b, nullptr, &l.c));
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t ops = nullptr;
  STRATA_CHECK_DNNL(dnnl_primitive_attr_create(&attr));
  if (accumulate) {
    STRATA_CHECK_DNNL(dnnl_post_ops_create(&ops));
    STRATA_CHECK_DNNL(dnnl_post_ops_append_sum(ops, 1.0f));
    STRATA_CHECK_DNNL(dnnl_primitive_attr_set_post_ops(attr, ops));
  }
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t rc = dnnl_primitive_desc_create(&pd, &desc, attr, engine, nullptr);
  if (ops != nullptr) dnnl_post_ops_destroy(ops);
  dnnl_primitive_attr_destroy(attr);
  if (rc == dnnl_unimplemented) return nullptr;
  STRATA_CHECK(rc == dnnl_success, "oneDNN bf16 matmul: primitive descriptor status {}", static_cast<int>(rc));
  if (impl != nullptr) {
    const char* s = nullptr;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) == dnnl_success && s != nullptr) *impl = s;
  }
  dnnl_primitive_t prim = nullptr;
  const dnnl_status_t made = dnnl_primitive_create(&prim, pd);
  dnnl_primitive_desc_destroy(pd);
  STRATA_CHECK(made == dnnl_success, "oneDNN bf16 matmul: primitive status {}", static_cast<int>(made));
  return prim;
}

Engine& engine() {
  static Engine e = [] {
    Engine x;
    STRATA_CHECK_DNNL(dnnl_engine_create(&x.engine, dnnl_cpu, 0));
    STRATA_CHECK_DNNL(dnnl_stream_create(&x.stream, x.engine, dnnl_stream_default_flags));
    std::string impl;
    if (dnnl_primitive_t probe = make_matmul(x.engine, Layouts(64, 64, 64, 64), false, &impl)) {
      dnnl_primitive_destroy(probe);
      x.bf16 = true;
      x.name = "oneDNN bf16 matmul (" + impl + ")";
    } else {
      x.name = "bf16-rounded operands through dnnl_sgemm (no bf16 matmul on this CPU)";
    }
    return x;
  }();
  return e;
}

// Scratch of the calling thread (kernels are called from one thread at a time per rank, but tests call them from
// several): grows to the largest operand and stays.
std::vector<std::uint16_t>& scratch16(int which) {
  thread_local std::vector<std::uint16_t> s[2];
  return s[which];
}
std::vector<float>& scratch32(int which) {
  thread_local std::vector<float> s[2];
  return s[which];
}

// dst[r * cols + c] = op(src)(r, c) for a [rows, cols] operand: src(r, c) = src[r * ld + c], or src[c * ld + r]
// when transposed (src stored [cols, rows]). T is uint16_t (bf16 bits) or float (bf16 values).
template <typename T>
void pack(T* dst, const float* src, std::size_t ld, bool transposed, int rows, int cols) {
#pragma omp parallel for schedule(static) if (static_cast<std::size_t>(rows) * cols >= kMinParallel)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float x = transposed ? src[static_cast<std::size_t>(c) * ld + r] : src[static_cast<std::size_t>(r) * ld + c];
      if constexpr (sizeof(T) == 2)
        dst[static_cast<std::size_t>(r) * cols + c] = f32_to_bf16(x);
      else
        dst[static_cast<std::size_t>(r) * cols + c] = round_bf16(x);
    }
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc) {
  if (M == 0 || N == 0 || K == 0) return sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  STRATA_CHECK(beta == 0.0f || beta == 1.0f, "gemm_bf16: beta {} must be 0 or 1", beta);
  clamp_to_thread_limit();
  Engine& e = engine();
  const std::size_t a_n = static_cast<std::size_t>(M) * K, b_n = static_cast<std::size_t>(K) * N;
  if (!e.bf16) {
    std::vector<float>& a = scratch32(0);
    std::vector<float>& b = scratch32(1);
    if (a.size() < a_n) a.resize(a_n);
    if (b.size() < b_n) b.resize(b_n);
    pack(a.data(), A, lda, trans_a, M, K);
    pack(b.data(), B, ldb, trans_b, K, N);
    return sgemm(false, false, M, N, K, a.data(), K, b.data(), N, beta, C, ldc);
  }
  std::vector<std::uint16_t>& a = scratch16(0);
  std::vector<std::uint16_t>& b = scratch16(1);
  if (a.size() < a_n) a.resize(a_n);
  if (b.size() < b_n) b.resize(b_n);
  pack(a.data(), A, lda, trans_a, M, K);
  pack(b.data(), B, ldb, trans_b, K, N);
  // oneDNN's primitive cache makes the repeated shapes of a training step cheap to ask for again.
  const Layouts l(M, N, K, ldc);
  dnnl_primitive_t prim = make_matmul(e.engine, l, beta == 1.0f, nullptr);
  STRATA_CHECK(prim != nullptr, "oneDNN bf16 matmul M={} N={} K={} is not implemented on this CPU", M, N, K);
  dnnl_memory_t am = nullptr, bm = nullptr, cm = nullptr;
  dnnl_status_t rc = dnnl_memory_create(&am, &l.a, e.engine, a.data());
  if (rc == dnnl_success) rc = dnnl_memory_create(&bm, &l.b, e.engine, b.data());
  if (rc == dnnl_success) rc = dnnl_memory_create(&cm, &l.c, e.engine, C);
  if (rc == dnnl_success) {
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    rc = dnnl_primitive_execute(prim, e.stream, 3, args);
    if (rc == dnnl_success) rc = dnnl_stream_wait(e.stream);
  }
  for (dnnl_memory_t m : {am, bm, cm})
    if (m != nullptr) dnnl_memory_destroy(m);
  dnnl_primitive_destroy(prim);
  STRATA_CHECK(rc == dnnl_success, "oneDNN bf16 matmul M={} N={} K={} lda={} ldb={} ldc={}: status {}", M, N, K, lda,
               ldb, ldc, static_cast<int>(rc));
}

const char* bf16_gemm_name() { return engine().name.c_str(); }

}  // namespace strata::cpu::detail
