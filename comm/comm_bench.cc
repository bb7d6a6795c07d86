// Collective benchmark in the style of nccl-tests: time per call, algorithm bandwidth and bus
// bandwidth of all-reduce (sum) and all-gather over message sizes, for one backend; and how much
// of an all-reduce a non-blocking call hides behind host computation (--ops=overlap).
//
//   mpirun -np 4 bazel-bin/comm/comm_bench [--backend=mpi|nccl] [--device=cpu|cuda]
//       [--min_bytes=8] [--max_bytes=67108864] [--step_factor=2] [--iters=20] [--warmup=5]
//       [--dtype=f32] [--ops=all_reduce,all_reduce_async,all_gather,overlap]
//       [--overlap_mib=1,4,16]
//       [--overlap_chunks=50]
//
// Definitions (as nccl-tests): `size` is the whole buffer in bytes (all-reduce: the reduced
// buffer; all-gather: the gathered output, each rank contributing size / n). time is the mean per
// call over --iters calls after --warmup, the maximum over ranks. algbw = size / time;
// busbw = algbw * 2(n-1)/n for all-reduce and algbw * (n-1)/n for all-gather, the rate each link
// must sustain, comparable with the hardware's bandwidth. #wrong counts wrong elements in a check
// made before timing (all-reduce of rank+1 everywhere; all-gather of rank+1 per block).
// all_reduce_async times AllReduceAsync followed at once by Wait(): the non-blocking algorithm the
// trainer's gradient buckets use (MPI_Iallreduce, which can differ from MPI_Allreduce's).
//
// overlap, per size in --overlap_mib: comm = a blocking all-reduce alone; async = AllReduceAsync
// then Wait() at once (the non-blocking algorithm's own cost); compute = a CPU loop
// in --overlap_chunks chunks, sized (the same on every rank) to take about as long as comm;
// serial = compute, then the blocking all-reduce; overlap = AllReduceAsync, the compute chunks with
// Test() after each (the trainer's pattern: poll after each layer's backward), then Wait().
// Each of the five is timed once per iteration, in turn (--warmup + --iters iterations); the
// median over iterations of the slowest rank's time is reported. ideal = max(comm, compute) is the
// best overlap can do; serial/overlap is the speed-up (up to 2 when comm and compute are equal).
// done@ is the mean number of chunks after which Test() first reported completion (chunks + 1:
// only Wait() finished it). #wrong as above, for one overlapped call. The compute runs on the host
// whatever --device says.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_main.h"
#include "comm/nccl_communicator.h"
#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gflags/gflags.h"

DEFINE_string(backend, "mpi", "Communicator backend: mpi or nccl.");
DEFINE_string(device, "cpu", "Where the buffers live: cpu or cuda (nccl needs cuda).");
DEFINE_int64(min_bytes, 8, "Smallest message size in bytes.");
DEFINE_int64(max_bytes, 64 << 20, "Largest message size in bytes.");
DEFINE_int32(step_factor, 2, "Multiply the size by this between rows.");
DEFINE_int32(iters, 20, "Timed calls per size.");
DEFINE_int32(warmup, 5, "Untimed calls per size before timing.");
DEFINE_string(dtype, "f32", "Element type: f32, bf16, f16, i32, i64.");
DEFINE_string(ops, "all_reduce,all_gather",
              "Comma-separated: all_reduce, all_reduce_async, all_gather, overlap (see the file "
              "comment).");
DEFINE_string(overlap_mib, "1,4,16", "--ops=overlap: all-reduce sizes in MiB, comma-separated.");
DEFINE_int32(overlap_chunks, 50, "--ops=overlap: compute chunks (Test() after each).");

