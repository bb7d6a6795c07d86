#include "comm/world_communicator.h"

#include "comm/nccl_communicator.h"
#include "core/cuda_device.h"
#include "core/status.h"

namespace mt {
namespace comm {

absl::Status ValidateCommBackend(CommBackend backend, DeviceType device) {
  if (backend == CommBackend::kNccl && device != DeviceType::kCuda) {
    return absl::InvalidArgumentError("--comm_backend=nccl needs --device=cuda");
  }
  return absl::OkStatus();
}

absl::StatusOr<WorldCommunicator> CreateWorldCommunicator(Communicator& mpi_world,
                                                          const Device& device, CommBackend backend,
                                                          int local_size) {
  RETURN_IF_ERROR(ValidateCommBackend(backend, device.type));
  WorldCommunicator w;
  w.comm = &mpi_world;
  if (!device.is_cuda()) return w;
  const bool nccl =
      backend == CommBackend::kNccl ||
      (backend == CommBackend::kAuto && NcclAvailable() && local_size <= cuda::DeviceCount());
  if (!nccl) return w;
  ASSIGN_OR_RETURN(w.owned,
                   CreateNcclCommunicator(mpi_world, device.index, NcclOptions(), "world"));
  w.comm = w.owned.get();
  return w;
}

}  // namespace comm
}  // namespace mt
