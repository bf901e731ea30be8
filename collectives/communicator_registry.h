// The communicator factory: MPI for CPU devices, NCCL for CUDA devices. The only place in strata_collectives that
// knows whether NCCL was built (see communicator_registry.cc).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "collectives/communicator.h"

namespace strata {

bool nccl_built();

// Collective over `parent` (which it duplicates, leaving `parent` untouched): a communicator of every rank of
// `parent` on `device` -- MpiCommunicator on a CPU device, NcclCommunicator on a CUDA device.
std::unique_ptr<Communicator> create_communicator(Device& device, MPI_Comm parent, const std::string& name,
                                                  const CommOptions& options);

}  // namespace strata