namespace mt {
namespace comm {
namespace {

absl::StatusOr<Tensor> Alloc(int64_t numel, DType dtype, Device device) {
  return Tensor::Empty(Shape{numel}, dtype, device);
}

// Writes `value` to every element of t (host or device).
absl::Status FillValue(const TensorView& t, double value) {
  Tensor host = Tensor::Host(t.shape, t.dtype);
  for (int64_t i = 0; i < host.numel(); ++i) {
    switch (t.dtype) {
      case DType::kF32:
        host.data_as<float>()[i] = static_cast<float>(value);
        break;
      case DType::kBF16:
        host.data_as<bf16>()[i] = FloatToBf16(static_cast<float>(value));
        break;
      case DType::kF16:
        host.data_as<f16>()[i] = FloatToHalf(static_cast<float>(value));
        break;
      case DType::kI32:
        host.data_as<int32_t>()[i] = static_cast<int32_t>(value);
        break;
      case DType::kI64:
        host.data_as<int64_t>()[i] = static_cast<int64_t>(value);
        break;
      case DType::kU16:
        host.data_as<uint16_t>()[i] = static_cast<uint16_t>(value);
        break;
    }
  }
  return CopyTensor(ExecContext(), host.view(), t);
}

// The elements of t (host or device) as doubles.
absl::StatusOr<std::vector<double>> Read(const TensorView& t) {
  ASSIGN_OR_RETURN(const Tensor host, CopyToHost(ExecContext(), t));
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::kF32:
        v[i] = host.data_as<float>()[i];
        break;
      case DType::kBF16:
        v[i] = Bf16ToFloat(host.data_as<bf16>()[i]);
        break;
      case DType::kF16:
        v[i] = HalfToFloat(host.data_as<f16>()[i]);
        break;
      case DType::kI32:
        v[i] = host.data_as<int32_t>()[i];
        break;
      case DType::kI64:
        v[i] = static_cast<double>(host.data_as<int64_t>()[i]);
        break;
      case DType::kU16:
        v[i] = host.data_as<uint16_t>()[i];
        break;
    }
  }
  return v;
}

// Mean seconds per call of `call`, the maximum over ranks.
absl::StatusOr<double> Time(Communicator& comm, const std::function<absl::Status()>& call) {
  for (int i = 0; i < FLAGS_warmup; ++i) RETURN_IF_ERROR(call());
  RETURN_IF_ERROR(comm.Barrier());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < FLAGS_iters; ++i) RETURN_IF_ERROR(call());
  int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  RETURN_IF_ERROR(comm.AllReduce(TensorView(&ns, Shape{1}, DType::kI64), ReduceOp::kMax));
  return ns * 1e-9 / FLAGS_iters;
}

struct Row {
  int64_t bytes = 0;
  int64_t count = 0;  // Elements per rank's input.
  double seconds = 0;
  int64_t wrong = 0;
};

// The check made before timing an all-reduce: buf is filled with rank + 1 on every rank and
// all-reduced (blocking, or non-blocking and waited for); returns how many elements do not hold
// the sum n (n + 1) / 2.
enum class Call { kBlocking, kAsync };
absl::StatusOr<int64_t> WrongSumOfRanks(Communicator& comm, const TensorView& buf, Call call) {
  RETURN_IF_ERROR(FillValue(buf, comm.rank() + 1));
  if (call == Call::kBlocking) {
    RETURN_IF_ERROR(comm.AllReduce(buf, ReduceOp::kSum));
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> r, comm.AllReduceAsync(buf, ReduceOp::kSum));
    RETURN_IF_ERROR(r->Wait());
  }
  ASSIGN_OR_RETURN(std::vector<double> got, Read(buf));
  const int n = comm.size();
  const double want = n * (n + 1) / 2.0;
  int64_t wrong = 0;
  for (double v : got) wrong += v != want;
  return wrong;
}

// One size of all-reduce: `count` elements per rank; blocking, or started non-blocking and
// waited for at once (the call the trainer makes per gradient bucket).
absl::StatusOr<Row> BenchAllReduce(Communicator& comm, int64_t count, DType dtype, Device dev,
                                   Call call) {
  ASSIGN_OR_RETURN(Tensor buf, Alloc(count, dtype, dev));
  Row row;
  row.count = count;
  row.bytes = count * static_cast<int64_t>(DTypeSize(dtype));
  ASSIGN_OR_RETURN(row.wrong, WrongSumOfRanks(comm, buf.view(), call));
  ASSIGN_OR_RETURN(row.seconds, Time(comm, [&]() -> absl::Status {
                     if (call == Call::kBlocking) return comm.AllReduce(buf.view(), ReduceOp::kSum);
                     ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> r,
                                      comm.AllReduceAsync(buf.view(), ReduceOp::kSum));
                     return r->Wait();
                   }));
  return row;
}

