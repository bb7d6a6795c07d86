// Background progress for MPI's non-blocking collectives on the CPU. OpenMPI advances a
// non-blocking all-reduce only inside MPI calls, so a gradient bucket started during backward
// moves only when the trainer next calls MPI (once per layer) and at the final Wait: over a slow
// link almost nothing overlaps (docs/multinode.md). With this on, a thread of the process calls
// into MPI's progress engine (MPI_Iprobe on a private communicator, then a short sleep) whenever
// a non-blocking reduction is in flight, and sleeps on a condition variable otherwise.
//
//   RETURN_IF_ERROR(MpiProgress::Start(50e-6));   // after MPI_Init_thread(MULTIPLE)
//   ... MpiProgress::Begin() when a request starts, End() when its completion is observed ...
//   MpiProgress::Stop();                           // before MPI_Finalize
#ifndef MT_COMM_MPI_PROGRESS_H_
#define MT_COMM_MPI_PROGRESS_H_

#include "absl/status/status.h"

namespace mt {
namespace comm {

class MpiProgress {
 public:
  // Starts the process's progress thread, polling every `interval_seconds` (> 0) while requests
  // are in flight. FailedPrecondition unless MPI was initialised with MPI_THREAD_MULTIPLE;
  // InvalidArgument for a bad interval. A second Start is a no-op.
  static absl::Status Start(double interval_seconds);
  // Joins the thread (before MPI_Finalize). Idempotent; a no-op when never started.
  static void Stop();
  // A non-blocking request has started / its completion has been observed. No-ops unless started.
  static void Begin();
  static void End();
  static bool running();
};

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_MPI_PROGRESS_H_
