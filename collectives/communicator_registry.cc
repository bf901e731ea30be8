// The communicator registry: the one file in strata_collectives where STRATA_WITH_CUDA is tested.
#include "collectives/communicator_registry.h"

#include <fmt/format.h>

#include <cstring>

#include "collectives/mpi_communicator.h"
#include "collectives/staged_communicator.h"
#include "core/config.h"
#include "core/error.h"

#if STRATA_WITH_CUDA
#include "collectives/nccl_communicator.h"
#endif

namespace strata {

bool nccl_built() { return STRATA_WITH_CUDA != 0; }

CommChoice parse_comm_choice(const std::string& text) {
  for (CommChoice c : {CommChoice::kAuto, CommChoice::kNccl, CommChoice::kMpi, CommChoice::kMpiStaged})
    if (text == comm_choice_name(c)) return c;
  STRATA_THROW(ErrorCode::kInvalidArgument, "STRATA_COMM='{}' must be auto, nccl, mpi or mpi-staged", text);
}

const char* comm_choice_name(CommChoice choice) {
  switch (choice) {
    case CommChoice::kAuto: return "auto";
    case CommChoice::kNccl: return "nccl";
    case CommChoice::kMpi: return "mpi";
    case CommChoice::kMpiStaged: return "mpi-staged";
  }
  return "?";
}

bool needs_gpu_per_rank(CommChoice choice) { return choice == CommChoice::kAuto || choice == CommChoice::kNccl; }

std::string nccl_gpu_shortage(int ranks, int gpus) {
  return fmt::format("{} ranks on this node but {} GPU(s): NCCL needs one GPU per rank; STRATA_COMM=mpi runs them on "
                     "one GPU",
                     ranks, gpus);
}

const char* comm_backend_for(DeviceKind kind, CommChoice choice, std::string* why) {
  const bool cuda = kind == DeviceKind::kCuda;
  auto say = [&](const char* backend, const char* reason) {
    if (why) *why = reason;
    return backend;
  };
  switch (choice) {
    case CommChoice::kAuto:
      return cuda ? say("nccl", "STRATA_COMM=auto on a CUDA device")
                  : say("mpi", "STRATA_COMM=auto on a CPU device");
    case CommChoice::kNccl:
      STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, cuda,
                        "STRATA_COMM=nccl needs a CUDA device, but this rank's device is the CPU (run the CUDA "
                        "backend, or set STRATA_COMM=auto or mpi)");
      return say("nccl", "STRATA_COMM=nccl");
    case CommChoice::kMpi:
      return cuda ? say("mpi-staged", "STRATA_COMM=mpi on a CUDA device: MPI on pinned host copies of the GPU buffers")
                  : say("mpi", "STRATA_COMM=mpi on a CPU device");
    case CommChoice::kMpiStaged:
      return say("mpi-staged", cuda ? "STRATA_COMM=mpi-staged: MPI on pinned host copies of the GPU buffers"
                                    : "STRATA_COMM=mpi-staged: MPI on host copies of the buffers (a test of the staging)");
  }
  return "?";
}

std::unique_ptr<Communicator> create_communicator(Device& device, MPI_Comm parent, const std::string& name,
                                                  const CommOptions& options, CommChoice choice) {
  const char* backend = comm_backend_for(device.kind(), choice);
  if (std::strcmp(backend, "mpi") == 0) return std::make_unique<MpiCommunicator>(device, parent, name, options);
  if (std::strcmp(backend, "mpi-staged") == 0)
    return std::make_unique<StagedCommunicator>(device, parent, name, options);
#if STRATA_WITH_CUDA
  return std::make_unique<NcclCommunicator>(device, parent, name, options);
#else
  STRATA_THROW(ErrorCode::kUnsupported, "a {} device needs NCCL, and this build has no CUDA", device.name());
#endif
}

}  // namespace strata