// One size of all-gather: `count` elements per rank, n * count gathered.
absl::StatusOr<Row> BenchAllGather(Communicator& comm, int64_t count, DType dtype, Device dev) {
  const int n = comm.size();
  ASSIGN_OR_RETURN(Tensor in, Alloc(count, dtype, dev));
  ASSIGN_OR_RETURN(Tensor out, Alloc(n * count, dtype, dev));
  Row row;
  row.count = count;
  row.bytes = n * count * static_cast<int64_t>(DTypeSize(dtype));
  RETURN_IF_ERROR(FillValue(in.view(), comm.rank() + 1));
  RETURN_IF_ERROR(comm.AllGather(in.view(), out.view()));
  ASSIGN_OR_RETURN(std::vector<double> got, Read(out.view()));
  for (int64_t i = 0; i < n * count; ++i) row.wrong += got[i] != static_cast<double>(i / count + 1);
  ASSIGN_OR_RETURN(row.seconds, Time(comm, [&] { return comm.AllGather(in.view(), out.view()); }));
  return row;
}

// --ops=overlap.

// Host work for the overlap measurement: passes over a buffer that fits in the L2 cache, so that
// it competes with the all-reduce for the cores rather than for memory bandwidth.
class Compute {
 public:
  Compute() : x_(16384, 1.0f) {}
  void Passes(int64_t passes) {
    for (int64_t p = 0; p < passes; ++p) {
      for (float& v : x_) v = v * 0.999f + 0.001f;
    }
    sink_ = x_[p_++ % x_.size()];  // Keeps the loop observable.
  }

 private:
  std::vector<float> x_;
  size_t p_ = 0;
  volatile float sink_ = 0;
};

struct OverlapRow {
  int64_t bytes = 0;
  // Median seconds per iteration of each variant (see the file comment).
  double comm = 0, async = 0, compute = 0, serial = 0, overlap = 0;
  double done_at = 0;  // Mean chunk after which Test() first returned true.
  int64_t passes_per_chunk = 0;
  int64_t wrong = 0;
};

double Median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Passes of `compute` per chunk for `chunks` chunks to take about `seconds`: the fastest of a
// few warm probes gives the time per pass; every rank then does the largest count of passes (a
// collective).
absl::StatusOr<int64_t> PassesPerChunk(Communicator& comm, Compute& compute, double seconds,
                                       int chunks) {
  int64_t probe = 1;
  double pass_s = 1e9;
  for (int tries = 0; tries < 5;) {
    const auto start = std::chrono::steady_clock::now();
    compute.Passes(probe);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < 1e-3) {
      probe *= 2;
      continue;
    }
    pass_s = std::min(pass_s, s / probe);
    ++tries;
  }
  int64_t per_chunk =
      std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds / chunks / pass_s)));
  RETURN_IF_ERROR(comm.AllReduce(TensorView(&per_chunk, Shape{1}, DType::kI64), ReduceOp::kMax));
  return per_chunk;
}

// Runs each variant once per iteration, in turn, so that a change in the machine's load affects
// them alike: --warmup untimed iterations (before_timing() runs after them), then --iters timed
// ones. Returns each variant's median seconds over the timed iterations, each time the slowest
// rank's.
absl::StatusOr<std::vector<double>> MedianSecondsInTurns(
    Communicator& comm, const std::vector<std::function<absl::Status()>>& variants,
    const std::function<void()>& before_timing) {
  const int kinds = static_cast<int>(variants.size());
  const int iters = FLAGS_iters;
  std::vector<int64_t> ns(kinds * iters);
  for (int it = -FLAGS_warmup; it < iters; ++it) {
    if (it == 0) before_timing();
    for (int k = 0; k < kinds; ++k) {
      RETURN_IF_ERROR(comm.Barrier());
      const auto start = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(variants[k]());
      if (it >= 0) {
        ns[k * iters + it] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      }
    }
  }
  RETURN_IF_ERROR(
      comm.AllReduce(TensorView(ns.data(), Shape{kinds * iters}, DType::kI64), ReduceOp::kMax));
  std::vector<double> medians(kinds);
  for (int k = 0; k < kinds; ++k) {
    medians[k] =
        1e-9 * Median(std::vector<int64_t>(ns.begin() + k * iters, ns.begin() + (k + 1) * iters));
  }
  return medians;
}

