// The gtest main for every test binary: starts Strata, runs the tests, and returns a verdict agreed by all ranks:
// 0 when every selected test passed; 1 when one failed on any rank, or when the selection is empty (a --gtest_filter
// that matches nothing proves nothing); kAllSkipped when every test skipped itself on every rank (a GPU test on a
// machine without one), which ctest reports as skipped, not passed (SKIP_RETURN_CODE in tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/support/test_support.h"

namespace {

constexpr int kAllSkipped = 77;

// On ranks other than 0, print only failures (prefixed with the rank), so np = 4 output stays readable.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return strata::run_main([&] {
    strata::test::start_runtime(&argc, &argv);
    int rank = strata::test::runtime().rank();
    if (rank != 0) {
      auto& listeners = testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailurePrinter(rank));
    }
    int local = RUN_ALL_TESTS();
    const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
    if (unit.test_to_run_count() == 0) {
      std::fprintf(stderr, "[rank %d] no test was selected (--gtest_filter=%s): an empty selection fails\n", rank,
                   testing::GTEST_FLAG(filter).c_str());
      local = 1;
    }
    int global = 0;
    MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && global != local) std::fprintf(stderr, "a test failed on another rank\n");
    int all_skipped = unit.skipped_test_count() == unit.test_to_run_count() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    strata::test::stop_runtime();
    if (global == 0 && all_skipped) {
      if (rank == 0) std::fprintf(stderr, "every test skipped itself: reported to ctest as skipped\n");
      return kAllSkipped;
    }
    return global;
  });
}
