// detail::sgemm on BLIS (Debian's libblis-openmp-dev): the fastest Debian BLAS on the GPT shapes on Zen 3, with
// OpenMP threading shared with the kernels' own parallel regions. Measurements: docs/notes/cpu-blas.md.
#include "examples/gpt/blas.h"

#include <blis.h>
#include <omp.h>

#include <mutex>
#include <string>

namespace strata::gpt::detail {
namespace {

// BLIS runs single-threaded unless told otherwise (BLIS_NUM_THREADS, OMP_NUM_THREADS or a call): without a
// set_num_threads from the trainer the first sgemm adopts OpenMP's thread count, so no environment is needed.
std::once_flag g_threads_once;
bool g_threads_set = false;

void ensure_threads() {
  std::call_once(g_threads_once, [] {
    if (!g_threads_set) bli_thread_set_num_threads(omp_get_max_threads());
  });
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  ensure_threads();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
              A, lda, B, ldb, beta, C, ldc);
}

void blas_set_num_threads(int n) {
  g_threads_set = true;
  bli_thread_set_num_threads(n);
}

const char* blas_name() {
  static const std::string name =
      std::string("BLIS ") + bli_info_get_version_str() + " (" + bli_arch_string(bli_arch_query_id()) + ", openmp)";
  return name.c_str();
}

}  // namespace strata::gpt::detail