absl::StatusOr<OverlapRow> BenchOverlap(Communicator& comm, int64_t count, DType dtype,
                                        Device dev) {
  const int chunks = FLAGS_overlap_chunks;
  ASSIGN_OR_RETURN(Tensor buf, Alloc(count, dtype, dev));
  OverlapRow row;
  row.bytes = count * static_cast<int64_t>(DTypeSize(dtype));
  // Check one overlapped call, then time on zeros (repeated sums of rank+1 would overflow).
  ASSIGN_OR_RETURN(row.wrong, WrongSumOfRanks(comm, buf.view(), Call::kAsync));
  RETURN_IF_ERROR(FillValue(buf.view(), 0));

  auto all_reduce = [&] { return comm.AllReduce(buf.view(), ReduceOp::kSum); };
  ASSIGN_OR_RETURN(const double comm_mean, Time(comm, all_reduce));
  // Size the chunks so that the compute takes about as long as the all-reduce.
  Compute compute;
  ASSIGN_OR_RETURN(const int64_t per_chunk, PassesPerChunk(comm, compute, comm_mean, chunks));
  row.passes_per_chunk = per_chunk;

  auto compute_all = [&] {
    for (int c = 0; c < chunks; ++c) compute.Passes(per_chunk);
    return absl::OkStatus();
  };
  int64_t done_sum = 0;
  auto overlapped = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> r,
                     comm.AllReduceAsync(buf.view(), ReduceOp::kSum));
    int done_at = chunks + 1;
    for (int c = 0; c < chunks; ++c) {
      compute.Passes(per_chunk);
      if (done_at > chunks) {
        ASSIGN_OR_RETURN(const bool done, r->Test());
        if (done) done_at = c + 1;
      }
    }
    RETURN_IF_ERROR(r->Wait());
    done_sum += done_at;
    return absl::OkStatus();
  };
  auto async_alone = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> r,
                     comm.AllReduceAsync(buf.view(), ReduceOp::kSum));
    return r->Wait();
  };
  auto serial = [&]() -> absl::Status {
    RETURN_IF_ERROR(compute_all());
    return all_reduce();
  };
  ASSIGN_OR_RETURN(
      const std::vector<double> medians,
      MedianSecondsInTurns(comm, {all_reduce, async_alone, compute_all, serial, overlapped},
                           [&] { done_sum = 0; }));
  row.comm = medians[0];
  row.async = medians[1];
  row.compute = medians[2];
  row.serial = medians[3];
  row.overlap = medians[4];
  row.done_at = static_cast<double>(done_sum) / FLAGS_iters;
  return row;
}

