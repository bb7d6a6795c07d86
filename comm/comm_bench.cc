// Collective benchmark in the style of nccl-tests: time per call, algorithm bandwidth and bus
// bandwidth of all-reduce (sum) and all-gather over message sizes, for one backend.
//
//   mpirun -np 4 bazel-bin/comm/comm_bench [--backend=mpi|nccl] [--device=cpu|cuda]
//       [--min_bytes=8] [--max_bytes=67108864] [--step_factor=2] [--iters=20] [--warmup=5]
//       [--dtype=f32] [--ops=all_reduce,all_gather]
//
// Definitions (as nccl-tests): `size` is the whole buffer in bytes (all-reduce: the reduced
// buffer; all-gather: the gathered output, each rank contributing size / n). time is the mean per
// call over --iters calls after --warmup, the maximum over ranks. algbw = size / time;
// busbw = algbw * 2(n-1)/n for all-reduce and algbw * (n-1)/n for all-gather, the rate each link
// must sustain, comparable with the hardware's bandwidth. #wrong counts wrong elements in a check
// made before timing (all-reduce of rank+1 everywhere; all-gather of rank+1 per block).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "core/cuda_device.h"
#include "core/dtype.h"
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
DEFINE_string(ops, "all_reduce,all_gather", "Comma-separated: all_reduce, all_gather.");

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
  if (t.device.is_cpu()) {
    std::memcpy(t.data, host.data(), t.nbytes());
    return absl::OkStatus();
  }
  return cuda::Memcpy(t.data, host.data(), t.nbytes(), cuda::CopyKind::kHostToDevice);
}

// The elements of t (host or device) as doubles.
absl::StatusOr<std::vector<double>> Read(const TensorView& t) {
  Tensor host = Tensor::Host(t.shape, t.dtype);
  if (t.device.is_cpu()) {
    std::memcpy(host.data(), t.data, t.nbytes());
  } else {
    RETURN_IF_ERROR(cuda::Memcpy(host.data(), t.data, t.nbytes(), cuda::CopyKind::kDeviceToHost));
  }
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

// One size of all-reduce: `count` elements per rank.
absl::StatusOr<Row> BenchAllReduce(Communicator& comm, int64_t count, DType dtype, Device dev) {
  const int n = comm.size();
  ASSIGN_OR_RETURN(Tensor buf, Alloc(count, dtype, dev));
  Row row;
  row.count = count;
  row.bytes = count * static_cast<int64_t>(DTypeSize(dtype));
  RETURN_IF_ERROR(FillValue(buf.view(), comm.rank() + 1));
  RETURN_IF_ERROR(comm.AllReduce(buf.view(), ReduceOp::kSum));
  ASSIGN_OR_RETURN(std::vector<double> got, Read(buf.view()));
  const double want = n * (n + 1) / 2.0;
  for (double v : got) row.wrong += v != want;
  ASSIGN_OR_RETURN(row.seconds,
                   Time(comm, [&] { return comm.AllReduce(buf.view(), ReduceOp::kSum); }));
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
    const bool reduce = op == "all_reduce";
    if (!reduce && op != "all_gather") {
      return absl::InvalidArgumentError(absl::StrCat("--ops: unknown collective '", op, "'"));
    }
    const double bus_factor = reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
    if (print) {
      std::printf("#\n# %s%s\n", std::string(op).c_str(), reduce ? " (sum)" : "");
      std::printf("# %12s %12s %6s %12s %12s %12s %8s\n", "size(B)", "count", "type", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    for (int64_t bytes = FLAGS_min_bytes; bytes <= FLAGS_max_bytes; bytes *= FLAGS_step_factor) {
      // Elements per rank: all of the buffer for all-reduce, a 1/n share for all-gather.
      const int64_t count = reduce ? bytes / es : bytes / (es * n);
      if (count == 0) continue;  // Smaller than one element per rank.
      ASSIGN_OR_RETURN(Row row, reduce ? BenchAllReduce(comm, count, dtype, dev)
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

absl::Status Main(MpiRuntime& runtime) {
  ASSIGN_OR_RETURN(DType dtype, ParseDType(FLAGS_dtype));
  ASSIGN_OR_RETURN(Device dev, ParseDevice(FLAGS_device));
  if (dev.is_cuda()) {
    const int count = cuda::DeviceCount();
    if (count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=cuda but ", cuda::Describe(), "; use --device=cpu"));
    }
    dev = Device::Cuda(runtime.local_rank() % count);
  }
  if (FLAGS_min_bytes < 1 || FLAGS_max_bytes < FLAGS_min_bytes || FLAGS_iters < 1 ||
      FLAGS_warmup < 0) {
    return absl::InvalidArgumentError(
        "need 1 <= --min_bytes <= --max_bytes, --iters >= 1, --warmup >= 0");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, runtime.World());
  if (FLAGS_backend == "mpi") return Run(*world, *world, dev, dtype, runtime.host_name());
  if (FLAGS_backend == "nccl") {
    if (!dev.is_cuda()) {
      return absl::InvalidArgumentError("--backend=nccl needs --device=cuda");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl,
                     CreateNcclCommunicator(*world, dev.index, NcclOptions(), "world"));
    return Run(*world, *nccl, dev, dtype, runtime.host_name());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend=", FLAGS_backend, ": expected mpi or nccl"));
}

}  // namespace
}  // namespace comm
}  // namespace mt

int main(int argc, char** argv) {
  gflags::SetUsageMessage("collective bandwidth benchmark; launch with mpirun -np N");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto runtime = mt::comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) mt::comm::MpiRuntime::Abort(runtime.status());
  absl::Status s = mt::comm::Main(**runtime);
  if (!s.ok()) mt::comm::MpiRuntime::Abort(s);
  return 0;
}
