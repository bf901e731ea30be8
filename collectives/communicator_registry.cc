// The communicator registry: the one file in strata_collectives where STRATA_WITH_CUDA is tested.
#include "collectives/communicator_registry.h"

#include "collectives/mpi_communicator.h"
#include "core/config.h"
#include "core/error.h"

#if STRATA_WITH_CUDA
#include "collectives/nccl_communicator.h"
#endif

namespace strata {

bool nccl_built() { return STRATA_WITH_CUDA != 0; }

std::unique_ptr<Communicator> create_communicator(Device& device, MPI_Comm parent, const std::string& name,
                                                  const CommOptions& options) {
  if (device.kind() == DeviceKind::kCpu) return std::make_unique<MpiCommunicator>(device, parent, name, options);
#if STRATA_WITH_CUDA
  return std::make_unique<NcclCommunicator>(device, parent, name, options);
#else
  STRATA_THROW(ErrorCode::kUnsupported, "a {} device needs NCCL, and this build has no CUDA", device.name());
#endif
}

}  // namespace strata
