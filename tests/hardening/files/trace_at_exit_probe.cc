// trace_at_exit_probe: a program that never calls Runtime::finish(), so its trace (STRATA_TRACE) is written by the
// Runtime's destructor; a failed write there must still end the process with a non-zero exit (run_main returns 1).
#include <strata/strata.h>

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    return 0;
  });
}
