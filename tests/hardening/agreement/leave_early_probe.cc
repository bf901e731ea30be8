// A rank that leaves early: the last rank issues one all_gather fewer and returns from main normally (its Runtime
// shuts down cleanly). ctest checks that the others fail at once naming that rank and the collective they wait in,
// instead of waiting out STRATA_TIMEOUT_S.
#include "collectives/communicator.h"
#include "core/logging.h"
#include "runtime/bootstrap/runtime.h"
#include "tests/support/all_gather_probe.h"

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    strata::test::AllGatherProbe probe(rt);  // the barrier: seq 0
    const int steps = rt.rank() == rt.world_size() - 1 ? 2 : 3;  // all_gather seq 1, 2 (and 3 on the others)
    for (int i = 0; i < steps; ++i) probe.all_gather();
    probe.synchronize();
    strata::logger("core").info("leave_early_probe: rank {} finished its {} all_gathers", rt.rank(), steps);
    return 0;
  });
}
