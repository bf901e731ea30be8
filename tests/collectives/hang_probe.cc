// A deliberately hung job: rank 0 enters an all-gather that the last rank never joins. ctest checks that rank 0
// times out with its in-flight list and that the whole job then stops (the last rank is killed by the abort).
#include <chrono>
#include <thread>

#include "collectives/communicator.h"
#include "runtime/bootstrap/runtime.h"
#include "core/logging.h"
#include "tests/support/all_gather_probe.h"

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    strata::test::AllGatherProbe probe(rt);  // every rank opens the stream and meets once
    if (rt.rank() != rt.world_size() - 1) {
      probe.all_gather();
      probe.synchronize();
    } else {
      // The stuck rank: busy elsewhere for far longer than the timeout (ctest's own TIMEOUT is shorter).
      std::this_thread::sleep_for(std::chrono::seconds(300));
    }
    strata::logger("core").error("hang_probe: not expected to get here");
    return 0;
  });
}
