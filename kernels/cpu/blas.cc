// detail::sgemm on oneDNN's dnnl_sgemm (Debian's libdnnl-dev): the fastest Debian BLAS on the GPT shapes on the
// Zen 3 development machine, OpenMP-threaded like the kernels. Measurements: docs/notes/cpu-blas.md.
#include "kernels/cpu/blas.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstddef>
#include <string>

#include "core/error.h"
#include "kernels/cpu/threads.h"

namespace strata::cpu::detail {
namespace {

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum, which dnnl_sgemm rejects as an invalid argument: C = beta * C
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        C[static_cast<std::size_t>(i) * ldc + j] =
            beta == 0.0f ? 0.0f : beta * C[static_cast<std::size_t>(i) * ldc + j];
    return;
  }
  // dnnl_sgemm plans for omp_get_max_threads() threads: keep that within OMP_THREAD_LIMIT (thread_limit.h).
  clamp_to_thread_limit();
  // dnnl_sgemm is row-major (unlike Fortran BLAS) and picks its JIT kernels for the CPU at run time.
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  STRATA_CHECK(status == dnnl_success, "dnnl_sgemm({}, {}, M={}, N={}, K={}, lda={}, ldb={}, ldc={}) returned {}",
               trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, lda, ldb, ldc, static_cast<int>(status));
}

// oneDNN's OpenMP build runs each call on omp_get_max_threads() threads, which set_num_threads has just set.
void blas_set_num_threads(int) {}

const char* blas_name() {
  static const std::string name = [] {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " dnnl_sgemm (" + isa_name(dnnl_get_effective_cpu_isa()) + ", openmp)";
  }();
  return name.c_str();
}

}  // namespace strata::cpu::detail
