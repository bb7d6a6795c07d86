// f32 GEMM throughput of the two CPU backends (Eigen, OpenBLAS) on a square product and on the
// GEMMs of one GPT-2 transformer layer (forward and backward) at hidden 768 and 1536 with
// B*T = 8 * 1024 tokens. Prints a table of GFLOP/s (best of --reps after one warm-up), the peak
// rate and the Eigen/OpenBLAS ratio, after the OpenBLAS kernel in use (core/openblas.h). Results:
// docs/perf/gemm.md.
//
//   bazel run -c opt //core/ops:gemm_bench -- --threads=2 --reps=3
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/exec_context.h"
#include "core/openblas.h"
#include "core/ops/gemm.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_int32(threads, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
             "CPU threads per GEMM (default: hardware concurrency)");
DEFINE_int32(reps, 3, "timed repetitions per shape and backend, after one warm-up; best is kept");

namespace mt {
namespace ops {
namespace {

constexpr int64_t kTokens = 8 * 1024;  // B * T.

struct BenchShape {
  std::string name;  // What the product is in the layer.
  int64_t m, n, k;
  Transpose ta, tb;
};

// One transformer layer: Y = X W for QKV [h, 3h], attention output [h, h], MLP up [h, 4h] and
// MLP down [4h, h] (weights stored [in, out]); backward dX = dY W^T and dW = X^T dY.
std::vector<BenchShape> LayerShapes(int64_t h) {
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
        {absl::StrCat(prefix, " Y=X W"), kTokens, l.out, l.in, Transpose::kNo, Transpose::kNo});
    shapes.push_back({absl::StrCat(prefix, " dX=dY W^T"), kTokens, l.in, l.out, Transpose::kNo,
                      Transpose::kYes});
    shapes.push_back({absl::StrCat(prefix, " dW=X^T dY"), l.in, l.out, kTokens, Transpose::kYes,
                      Transpose::kNo});
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
std::vector<double> BestSeconds(const ExecContext& ctx, const BenchShape& s,
                                const std::vector<CpuGemmBackend>& backends) {
  const bool ta = s.ta == Transpose::kYes, tb = s.tb == Transpose::kYes;
  Tensor a = Tensor::Host({ta ? s.k : s.m, ta ? s.m : s.k}, DType::kF32);
  Tensor b = Tensor::Host({tb ? s.n : s.k, tb ? s.k : s.n}, DType::kF32);
  Tensor c = Tensor::Host({s.m, s.n}, DType::kF32);
  Fill(a, 1);
  Fill(b, 2);
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

absl::Status Main() {
  if (FLAGS_threads < 1 || FLAGS_reps < 1) {
    return absl::InvalidArgumentError("--threads and --reps must be at least 1");
  }
  ThreadPool pool(FLAGS_threads);
  ExecContext ctx;
  ctx.pool = &pool;
  std::printf(
      "gemm_bench: f32 row-major C[M,N] = op(A)[M,K] op(B)[K,N]; threads=%d reps=%d "
      "(best of reps after 1 warm-up, backends alternating); kDefault = %s\n",
      FLAGS_threads, FLAGS_reps, CpuGemmBackendName(CpuGemmBackend::kDefault));
  std::printf("blas: %s\n", DescribeBlas().c_str());
  std::printf(
      "tokens B*T = %lld; weights stored [in, out]: Y=X W is NN, dX=dY W^T is NT, "
      "dW=X^T dY is TN\n\n",
      static_cast<long long>(kTokens));

  std::vector<BenchShape> shapes = {
      {"square 2048", 2048, 2048, 2048, Transpose::kNo, Transpose::kNo}};
  for (int64_t h : {768, 1536}) {
    for (BenchShape& s : LayerShapes(h)) shapes.push_back(std::move(s));
  }
  const std::vector<CpuGemmBackend> backends = {CpuGemmBackend::kEigen, CpuGemmBackend::kOpenBlas};

  std::printf("%-28s %6s %6s %6s %3s %13s %13s %14s\n", "shape", "M", "N", "K", "op", "eigen GF/s",
              "openblas GF/s", "eigen/openblas");
  double total_flops = 0;
  double total_seconds[2] = {0, 0};
  double peak = 0;
  const char* peak_backend = "";
  for (const BenchShape& s : shapes) {
    const double flops = 2.0 * s.m * s.n * s.k;
    const std::vector<double> seconds = BestSeconds(ctx, s, backends);
    double rate[2];
    for (int i = 0; i < 2; ++i) {
      rate[i] = flops / seconds[i] * 1e-9;
      // The square product is a reference point; the layer totals cover the GPT-2 shapes only.
      if (s.name.rfind("square", 0) != 0) total_seconds[i] += seconds[i];
      if (rate[i] > peak) {
        peak = rate[i];
        peak_backend = CpuGemmBackendName(backends[i]);
      }
    }
    if (s.name.rfind("square", 0) != 0) total_flops += flops;
    std::printf("%-28s %6lld %6lld %6lld %c%c %13.1f %13.1f %14.2f\n", s.name.c_str(),
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), s.ta == Transpose::kYes ? 'T' : 'N',
                s.tb == Transpose::kYes ? 'T' : 'N', rate[0], rate[1], rate[0] / rate[1]);
    std::fflush(stdout);
  }
  const double eigen_rate = total_flops / total_seconds[0] * 1e-9;
  const double openblas_rate = total_flops / total_seconds[1] * 1e-9;
  std::printf("%-28s %6s %6s %6s %3s %13.1f %13.1f %14.2f\n", "GPT-2 layers (all 24 GEMMs)", "", "",
              "", "", eigen_rate, openblas_rate, eigen_rate / openblas_rate);
  std::printf("\npeak f32 GEMM rate: %.1f GFLOP/s (%s)\n", peak, peak_backend);
  std::printf("eigen/openblas: %.2f (total time of the GPT-2 layer GEMMs, %.0f GFLOP)\n",
              eigen_rate / openblas_rate, total_flops * 1e-9);
  return absl::OkStatus();
}

}  // namespace
}  // namespace ops
}  // namespace mt

int main(int argc, char** argv) {
  return mt::ToolMain("gemm_bench", "f32 GEMM throughput of the Eigen and OpenBLAS CPU backends",
                      argc, argv, mt::ops::Main);
}
