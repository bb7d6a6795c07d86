// Builds without CUDA: there is no NCCL.
#include "comm/nccl_communicator.h"

namespace mt {
namespace comm {

bool NcclAvailable() { return false; }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Communicator&, int,
                                                                     const NcclOptions&,
                                                                     absl::string_view) {
  return absl::UnimplementedError(
      "CreateNcclCommunicator: this binary was built without CUDA/NCCL; rebuild with the CUDA "
      "toolkit (and without --config=cpu_only), or use the MPI backend");
}

}  // namespace comm
}  // namespace mt
