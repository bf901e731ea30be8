// Kernels under OMP_THREAD_LIMIT=1 (set by ctest): sgemm and the matmul kernel asked for more threads than the limit
// must still write every element. Without the clamp, dnnl_sgemm plans for omp_get_max_threads() threads and leaves
// the blocks of the threads it never gets unwritten, while returning success.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/ops.h"

namespace strata::cpu {
namespace {

// Small integers: every product and partial sum is exact in f32, so the threaded result equals the reference exactly.
struct Problem {
  int M, N, K;
  std::vector<float> A, B, bias, C_ref;
  Problem(int m, int n, int k) : M(m), N(n), K(k), A(static_cast<std::size_t>(m) * k), B(static_cast<std::size_t>(k) * n),
                                  bias(static_cast<std::size_t>(n)), C_ref(static_cast<std::size_t>(m) * n) {
    for (std::size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    for (std::size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
    for (int j = 0; j < N; ++j) bias[static_cast<std::size_t>(j)] = static_cast<float>(j % 3);
    for (int i = 0; i < M; ++i)  // the reference: one thread, in order, in double
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k2 = 0; k2 < K; ++k2)
          s += static_cast<double>(A[static_cast<std::size_t>(i) * K + k2]) * B[static_cast<std::size_t>(k2) * N + j];
        C_ref[static_cast<std::size_t>(i) * N + j] = static_cast<float>(s);
      }
  }
};

std::size_t count_wrong(const std::vector<float>& got, const std::vector<float>& want) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  return wrong;
}

class ThreadLimit : public testing::Test {
 protected:
  void SetUp() override {
    // The test means something only under a limit below the threads asked for (ctest sets OMP_THREAD_LIMIT=1).
    ASSERT_EQ(omp_get_thread_limit(), 1) << "run with OMP_THREAD_LIMIT=1 (the ctest ENVIRONMENT sets it)";
  }
};

TEST_F(ThreadLimit, SetNumThreadsIsClampedToTheLimit) {
  set_num_threads(4);
  EXPECT_EQ(num_threads(), 1);
}

// The shapes of the GPT's matmuls (qkv, MLP, LM head) and a prime-sized one.
TEST_F(ThreadLimit, MatmulForwardWritesEveryElement) {
  for (auto [M, N, K] : {std::array<int, 3>{64, 192, 48}, {256, 256, 64}, {97, 131, 61}, {512, 64, 256}}) {
    Problem p(M, N, K);
    set_num_threads(4);  // as GptTrainer asks on a 4-core node
    std::vector<float> out(static_cast<std::size_t>(M) * N, -7.0f), want = p.C_ref;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) want[static_cast<std::size_t>(i) * N + j] += p.bias[static_cast<std::size_t>(j)];
    matmul_forward(out.data(), p.A.data(), p.B.data(), p.bias.data(), M, K, N);
    EXPECT_EQ(count_wrong(out, want), 0u) << M << " x " << N << " x " << K;
  }
}

// A thread count set by someone else (another library, OMP_NUM_THREADS): sgemm itself keeps within the limit.
TEST_F(ThreadLimit, SgemmWritesEveryElementWhateverTheThreadCount) {
  for (int threads : {2, 4, 8}) {
    Problem p(128, 192, 64);
    omp_set_num_threads(threads);
    std::vector<float> C(p.C_ref.size(), -7.0f);
    detail::sgemm(false, false, p.M, p.N, p.K, p.A.data(), p.K, p.B.data(), p.N, 0.0f, C.data(), p.N);
    EXPECT_EQ(count_wrong(C, p.C_ref), 0u) << threads << " threads asked for";
  }
}

}  // namespace
}  // namespace strata::cpu
