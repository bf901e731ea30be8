// allowed_threads and clamp_to_thread_limit: OpenMP thread counts kept within OMP_THREAD_LIMIT.
#include "models/gpt/model/thread_limit.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "core/logging.h"

namespace strata::gpt {

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

}  // namespace strata::gpt
