// Multi-process test of MpiProgress: with the progress thread on, a non-blocking all-reduce large
// enough to need several rounds of messages (8 MiB, shared memory's rendezvous protocol) completes
// while the main thread makes no MPI call at all, so the first Test() after a pause finds it done
// with the right sums; a bad interval is refused. Without the thread the same all-reduce stays
// pending until the next MPI call (run with --no_progress to see it fail). Run under mpirun
// (comm/mpi_test.sh) with 2 or 4 ranks.
#include "comm/mpi_progress.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/tensor.h"

namespace {

using mt::comm::MpiProgress;
using mt::comm::MpiRuntime;

int Fail(int rank, const char* what) {
  std::fprintf(stderr, "[rank %d] FAIL: %s\n", rank, what);
  return 1;
}

int Run(mt::comm::Communicator& world, bool progress) {
  const int rank = world.rank(), n = world.size();
  if (MpiProgress::Start(0).ok()) return Fail(rank, "an interval of 0 was accepted");
  if (progress) {
    if (!MpiProgress::Start(50e-6).ok() || !MpiProgress::running()) {
      return Fail(rank, "the progress thread did not start");
    }
  }
  std::vector<float> data(2 << 20, static_cast<float>(rank + 1));  // 8 MiB.
  mt::TensorView t(data.data(), mt::Shape{static_cast<int64_t>(data.size())}, mt::DType::kF32);
  auto request = world.AllReduceAsync(t, mt::comm::ReduceOp::kSum);
  if (!request.ok()) return Fail(rank, "AllReduceAsync failed");
  // No MPI call from this thread for 2 s: only the progress thread can move the all-reduce.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto done = (*request)->Test();
  if (!done.ok()) return Fail(rank, "Test failed");
  if (!*done) return Fail(rank, "the all-reduce was still pending after 2 s without MPI calls");
  const float want = n * (n + 1) / 2.0f;
  for (float v : data) {
    if (v != want) return Fail(rank, "wrong sum");
  }
  if (rank == 0) std::printf("PASS: 8 MiB all-reduce of %d ranks done in the background\n", n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool progress = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no_progress") == 0) progress = false;
  }
  auto runtime = MpiRuntime::Init(&argc, &argv, mt::comm::MpiThreads::kMultiple);
  if (!runtime.ok()) MpiRuntime::Abort(runtime.status());
  int rc = 0;
  {
    auto world = (*runtime)->World();
    if (!world.ok()) MpiRuntime::Abort(world.status());
    rc = Run(**world, progress);
  }
  return rc;
}
