// bench_blas: times row-major sgemm from one BLAS library (loaded with dlopen) on the GPT-2 example's shapes.
// Built and driven by scripts/bench_blas.sh; results and the choice they led to are in docs/notes/cpu-blas.md.
//
// Usage: bench_blas LIB_PATH API THREADS [N] [C] [V] [REPS]
//   API: cblas (OpenBLAS, BLIS: cblas_sgemm) or dnnl (oneDNN: dnnl_sgemm) or naive (no library: an
//   llm.c-style OpenMP loop, the baseline without BLAS). Prints one fixed-column line per shape (GFLOP/s from
//   the median and from the fastest of REPS timed calls after 3 warm-up calls: on a shared machine the fastest
//   call is the one least disturbed) and a line for one whole training step of the 6-layer model (every matmul
//   of forward and backward, the lm head included: the sum of the per-shape times, weighted by count).
#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

enum Order { kRowMajor = 101 };
enum Trans { kNoTrans = 111, kTrans = 112 };
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
using DnnlSgemm = int (*)(char, char, long, long, long, float, const float*, long, const float*, long, float, float*,
                          long);

struct Lib {
  std::string api;
  CblasSgemm cblas = nullptr;
  DnnlSgemm dnnl = nullptr;
};

// C[M,N] = op(A) @ op(B) (beta = 0 or 1), row-major, op = transpose when the flag is set.
void naive_gemm(bool ta, bool tb, int M, int N, int K, const float* A, const float* B, float beta, float* C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < M; ++i)
    for (int j0 = 0; j0 < N; j0 += 64) {
      float acc[64] = {};
      int jn = std::min(64, N - j0);
      for (int k = 0; k < K; ++k) {
        float a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
        for (int j = 0; j < jn; ++j) acc[j] += a * (tb ? B[(size_t)(j0 + j) * K + k] : B[(size_t)k * N + j0 + j]);
      }
      for (int j = 0; j < jn; ++j) C[(size_t)i * N + j0 + j] = beta * C[(size_t)i * N + j0 + j] + acc[j];
    }
}

