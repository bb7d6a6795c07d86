// GEMM throughput of the CPU backends (Eigen, OpenBLAS, oneDNN, and the packed GEMM where it runs)
// in one dtype (--dtype: f32, bf16 or f16 operands and C) on a square product and on the GEMMs of
// one GPT-2 transformer layer (forward and backward) at hidden 768 and 1536 with B*T = --tokens
// tokens. Prints a table of GFLOP/s (best of --reps after one warm-up, the backends taking turns),
// the peak rate and each backend's rate over OpenBLAS's, after the OpenBLAS kernel and the routes
// kDefault takes (gemm.h). Results: docs/perf/gemm.md.
//
//   bazel run -c opt //core/ops:gemm_bench -- --threads=2 --reps=3
//   bazel run -c opt //core/ops:gemm_bench -- --threads=2 --dtype=bf16 --tokens=256
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/onednn.h"
#include "core/openblas.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_int32(threads, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
             "CPU threads per GEMM (default: hardware concurrency)");
DEFINE_int32(reps, 3, "timed repetitions per shape and backend, after one warm-up; best is kept");
DEFINE_string(dtype, "f32", "operand and output dtype: f32, bf16 or f16");
DEFINE_int64(tokens, 8 * 1024, "B*T of the layer shapes (GPT-2 124M at B4 T64 is 256)");

