// A rank that never joins a shared-memory collective: argv[1] names it (all_gather, reduce_scatter, all_reduce). The
// last rank either stays busy elsewhere far longer than STRATA_TIMEOUT_S (argv[2] "stall": the others time out
// naming the collective) or returns from main (argv[2] "leave": the others fail at once naming the rank that left).
// ctest checks the message and that the whole job stops.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "collectives/communicator.h"
#include "core/logging.h"
#include "runtime/bootstrap/runtime.h"

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    const std::string op = argc > 1 ? argv[1] : "all_gather";
    const bool leave = argc > 2 && std::string(argv[2]) == "leave";
    strata::Communicator& world = rt.world();
    auto stream = rt.device().create_stream("comm");
    const std::size_t n = static_cast<std::size_t>(rt.world_size());
    const std::size_t count = 3 * 65536 + 7;  // f32: several shared-memory steps
    strata::Buffer send = rt.device().allocate(n * count * 4, strata::MemCategory::kOther);
    strata::Buffer recv = rt.device().allocate(n * count * 4, strata::MemCategory::kOther);
    std::memset(send.data(), 0, send.bytes());
    auto issue = [&] {
      if (op == "all_gather")
        world.all_gather(send.data(), recv.data(), count, strata::DType::kF32, *stream);
      else if (op == "reduce_scatter")
        world.reduce_scatter(send.data(), recv.data(), count, strata::DType::kF32, strata::ReduceOp::kSum, *stream);
      else
        world.all_reduce(send.data(), recv.data(), count, strata::DType::kF32, strata::ReduceOp::kSum, *stream);
    };
    issue();  // every rank: the lane and its segment exist, and the protocol has run once
    stream->synchronize();
    if (rt.rank() != rt.world_size() - 1) {
      issue();
      stream->synchronize();
    } else if (leave) {
      return 0;  // the Runtime shuts down normally: the others hear on the side channel that this rank left
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(300));  // ctest's TIMEOUT is shorter
    }
    strata::logger("core").error("shm_hang_probe: not expected to get here");
    return 0;
  });
}
