// The CPU kernels' thread count, and OpenMP thread counts kept within OMP_THREAD_LIMIT.
#include "kernels/cpu/threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "core/logging.h"
#include "kernels/cpu/blas.h"

namespace strata::cpu {

int allowed_threads(int requested) {
  const int limit = std::max(1, omp_get_thread_limit());
  const int allowed = std::max(1, std::min(requested, limit));
  static std::atomic<bool> warned{false};
  if (allowed < requested && !warned.exchange(true))
    logger("gpt").warn("OMP_THREAD_LIMIT={} allows {} OpenMP thread(s): using {} instead of the {} asked for "
                       "(results are unchanged; only speed)",
                       limit, limit, allowed, requested);
  return allowed;
}

void clamp_to_thread_limit() {
  const int max = omp_get_max_threads();
  if (max > omp_get_thread_limit()) omp_set_num_threads(allowed_threads(max));
}

void set_num_threads(int n) {
  STRATA_CHECK(n >= 1, "thread count {} must be >= 1", n);
  n = allowed_threads(n);  // within OMP_THREAD_LIMIT, or dnnl_sgemm leaves blocks unwritten (above)
  omp_set_num_threads(n);
  detail::blas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace strata::cpu
