// The MPI backend: MpiRuntime owns MPI's lifetime in a process; the communicators it hands out
// carry collectives between processes (OpenMPI 4.1 here; any MPI-3 library should do).
//
//   int main(int argc, char** argv) {
//     auto runtime = mt::comm::MpiRuntime::Init(&argc, &argv);
//     if (!runtime.ok()) mt::comm::MpiRuntime::Abort(runtime.status());
//     auto world = (*runtime)->World();          // a Communicator over every rank
//     ...
//     absl::Status s = Train(**world);
//     if (!s.ok()) mt::comm::MpiRuntime::Abort(s);  // ends EVERY rank, exit code != 0
//   }                                            // communicators, then the runtime, destroyed
//
// Tensors: CPU views are handed to MPI directly. CUDA views are staged through host memory
// (device -> host copy, MPI on the host copy, host -> device copy, with mt::cuda::Memcpy), so
// several ranks may share one GPU; this is for correctness tests and small jobs: use the NCCL
// backend for speed. bf16/f16 reductions are computed in f32 (see communicator.h). Element counts
// per call must fit in an int (2^31 - 1 elements).
//
// AllReduceAsync is MPI_Iallreduce. f32/i32/i64 CPU tensors are reduced in place; bf16/f16 and
// CUDA tensors go through host buffers owned by the request (allocated per call): converted to f32
// and/or copied to the host when the call starts, converted/copied back into the tensor when
// completion is first observed (in Test or Wait), with the blocking call's numerics. Progress:
// OpenMPI advances non-blocking collectives only inside MPI calls on this process (there is no
// progress thread, and MpiRuntime asks for MPI_THREAD_SERIALIZED, so no thread of ours drives it
// either), so a caller that wants the transfer to overlap its computation calls Test() now and then
// (the trainer does after each layer's backward); a request nobody tests mostly progresses in Wait.
//
// Failure behaviour: MPI errors on our communicators are returned as Status (MPI_ERRORS_RETURN),
// never printed-and-aborted inside the library. When a rank fails, the job ends:
//  - a rank that gets an error Status calls MpiRuntime::Abort, which calls MPI_Abort: mpirun
//    kills every rank and exits with that code;
//  - a rank that dies (signal, exit() with non-zero code, crash) is noticed by mpirun, which kills
//    the others (OpenMPI's default) and exits non-zero;
// in both cases ranks blocked in a collective are terminated within seconds instead of hanging.
// (Measured by //comm:failure_test: about 2 s with 4 ranks on one machine.)
#ifndef MT_COMM_MPI_COMMUNICATOR_H_
#define MT_COMM_MPI_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"

namespace mt {
namespace comm {

// The thread level MpiRuntime::Init asks MPI for: kSerialized (any thread may call MPI, one at a
// time), or kMultiple (threads may call MPI at once: what comm/watchdog.h needs for its heartbeats
// while the main thread waits in a collective).
enum class MpiThreads { kSerialized, kMultiple };

class MpiRuntime {
 public:
  // Initialises MPI (MPI_Init_thread at the level `threads` asks for; thread_multiple() says
  // whether MPI granted kMultiple). With OpenMPI it first sets
  // OMPI_MCA_coll_libnbc_iallreduce_algorithm=3 in the environment unless already set (the
  // non-blocking all-reduce schedule; see the .cc and docs/perf/comm.md). argc/argv may be null.
  // FailedPrecondition if MPI was already initialised in this process (MPI allows it once);
  // Internal if initialisation fails.
  static absl::StatusOr<std::unique_ptr<MpiRuntime>> Init(
      int* argc, char*** argv, MpiThreads threads = MpiThreads::kSerialized);
  // Finalises MPI. Destroy communicators first (those still alive become unusable).
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Rank among the processes on this host, and their number (to pick a GPU: local_rank % count).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // This host's name as MPI reports it.
  const std::string& host_name() const { return host_name_; }
  // Whether MPI granted MPI_THREAD_MULTIPLE.
  bool thread_multiple() const { return thread_multiple_; }

  // A new communicator over every rank (a duplicate of MPI_COMM_WORLD, so its traffic never mixes
  // with another's). Collective over the world. Internal on MPI failure.
  absl::StatusOr<std::unique_ptr<Communicator>> World(absl::string_view name = "world");

  // Ends the whole job: prints "[rank R] fatal: <status>" to stderr and calls
  // MPI_Abort(MPI_COMM_WORLD, exit_code), so mpirun terminates every rank and exits non-zero.
  // Without an initialised MPI it just exits. exit_code 0 is replaced by 1. For binaries only:
  // libraries return Status instead.
  [[noreturn]] static void Abort(const absl::Status& status, int exit_code = 1);

 private:
  MpiRuntime() = default;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_name_;
  bool thread_multiple_ = false;
};

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_MPI_COMMUNICATOR_H_