namespace mt {
namespace ops {
namespace {

struct BenchShape {
  std::string name;  // What the product is in the layer.
  int64_t m, n, k;
  Transpose ta, tb;
};

// One transformer layer: Y = X W for QKV [h, 3h], attention output [h, h], MLP up [h, 4h] and
// MLP down [4h, h] (weights stored [in, out]); backward dX = dY W^T and dW = X^T dY.
std::vector<BenchShape> LayerShapes(int64_t h, int64_t tokens) {
  struct Linear {
    const char* name;
    int64_t in, out;
  };
  const Linear linears[] = {
      {"qkv", h, 3 * h}, {"attn-out", h, h}, {"mlp-up", h, 4 * h}, {"mlp-down", 4 * h, h}};
  std::vector<BenchShape> shapes;
  for (const Linear& l : linears) {
    const std::string prefix = absl::StrCat("h", h, " ", l.name);
    shapes.push_back(
        {absl::StrCat(prefix, " Y=X W"), tokens, l.out, l.in, Transpose::kNo, Transpose::kNo});
    shapes.push_back(
        {absl::StrCat(prefix, " dX=dY W^T"), tokens, l.in, l.out, Transpose::kNo, Transpose::kYes});
    shapes.push_back(
        {absl::StrCat(prefix, " dW=X^T dY"), l.in, l.out, tokens, Transpose::kYes, Transpose::kNo});
  }
  return shapes;
}

void Fill(const Tensor& t, uint64_t seed) {
  float* p = t.data_as<float>();
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
  }
}

using Clock = std::chrono::steady_clock;

// Best wall time per backend of --reps runs, after one warm-up run each. The backends take turns
// within each repetition, so that load from other processes hits both alike.
std::vector<double> BestSeconds(const ExecContext& ctx, const BenchShape& s, DType dtype,
                                const std::vector<CpuGemmBackend>& backends) {
  const bool ta = s.ta == Transpose::kYes, tb = s.tb == Transpose::kYes;
  Tensor a32 = Tensor::Host({ta ? s.k : s.m, ta ? s.m : s.k}, DType::kF32);
  Tensor b32 = Tensor::Host({tb ? s.n : s.k, tb ? s.k : s.n}, DType::kF32);
  Fill(a32, 1);
  Fill(b32, 2);
  Tensor a = Tensor::Host(a32.shape(), dtype), b = Tensor::Host(b32.shape(), dtype);
  CHECK(Convert(ctx, a32.view(), a.view()).ok());
  CHECK(Convert(ctx, b32.view(), b.view()).ok());
  Tensor c = Tensor::Host({s.m, s.n}, dtype);
  std::vector<double> best(backends.size(), 1e30);
  for (int rep = 0; rep <= FLAGS_reps; ++rep) {
    for (size_t i = 0; i < backends.size(); ++i) {
      GemmOptions options;
      options.transpose_a = s.ta;
      options.transpose_b = s.tb;
      options.cpu_backend = backends[i];
      const Clock::time_point start = Clock::now();
      const absl::Status status = Gemm(ctx, a.view(), b.view(), c.view(), options);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      CHECK(status.ok()) << status;
      if (rep > 0) best[i] = std::min(best[i], seconds);
    }
  }
  return best;
}

absl::StatusOr<DType> BenchDType(const std::string& name) {
  const absl::StatusOr<DType> dtype = ParseDType(name);
  if (dtype.ok() && IsFloating(*dtype)) return *dtype;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype must be f32, bf16 or f16, got '", name, "'"));
}

absl::Status Main() {
  if (FLAGS_threads < 1 || FLAGS_reps < 1 || FLAGS_tokens < 1) {
    return absl::InvalidArgumentError("--threads, --reps and --tokens must be at least 1");
  }
  const absl::StatusOr<DType> parsed = BenchDType(FLAGS_dtype);
  if (!parsed.ok()) return parsed.status();
  const DType dtype = *parsed;
  ThreadPool pool(FLAGS_threads);
  ExecContext ctx;
  ctx.pool = &pool;
  std::printf(
      "gemm_bench: %s row-major C[M,N] = op(A)[M,K] op(B)[K,N]; threads=%d reps=%d "
      "(best of reps after 1 warm-up, backends alternating)\n",
      FLAGS_dtype.c_str(), FLAGS_threads, FLAGS_reps);
  std::printf("blas: %s\n", DescribeBlas().c_str());
  std::printf("onednn: %s\n", DescribeOneDnn(LoadOneDnn()).c_str());
  std::printf("kDefault routes: %s\n", DescribeCpuGemm().c_str());
  std::printf(
      "tokens B*T = %lld; weights stored [in, out]: Y=X W is NN, dX=dY W^T is NT, "
      "dW=X^T dY is TN\n\n",
      static_cast<long long>(FLAGS_tokens));

  std::vector<BenchShape> shapes = {
      {"square 2048", 2048, 2048, 2048, Transpose::kNo, Transpose::kNo}};
  for (int64_t h : {768, 1536}) {
    for (BenchShape& s : LayerShapes(h, FLAGS_tokens)) shapes.push_back(std::move(s));
  }
  std::vector<CpuGemmBackend> backends = {CpuGemmBackend::kEigen, CpuGemmBackend::kOpenBlas};
  if (LoadOneDnn().status.ok()) backends.push_back(CpuGemmBackend::kOneDnn);
  if (PackedGemmAvailable()) backends.push_back(CpuGemmBackend::kPacked);
  const size_t nb = backends.size();
  std::printf("%-28s %6s %6s %6s %3s", "shape", "M", "N", "K", "op");
  for (CpuGemmBackend b : backends) std::printf(" %9s GF/s", CpuGemmBackendName(b));
  std::printf("  (each / openblas)\n");
  double total_flops = 0, peak = 0;
  std::vector<double> total_seconds(nb, 0.0);
  const char* peak_backend = "";
  auto row = [&](const std::string& name, const std::vector<double>& rate) {
    std::printf("%-28s", name.c_str());
    for (double r : rate) std::printf(" %14.1f", r);
    std::printf("  ");
    for (double r : rate) std::printf(" %.2f", r / rate[1]);
    std::printf("\n");
  };
  for (const BenchShape& s : shapes) {
    const double flops = 2.0 * s.m * s.n * s.k;
    const std::vector<double> seconds = BestSeconds(ctx, s, dtype, backends);
    std::vector<double> rate(nb);
    const bool square = s.name.rfind("square", 0) == 0;  // A reference point, not in the totals.
    for (size_t i = 0; i < nb; ++i) {
      rate[i] = flops / seconds[i] * 1e-9;
      if (!square) total_seconds[i] += seconds[i];
      if (rate[i] > peak) {
        peak = rate[i];
        peak_backend = CpuGemmBackendName(backends[i]);
      }
    }
    if (!square) total_flops += flops;
    row(absl::StrFormat("%-28s %6lld %6lld %6lld %c%c", s.name, static_cast<long long>(s.m),
                        static_cast<long long>(s.n), static_cast<long long>(s.k),
                        s.ta == Transpose::kYes ? 'T' : 'N', s.tb == Transpose::kYes ? 'T' : 'N'),
        rate);
    std::fflush(stdout);
  }
  std::vector<double> layer_rate(nb);
  for (size_t i = 0; i < nb; ++i) layer_rate[i] = total_flops / total_seconds[i] * 1e-9;
  row(absl::StrFormat("%-56s", "GPT-2 layers (all 24 GEMMs)"), layer_rate);
  std::printf("\npeak %s GEMM rate: %.1f GFLOP/s (%s)\n", FLAGS_dtype.c_str(), peak, peak_backend);
  std::printf("eigen/openblas: %.2f (total time of the GPT-2 layer GEMMs, %.0f GFLOP)\n",
              layer_rate[0] / layer_rate[1], total_flops * 1e-9);
  for (size_t i = 2; i < nb; ++i) {
    std::printf("%s/openblas: %.2f (the same)\n", CpuGemmBackendName(backends[i]),
                layer_rate[i] / layer_rate[1]);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ops
}  // namespace mt

int main(int argc, char** argv) {
  return mt::ToolMain("gemm_bench",
                      "GEMM throughput of the Eigen, OpenBLAS, oneDNN and packed CPU backends",
                      argc, argv, mt::ops::Main);
}
