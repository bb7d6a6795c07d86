// A job in which rank 1 fails while the other ranks wait in an all-reduce, for failure_test.sh:
//
//   mpirun -np N failure_probe --mode=kill|exit|status|none
//
//   kill    rank 1 raises SIGKILL (a crash, an OOM kill);
//   exit    rank 1 calls exit(3) without finalising MPI (a library that gave up);
//   status  rank 1 gets an error Status from a collective (a non-contiguous view) and takes the
//           binaries' clean abort path, MpiRuntime::Abort;
//   none    control: every rank completes the all-reduce and the job exits 0.
//
// Every rank first completes one all-reduce (so the job is up), then ranks != 1 enter a second
// one (4 MiB) that rank 1 never joins unless --mode=none. A survivor that returns from it prints
// "UNEXPECTED".
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/tensor.h"

namespace {

using mt::comm::Communicator;
using mt::comm::MpiRuntime;
using mt::comm::ReduceOp;

void Check(const absl::Status& s) {
  if (!s.ok()) MpiRuntime::Abort(s);
}

int Run(const std::string& mode, Communicator& world) {
  const int rank = world.rank();
  float one = 1;
  Check(world.AllReduce(mt::TensorView(&one, mt::Shape{1}, mt::DType::kF32), ReduceOp::kSum));
  std::printf("rank %d: ready (%g ranks)\n", rank, one);
  std::fflush(stdout);
  std::vector<float> data(1 << 20, 1.0f);
  mt::TensorView t(data.data(), mt::Shape{static_cast<int64_t>(data.size())}, mt::DType::kF32);
  if (rank == 1 && mode != "none") {
    // Let the others block in the all-reduce first.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::printf("rank 1: failing (--mode=%s)\n", mode.c_str());
    std::fflush(stdout);
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "exit") std::exit(3);
    if (mode == "status") {
      mt::TensorView strided = t.Slice(0, 6);
      strided.shape = {2, 3};
      strided.strides = {1, 2};
      Check(world.AllReduce(strided, ReduceOp::kSum));  // InvalidArgument -> Abort.
    }
    std::fprintf(stderr, "unknown --mode=%s\n", mode.c_str());
    return 2;
  }
  Check(world.AllReduce(t, ReduceOp::kSum));
  if (mode != "none") {
    std::printf("UNEXPECTED: rank %d finished the all-reduce without rank 1\n", rank);
  } else {
    std::printf("rank %d: all-reduce done (%g)\n", rank, data[0]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "none";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mode=", 7) == 0) mode = argv[i] + 7;
  }
  auto runtime = MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) MpiRuntime::Abort(runtime.status());
  int rc = 0;
  {
    auto world = (*runtime)->World();
    if (!world.ok()) MpiRuntime::Abort(world.status());
    rc = Run(mode, **world);
  }
  return rc;
}
