// train_step_bench's shared helpers (train_step_bench.h).
#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/openblas.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/simd.h"
#include "core/status.h"
#include "glog/logging.h"
#include "jobs/bench/train_step_bench.h"

namespace mt {
namespace jobs {
namespace bench {

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

int64_t GemmRateSize(int flag, bool gpu) { return flag > 0 ? flag : (gpu ? 8192 : 2048); }

double GemmGflops(const mt::ExecContext& ec, int64_t n, mt::DType dtype) {
  mt::Tensor a32 = mt::Tensor::Zeros({n, n}, mt::DType::kF32),
             b32 = mt::Tensor::Zeros({n, n}, mt::DType::kF32);
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n * n; ++i) {
    a32.data_as<float>()[i] = static_cast<float>(rng() % 100) / 100.0f;
    b32.data_as<float>()[i] = static_cast<float>(rng() % 100) / 100.0f;
  }
  mt::Tensor a = mt::Tensor::Zeros({n, n}, dtype), b = mt::Tensor::Zeros({n, n}, dtype),
             c = mt::Tensor::Zeros({n, n}, dtype);
  CHECK(mt::ops::Convert(ec, a32.view(), a.view()).ok());
  CHECK(mt::ops::Convert(ec, b32.view(), b.view()).ok());
  double best = 1e30;
  for (int r = 0; r < 11; ++r) {
    auto t = std::chrono::steady_clock::now();
    CHECK(mt::ops::Gemm(ec, a.view(), b.view(), c.view()).ok());
    if (r > 0) best = std::min(best, Seconds(t));
  }
  return 2.0 * n * n * n / best / 1e9;
}

double GpuGemmGflops(const mt::ExecContext& ec, int64_t n) {
  auto host = [&](uint32_t seed) {
    mt::Tensor h = mt::Tensor::Host({n, n}, mt::DType::kF32);
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < n * n; ++i) h.data_as<float>()[i] = (rng() % 2001) / 1000.0f - 1.0f;
    auto d = mt::CopyToDevice(ec, h.view());
    CHECK(d.ok()) << d.status();
    auto b = mt::Alloc(ec, {n, n}, mt::DType::kBF16);
    CHECK(b.ok()) << b.status();
    CHECK(mt::ops::Convert(ec, d->view(), b->view()).ok());
    return std::move(*b);
  };
  mt::Tensor a = host(1), b = host(2);
  auto c = mt::Alloc(ec, {n, n}, mt::DType::kBF16);
  CHECK(c.ok()) << c.status();
  double best = 1e30;
  for (int r = 0; r < 23; ++r) {
    CHECK(mt::cuda::Synchronize(ec.device.index).ok());
    auto t = std::chrono::steady_clock::now();
    CHECK(mt::ops::Gemm(ec, a.view(), b.view(), c->view()).ok());
    CHECK(mt::cuda::Synchronize(ec.device.index).ok());
    if (r >= 3) best = std::min(best, Seconds(t));
  }
  return 2.0 * n * n * n / best / 1e9;
}

absl::StatusOr<std::unique_ptr<Device>> SetUpDevice(const BenchConfig& c, int local_rank,
                                                    int local_size) {
  if (c.bf16 && c.fp16) return absl::InvalidArgumentError("--bf16 and --fp16 exclude each other");
  if (c.fp16 && c.device == DeviceType::kCuda) {
    return absl::InvalidArgumentError("--fp16: the GPU benchmark runs bf16; drop --fp16");
  }
  auto d = std::make_unique<Device>();
  d->gpu = c.device == DeviceType::kCuda;
  d->dtype = d->gpu || c.bf16 ? DType::kBF16 : (c.fp16 ? DType::kF16 : DType::kF32);
  RankExecutionOptions ro;
  ro.cuda = d->gpu;
  ro.threads = c.threads;
  ro.local_rank = local_rank;
  ro.local_size = local_size;
  ro.caching_allocator = c.caching_allocator;
  ASSIGN_OR_RETURN(d->rank, CreateRankExecution(ro));
  return d;
}

void PrintGemmRate(const BenchConfig& c, const Device& d, double gemm) {
  if (d.gpu) {
    std::printf("device: %s; bf16 GEMM rate (cuBLASLt, %lld^3, f32 accumulation): %.1f TFLOP/s\n",
                cuda::Describe().c_str(),
                static_cast<long long>(GemmRateSize(c.gemm_rate_size, true)), gemm / 1e3);
  } else {
    std::printf("blas: %s\n", DescribeBlas().c_str());
    std::printf("simd: %s\n", SimdTargetName().c_str());
    const long long n = static_cast<long long>(GemmRateSize(c.gemm_rate_size, false));
    if (d.dtype != DType::kF32) {
      std::printf("f32 GEMM rate per rank (%lld^3, %d threads): %.1f GFLOP/s\n", n, d.rank.threads,
                  d.f32_gemm);
    }
    std::printf("%s GEMM rate per rank (%lld^3, %d threads, %s): %.1f GFLOP/s\n",
                std::string(DTypeName(d.dtype)).c_str(), n, d.rank.threads,
                ops::CpuGemmRoute(d.dtype).c_str(), gemm);
  }
}

const char* RecomputeName(const BenchConfig& c) {
  const absl::StatusOr<nn::Recompute> r = c.activations.Recompute(c.recompute);
  if (!r.ok() || *r == nn::Recompute::kNo) return "no";
  return *r == nn::Recompute::kYes ? "full" : "selective";
}

std::string ModelDescription(const BenchConfig& c) {
  const models::ModelConfig& mc = c.model;
  return absl::StrFormat("model=%s architecture=%s layers=%d hidden=%d heads=%d",
                         c.model_name.empty() ? "(flags)" : c.model_name, mc.ArchitectureName(),
                         mc.num_layers, mc.hidden_size, mc.num_attention_heads);
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace bench
}  // namespace jobs
}  // namespace mt
