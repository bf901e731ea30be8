// A rank that leaves early: the last rank issues one all_gather fewer and returns from main normally (its Runtime
// shuts down cleanly). ctest checks that the others fail at once naming that rank and the collective they wait in,
// instead of waiting out STRATA_TIMEOUT_S.
#include "collectives/communicator.h"
#include "core/logging.h"
#include "runtime/bootstrap/runtime.h"

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    auto stream = rt.device().create_stream("comm");
    strata::Buffer send = rt.device().allocate(1024 * 4, strata::MemCategory::kCommBuffer);
    strata::Buffer recv = rt.device().allocate(rt.world_size() * 1024 * 4, strata::MemCategory::kCommBuffer);
    rt.world().barrier(*stream);  // seq 0
    const int steps = rt.rank() == rt.world_size() - 1 ? 2 : 3;  // all_gather seq 1, 2 (and 3 on the others)
    for (int i = 0; i < steps; ++i) rt.world().all_gather(send.data(), recv.data(), 1024, strata::DType::kF32, *stream);
    stream->synchronize();
    strata::logger("core").info("leave_early_probe: rank {} finished its {} all_gathers", rt.rank(), steps);
    return 0;
  });
}
