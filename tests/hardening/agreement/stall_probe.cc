// A stalled rank: after the first barrier the last rank stops itself (SIGSTOP) while the others enter an
// all_gather. ctest checks that the timeout message names the stopped rank as never arrived and the ranks waiting
// in the collective, and that every process ends (mpirun's abort kills the stopped one).
// With the argument "recv" the last rank instead waits in a recv from rank 0 that never comes: it answers on the
// side channel, and the others' message says it has not reached the all_gather and what it waits in.
#include <signal.h>
#include <unistd.h>

#include <string>

#include "collectives/communicator.h"
#include "core/logging.h"
#include "runtime/bootstrap/runtime.h"
#include "tests/support/all_gather_probe.h"

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    strata::test::AllGatherProbe probe(rt);  // every rank opens the stream and meets once
    const bool lagging = argc > 1 && std::string(argv[1]) == "recv";
    if (rt.rank() == rt.world_size() - 1) {
      if (!lagging) kill(getpid(), SIGSTOP);
      if (lagging) probe.recv_from(0);
    }
    if (rt.rank() != rt.world_size() - 1 || !lagging) probe.all_gather();
    probe.synchronize();
    strata::logger("core").error("stall_probe: not expected to get here");
    return 0;
  });
}