absl::Status RunOverlap(Communicator& comm, DType dtype, Device dev, bool print) {
  const int64_t es = DTypeSize(dtype);
  if (FLAGS_overlap_chunks < 1) return absl::InvalidArgumentError("--overlap_chunks must be >= 1");
  if (print) {
    std::printf("#\n# overlap: all-reduce (sum) + host compute in %d chunks, serial vs async\n",
                FLAGS_overlap_chunks);
    std::printf("# %10s %10s %10s %11s %11s %11s %11s %9s %8s %8s %7s\n", "size(B)", "comm(us)",
                "async(us)", "compute(us)", "serial(us)", "overlap(us)", "ideal(us)", "ser/ovl",
                "done@", "passes", "#wrong");
  }
  for (absl::string_view mib_text : absl::StrSplit(FLAGS_overlap_mib, ',')) {
    double mib = 0;
    if (!absl::SimpleAtod(mib_text, &mib) || mib <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--overlap_mib: '", mib_text, "' is not a positive number"));
    }
    const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(mib * (1 << 20)) / es);
    ASSIGN_OR_RETURN(OverlapRow row, BenchOverlap(comm, count, dtype, dev));
    int64_t wrong = row.wrong;
    RETURN_IF_ERROR(comm.AllReduce(TensorView(&wrong, Shape{1}, DType::kI64), ReduceOp::kSum));
    if (print) {
      std::printf("  %10lld %10.1f %10.1f %11.1f %11.1f %11.1f %11.1f %9.2f %8.1f %8lld %7lld\n",
                  static_cast<long long>(row.bytes), row.comm * 1e6, row.async * 1e6,
                  row.compute * 1e6, row.serial * 1e6, row.overlap * 1e6,
                  std::max(row.comm, row.compute) * 1e6, row.serial / row.overlap, row.done_at,
                  static_cast<long long>(row.passes_per_chunk), static_cast<long long>(wrong));
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::Status Run(Communicator& world, Communicator& comm, Device dev, DType dtype,
                 const std::string& host) {
  const int n = comm.size();
  const bool print = world.rank() == 0;
  const int64_t es = DTypeSize(dtype);
  if (print) {
    std::printf("# comm_bench: backend %s, %d ranks, device %s, dtype %s, iters %d, warmup %d\n",
                std::string(comm.backend()).c_str(), n, dev.ToString().c_str(),
                std::string(DTypeName(dtype)).c_str(), FLAGS_iters, FLAGS_warmup);
    std::printf("# rank 0 on %s; %s\n", host.c_str(), cuda::Describe().c_str());
  }
  for (absl::string_view op : absl::StrSplit(FLAGS_ops, ',')) {
    if (op == "overlap") {
      RETURN_IF_ERROR(RunOverlap(comm, dtype, dev, print));
      continue;
    }
    const bool async = op == "all_reduce_async";
    const bool reduce = op == "all_reduce" || async;
    if (!reduce && op != "all_gather") {
      return absl::InvalidArgumentError(
          absl::StrCat("--ops: unknown collective '", op,
                       "' (expected all_reduce, all_reduce_async, all_gather, overlap)"));
    }
    const double bus_factor = reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
    if (print) {
      std::printf("#\n# %s%s\n", std::string(op).c_str(),
                  async    ? " (sum; AllReduceAsync, then Wait at once)"
                  : reduce ? " (sum)"
                           : "");
      std::printf("# %12s %12s %6s %12s %12s %12s %8s\n", "size(B)", "count", "type", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    for (int64_t bytes = FLAGS_min_bytes; bytes <= FLAGS_max_bytes; bytes *= FLAGS_step_factor) {
      // Elements per rank: all of the buffer for all-reduce, a 1/n share for all-gather.
      const int64_t count = reduce ? bytes / es : bytes / (es * n);
      if (count == 0) continue;  // Smaller than one element per rank.
      ASSIGN_OR_RETURN(Row row, reduce ? BenchAllReduce(comm, count, dtype, dev,
                                                        async ? Call::kAsync : Call::kBlocking)
                                       : BenchAllGather(comm, count, dtype, dev));
      const double algbw = row.bytes / row.seconds * 1e-9;
      int64_t wrong = row.wrong;
      RETURN_IF_ERROR(comm.AllReduce(TensorView(&wrong, Shape{1}, DType::kI64), ReduceOp::kSum));
      if (print) {
        std::printf("  %12lld %12lld %6s %12.2f %12.3f %12.3f %8lld\n",
                    static_cast<long long>(row.bytes), static_cast<long long>(row.count),
                    std::string(DTypeName(dtype)).c_str(), row.seconds * 1e6, algbw,
                    algbw * bus_factor, static_cast<long long>(wrong));
        std::fflush(stdout);
      }
      if (FLAGS_step_factor < 2) break;
    }
  }
  return absl::OkStatus();
}

absl::Status Main(const MpiProcess& p) {
  ASSIGN_OR_RETURN(DType dtype, ParseDType(FLAGS_dtype));
  ASSIGN_OR_RETURN(Device dev, ParseDevice(FLAGS_device));
  if (dev.is_cuda()) {
    const int count = cuda::DeviceCount();
    if (count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=cuda but ", cuda::Describe(), "; use --device=cpu"));
    }
    dev = Device::Cuda(p.local_rank % count);
  }
  if (FLAGS_min_bytes < 1 || FLAGS_max_bytes < FLAGS_min_bytes || FLAGS_iters < 1 ||
      FLAGS_warmup < 0) {
    return absl::InvalidArgumentError(
        "need 1 <= --min_bytes <= --max_bytes, --iters >= 1, --warmup >= 0");
  }
  Communicator& world = p.world;
  if (FLAGS_backend == "mpi") return Run(world, world, dev, dtype, p.host_name);
  if (FLAGS_backend == "nccl") {
    if (!dev.is_cuda()) {
      return absl::InvalidArgumentError("--backend=nccl needs --device=cuda");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl,
                     CreateNcclCommunicator(world, dev.index, NcclOptions(), "world"));
    return Run(world, *nccl, dev, dtype, p.host_name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend=", FLAGS_backend, ": expected mpi or nccl"));
}

}  // namespace
}  // namespace comm
}  // namespace mt

int main(int argc, char** argv) {
  return mt::comm::MpiMain(
      argc, argv, {"comm_bench", "collective bandwidth benchmark; launch with mpirun -np N"},
      [](int) { return absl::OkStatus(); },
      [](const mt::comm::MpiProcess& p) -> absl::StatusOr<int> {
        RETURN_IF_ERROR(mt::comm::Main(p));
        return 0;
      });
}
