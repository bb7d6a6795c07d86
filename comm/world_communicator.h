// The communicator a job's collectives run on, chosen the same way by every binary (the
// pretraining, evaluation and generation jobs) from --comm_backend:
//   mpi    the MPI world itself; CUDA tensors are staged through host memory, so several ranks
//          may share one GPU;
//   nccl   an NCCL communicator over the same ranks (its unique id broadcast over MPI); needs
//          --device=cuda;
//   auto   nccl on a CUDA device when this build has NCCL and every local rank has a GPU of its
//          own (local_size <= GPUs), else mpi.
// On the CPU every backend but nccl is the MPI world.
//
//   ASSIGN_OR_RETURN(WorldCommunicator w,
//                    CreateWorldCommunicator(*mpi_world, exec.device, backend, local_size));
//   comm::ParallelContext::Create(*w.comm, ...);   // w.owned (NCCL) lives as long as the job
#ifndef MT_COMM_WORLD_COMMUNICATOR_H_
#define MT_COMM_WORLD_COMMUNICATOR_H_

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "core/device.h"

namespace mt {
namespace comm {

enum class CommBackend { kAuto, kMpi, kNccl };
inline constexpr std::pair<absl::string_view, CommBackend> kCommBackendNames[] = {
    {"auto", CommBackend::kAuto}, {"mpi", CommBackend::kMpi}, {"nccl", CommBackend::kNccl}};

struct WorldCommunicator {
  std::unique_ptr<Communicator> owned;  // The NCCL communicator, when chosen; else null.
  Communicator* comm = nullptr;         // `owned`, or the MPI world passed in.
  bool nccl() const { return owned != nullptr; }
};

// InvalidArgument "--comm_backend=nccl needs --device=cuda" for nccl off a CUDA device.
absl::Status ValidateCommBackend(CommBackend backend, DeviceType device);

// The communicator over `mpi_world`'s ranks for `device` (this rank's; on the GPU, the one its
// NCCL communicator uses) and `backend`, as above. Collective over mpi_world when it creates an
// NCCL communicator. Errors: ValidateCommBackend's; FailedPrecondition for nccl in a build
// without NCCL; NCCL's initialisation errors.
absl::StatusOr<WorldCommunicator> CreateWorldCommunicator(Communicator& mpi_world,
                                                          const Device& device, CommBackend backend,
                                                          int local_size);

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_WORLD_COMMUNICATOR_H_