void gemm(const Lib& lib, bool ta, bool tb, int M, int N, int K, const float* A, const float* B, float beta, float* C) {
  int lda = ta ? M : K, ldb = tb ? K : N;
  if (lib.api == "cblas")
    lib.cblas(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
  else if (lib.api == "dnnl")
    lib.dnnl(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
  else
    naive_gemm(ta, tb, M, N, K, A, B, beta, C);
}

struct Shape {
  const char* name;
  bool ta, tb;
  int M, N, K;
  float beta;    // 1 for the weight-gradient products, which accumulate
  int per_step;  // how many times one training step of the 6-layer model runs this product
};

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s LIB_PATH cblas|dnnl|naive THREADS [N] [C] [V] [REPS]\n", argv[0]);
    return 2;
  }
  std::string path = argv[1];
  Lib lib;
  lib.api = argv[2];
  // Each number is a whole positive int (atoi would take "abc" as 0 and "1e9" as 1); sizes are at most 65536 (the
  // GPT's vocabulary bound), so 4 x C and every leading dimension fit the ints the sgemm calls take.
  auto arg = [&](int i, const char* name, int fallback, long max) {
    if (argc <= i) return fallback;
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || errno == ERANGE || value < 1 || value > max) {
      std::fprintf(stderr, "bench_blas: %s must be an integer from 1 to %ld, got %s\n", name, max, argv[i]);
      std::exit(2);
    }
    return static_cast<int>(value);
  };
  int threads = arg(3, "THREADS", 1, 4096);
  int n = arg(4, "N", 512, 1 << 16);
  int c = arg(5, "C", 384, 1 << 16);
  int v = arg(6, "V", 8192, 1 << 16);
  int reps = arg(7, "REPS", 15, 1 << 20);
  const int layers = 6;

  std::string core = "-";
  if (lib.api != "naive") {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "dlopen %s: %s\n", path.c_str(), dlerror());
      return 1;
    }
    lib.cblas = reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
    lib.dnnl = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
    if ((lib.api == "cblas" && !lib.cblas) || (lib.api == "dnnl" && !lib.dnnl)) {
      std::fprintf(stderr, "%s has no %s sgemm\n", path.c_str(), lib.api.c_str());
      return 1;
    }
    if (auto f = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))) f(threads);
    if (auto f = reinterpret_cast<void (*)(long)>(dlsym(h, "bli_thread_set_num_threads"))) f(threads);
    if (auto f = reinterpret_cast<const char* (*)()>(dlsym(h, "openblas_get_corename"))) core = f();
    auto arch_id = reinterpret_cast<int (*)()>(dlsym(h, "bli_arch_query_id"));
    auto arch_str = reinterpret_cast<const char* (*)(int)>(dlsym(h, "bli_arch_string"));
    if (arch_id && arch_str) core = arch_str(arch_id());
  }

  // The products of one training step: forward out = inp @ W (NN), backward dinp = dout @ W^T (NT) and
  // dW += inp^T @ dout (TN); lm head logits = x @ wte^T (NT), dx = dlogits @ wte (NN), dwte += dlogits^T @ x (TN).
  std::vector<Shape> shapes = {
      {"qkv_fwd", false, false, n, 3 * c, c, 0.f, layers},
      {"qkv_dinp", false, true, n, c, 3 * c, 0.f, layers},
      {"qkv_dw", true, false, c, 3 * c, n, 1.f, layers},
      {"attproj_fwd", false, false, n, c, c, 0.f, layers},
      {"attproj_dinp", false, true, n, c, c, 0.f, layers},
      {"attproj_dw", true, false, c, c, n, 1.f, layers},
      {"fc_fwd", false, false, n, 4 * c, c, 0.f, layers},
      {"fc_dinp", false, true, n, c, 4 * c, 0.f, layers},
      {"fc_dw", true, false, c, 4 * c, n, 1.f, layers},
      {"fcproj_fwd", false, false, n, c, 4 * c, 0.f, layers},
      {"fcproj_dinp", false, true, n, 4 * c, c, 0.f, layers},
      {"fcproj_dw", true, false, 4 * c, c, n, 1.f, layers},
      {"lm_fwd", false, true, n, v, c, 0.f, 1},
      {"lm_dinp", false, false, n, c, v, 0.f, 1},
      {"lm_dwte", true, false, v, c, n, 1.f, 1},
  };

  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  size_t maxa = 0, maxb = 0, maxc = 0;
  for (auto& s : shapes) {
    maxa = std::max(maxa, (size_t)s.M * s.K);
    maxb = std::max(maxb, (size_t)s.K * s.N);
    maxc = std::max(maxc, (size_t)s.M * s.N);
  }
  std::vector<float> A(maxa), B(maxb), C(maxc);
  for (auto& x : A) x = dist(rng);
  for (auto& x : B) x = dist(rng);

  std::printf("# lib %s api %s threads %d core %s N %d C %d V %d reps %d\n", path.c_str(), lib.api.c_str(), threads,
              core.c_str(), n, c, v, reps);
  std::printf("%-14s %2s %6s %6s %6s %10s %10s %9s %9s %7s\n", "shape", "op", "M", "N", "K", "median_us", "min_us",
              "GF/s_med", "GF/s_best", "maxerr");
  double step_s = 0, step_best_s = 0, step_flop = 0;
  int wrong = 0;
  for (auto& s : shapes) {
    std::fill(C.begin(), C.begin() + (size_t)s.M * s.N, 0.f);
    gemm(lib, s.ta, s.tb, s.M, s.N, s.K, A.data(), B.data(), 0.f, C.data());
    // Check a sample of entries against a double-accumulated dot product.
    double maxerr = 0;
    for (int t = 0; t < 64; ++t) {
      int i = (int)(rng() % s.M), j = (int)(rng() % s.N);
      double ref = 0;
      for (int k = 0; k < s.K; ++k)
        ref += (double)(s.ta ? A[(size_t)k * s.M + i] : A[(size_t)i * s.K + k]) *
               (s.tb ? B[(size_t)j * s.K + k] : B[(size_t)k * s.N + j]);
      maxerr = std::max(maxerr, std::fabs(ref - C[(size_t)i * s.N + j]) / std::sqrt((double)s.K));
    }
    if (maxerr > 1e-4) ++wrong;
    for (int w = 0; w < 2; ++w) gemm(lib, s.ta, s.tb, s.M, s.N, s.K, A.data(), B.data(), s.beta, C.data());
    std::vector<double> ts;
    for (int r = 0; r < reps; ++r) {
      double t0 = seconds();
      gemm(lib, s.ta, s.tb, s.M, s.N, s.K, A.data(), B.data(), s.beta, C.data());
      ts.push_back(seconds() - t0);
    }
    std::sort(ts.begin(), ts.end());
    double med = ts[ts.size() / 2], flop = 2.0 * s.M * s.N * s.K;
    step_s += med * s.per_step;
    step_best_s += ts[0] * s.per_step;
    step_flop += flop * s.per_step;
    std::printf("%-14s %c%c %6d %6d %6d %10.1f %10.1f %9.1f %9.1f %7.1e\n", s.name, s.ta ? 'T' : 'N', s.tb ? 'T' : 'N',
                s.M, s.N, s.K, med * 1e6, ts[0] * 1e6, flop / med * 1e-9, flop / ts[0] * 1e-9, maxerr);
  }
  std::printf("%-14s %2s %6s %6s %6s %10.1f %10.1f %9.1f %9.1f %7s\n", "train_step", "", "", "", "", step_s * 1e6,
              step_best_s * 1e6, step_flop / step_s * 1e-9, step_flop / step_best_s * 1e-9, wrong ? "WRONG" : "ok");
  return wrong ? 1 : 0;
}
