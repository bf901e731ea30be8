// The gtest main for every test binary: starts Strata, runs the tests, and returns a verdict agreed by all ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/support/test_support.h"

namespace {

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
    int global = 0;
    MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && global != local) std::fprintf(stderr, "a test failed on another rank\n");
    strata::test::stop_runtime();
    return global;
  });
}
