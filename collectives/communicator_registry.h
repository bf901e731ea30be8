// The communicator factory: which Communicator a device gets (STRATA_COMM), and building it. The only place in
// strata_collectives that knows whether NCCL was built (see communicator_registry.cc).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "collectives/communicator.h"

namespace strata {

bool nccl_built();

// STRATA_COMM. kAuto: MPI on a CPU device, NCCL on a CUDA device. kNccl: NCCL, on a CUDA device only. kMpi: MPI on a
// CPU device, the host-staged MPI communicator (collectives/staged_communicator.h) on a CUDA device, so that ranks may
// share a GPU. kMpiStaged: the host-staged communicator on any device (it runs its staging on the CPU backend, for
// tests).
enum class CommChoice { kAuto, kNccl, kMpi, kMpiStaged };
// "auto", "nccl", "mpi", "mpi-staged" (core/env.cc refuses other values of STRATA_COMM); kInvalidArgument otherwise.
CommChoice parse_comm_choice(const std::string& text);
const char* comm_choice_name(CommChoice choice);
// Whether `choice` puts NCCL on a CUDA device, which then needs a GPU of its own for every rank of a node.
bool needs_gpu_per_rank(CommChoice choice);
// The refusal for `ranks` ranks of one node on `gpus` GPUs under NCCL: "2 ranks on this node but 1 GPU(s): NCCL needs
// one GPU per rank; STRATA_COMM=mpi runs them on one GPU" (the runtime's error and the GPU tests' skip reason).
std::string nccl_gpu_shortage(int ranks, int gpus);

// What create_communicator builds on a device of `kind` under `choice`: its backend_name() ("mpi", "nccl",
// "mpi-staged"), and in `why` (when given) the reason, for the start-up log. kInvalidArgument for NCCL on a CPU
// device.
const char* comm_backend_for(DeviceKind kind, CommChoice choice, std::string* why = nullptr);

// Collective over `parent` (which it duplicates, leaving `parent` untouched): a communicator of every rank of
// `parent` on `device`, as comm_backend_for(device.kind(), choice) says.
std::unique_ptr<Communicator> create_communicator(Device& device, MPI_Comm parent, const std::string& name,
                                                  const CommOptions& options, CommChoice choice = CommChoice::kAuto);

}  // namespace strata
