// The NCCL backend: collectives on CUDA tensors over NVLink / PCIe / InfiniBand, one GPU per rank.
//
//   auto runtime = MpiRuntime::Init(&argc, &argv);
//   auto world = (*runtime)->World();
//   int device = (*runtime)->local_rank() % cuda::DeviceCount();
//   auto nccl = CreateNcclCommunicator(**world, device, NcclOptions(), "world");
//   auto ctx = ParallelContext::Create(**nccl, config, heads);   // TP/DP groups on NCCL too
//
// How it works and what it guarantees:
//  - Creation is collective over `bootstrap` (normally an MPI communicator): rank 0 makes the
//    NCCL unique id and broadcasts it over the bootstrap. Every rank first checks that it can use
//    its device and that no two ranks share one GPU (NCCL does not support that; use the MPI
//    backend, which stages through the host, to share a GPU); all ranks fail together if any one
//    cannot proceed.
//  - The communicator runs NCCL on its own CUDA stream. Each call first makes that stream wait for
//    work already queued on the compute stream (NcclOptions::compute_stream, default: the legacy
//    default stream), then waits on the host until the collective has finished, so calls are
//    synchronous like the MPI backend's.
//  - AllReduceAsync overlaps: it queues ncclAllReduce the same way (after the compute stream's
//    queued work), records a CUDA event owned by the request behind it and returns. Test() is
//    cudaEventQuery (plus an NCCL error check); Wait() polls the event, bounded by
//    NcclOptions::timeout counted from the start of Wait (with the abort path below). When either
//    sees completion, the compute stream is made to wait for the event, so work queued on it
//    afterwards reads the result. A blocking call made while requests are pending also waits for
//    them (they share the stream). CPU tensors go to the bootstrap's (MPI) AllReduceAsync.
//  - Every wait is bounded by NcclOptions::timeout. The host polls ncclCommGetAsyncError and
//    cudaStreamQuery; on a NCCL error or when the timeout passes it calls ncclCommAbort and the
//    call returns Internal or DeadlineExceeded; the communicator is then unusable
//    (FailedPrecondition). The binary should end the job (MpiRuntime::Abort): peers that are
//    still waiting are ended by mpirun, or by their own timeout.
//  - CUDA tensors must live on this communicator's device (InvalidArgument otherwise). CPU tensors
//    are handed to a duplicate of the bootstrap communicator (MPI semantics), so small host values
//    (a loss, an overflow flag) can use the same communicator.
//  - bf16/f16 sums are reduced natively by NCCL in the 16-bit type (see communicator.h).
//  - Send/Recv: NCCL has no tags; messages between a pair are matched in issue order and the tag
//    is ignored. A receiver whose size does not match the sender's cannot be detected.
//  - Split() splits the bootstrap communicator and creates a new NCCL communicator over each part.
// In builds without CUDA (or --config=cpu_only) CreateNcclCommunicator returns Unimplemented.
#ifndef MT_COMM_NCCL_COMMUNICATOR_H_
#define MT_COMM_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/communicator.h"

namespace mt {
namespace comm {

struct NcclOptions {
  // Longest wait for initialisation or for one call before the communicator is aborted.
  absl::Duration timeout = absl::Minutes(5);
  // cudaStream_t whose queued work each call waits for (ExecContext::cuda_stream); null: the
  // legacy default stream.
  void* compute_stream = nullptr;
};

// True when this binary was built with NCCL (a CUDA build).
bool NcclAvailable();

// An NCCL communicator over the ranks of `bootstrap`, this rank using CUDA device `device`.
// Collective over `bootstrap`, which is only used during the call (a duplicate is kept).
// Errors: Unimplemented without NCCL; InvalidArgument for a bad device or options;
// FailedPrecondition when ranks share a GPU or another rank could not set up; Internal for NCCL or
// CUDA failures; DeadlineExceeded when initialisation does not finish within options.timeout.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    Communicator& bootstrap, int device, const NcclOptions& options = NcclOptions(),
    absl::string_view name = "");

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_NCCL_COMMUNICATOR_H_
