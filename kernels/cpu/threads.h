// The threads of the CPU kernels: how many every kernel and the BLAS use, kept within OMP_THREAD_LIMIT.
#pragma once

namespace strata::cpu {

// Threads used by every kernel and by the BLAS (the trainer passes cores / ranks-per-node). n >= 1, lowered to
// allowed_threads(n).
void set_num_threads(int n);
int num_threads();

// min(requested, omp_get_thread_limit()), and at least 1. The first time it lowers a request it logs one warning
// naming OMP_THREAD_LIMIT and both numbers. Why it matters: libgomp's omp_get_max_threads() ignores the thread limit,
// and oneDNN's dnnl_sgemm splits its work for omp_get_max_threads() threads; when the parallel region then gets
// fewer, the missing threads' blocks of C are never written and the call still reports success.
int allowed_threads(int requested);

// Lowers this thread's OpenMP thread count (omp_set_num_threads) to allowed_threads(omp_get_max_threads()) when the
// limit is below it, so a library that sizes its work by omp_get_max_threads() (dnnl_sgemm) gets every thread it
// plans for. Cheap when nothing needs lowering; called before each sgemm.
void clamp_to_thread_limit();

}  // namespace strata::cpu
