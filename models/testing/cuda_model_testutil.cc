#include "models/testing/cuda_model_testutil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/ops/testutil.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

namespace mt {
namespace models {
namespace testing {

absl::StatusOr<std::unique_ptr<GpuContext>> MakeGpuContext() {
  if (cuda::DeviceCount() == 0) return absl::FailedPreconditionError(cuda::Describe());
  auto g = std::make_unique<GpuContext>();
  absl::StatusOr<std::unique_ptr<cuda::DeviceContext>> dc = cuda::DeviceContext::Create(0);
  if (!dc.ok()) return dc.status();
  g->device_context = std::move(dc).value();
  g->exec.cuda = g->device_context.get();
  g->exec.device = Device::Cuda(0);
  return g;
}

Tensor NonTrivialMasters(const nn::ParameterStore& store, uint64_t seed) {
  absl::StatusOr<Tensor> flat = store.CopyValuesToHost(ExecContext{});
  CHECK(flat.ok()) << flat.status();
  for (int i = 0; i < store.size(); ++i) {
    if (store.spec(i).init == nn::Init::kNormal) continue;
    Tensor r = ::mt::testing::RandomTensor(store.value(i).shape, DType::kF32, seed + i, 0.5, 1.5);
    std::memcpy(static_cast<float*>(flat->data()) + store.offset(i), r.data(), r.nbytes());
  }
  return std::move(flat).value();
}

double RelativeError(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  if (n == 0) return d == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(d / n);
}

namespace {

std::vector<std::vector<double>> Split(const nn::ParameterStore& store, const Tensor& flat,
                                       double scale) {
  std::vector<std::vector<double>> out;
  for (int i = 0; i < store.size(); ++i) {
    const TensorView v(static_cast<float*>(flat.data()) + store.offset(i), store.value(i).shape,
                       DType::kF32);
    std::vector<double> d = ::mt::testing::ToDoubles(v);
    for (double& x : d) x /= scale;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

std::vector<std::vector<double>> HostGrads(const nn::ParameterStore& got,
                                           const ExecContext& got_ctx, double scale) {
  absl::StatusOr<Tensor> flat = got.CopyGradsToHost(got_ctx);
  EXPECT_TRUE(flat.ok()) << flat.status();
  if (!flat.ok()) return {};
  return Split(got, *flat, scale);
}

std::vector<std::vector<double>> HostValues(const nn::ParameterStore& got,
                                            const ExecContext& got_ctx) {
  absl::StatusOr<Tensor> flat = got.CopyValuesToHost(got_ctx);
  EXPECT_TRUE(flat.ok()) << flat.status();
  if (!flat.ok()) return {};
  return Split(got, *flat, 1.0);
}

void ExpectGradsClose(const nn::ParameterStore& got, const ExecContext& got_ctx, double got_scale,
                      const nn::ParameterStore& want, double want_scale, double bound,
                      const std::string& what, const std::vector<std::string>& skip) {
  const ExecContext host;
  const std::vector<std::vector<double>> g = HostGrads(got, got_ctx, got_scale);
  const std::vector<std::vector<double>> w = HostGrads(want, host, want_scale);
  ASSERT_EQ(g.size(), w.size()) << what;
  double largest = 0;
  for (const std::vector<double>& t : w) {
    double n = 0;
    for (double x : t) n += x * x;
    largest = std::max(largest, std::sqrt(n));
  }
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string& name = want.spec(static_cast<int>(i)).name;
    ASSERT_EQ(g[i].size(), w[i].size()) << name;
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    double d = 0, n = 0;
    for (size_t j = 0; j < w[i].size(); ++j) {
      d += (g[i][j] - w[i][j]) * (g[i][j] - w[i][j]);
      n += w[i][j] * w[i][j];
    }
    const double ref_norm = std::max(std::sqrt(n), 1e-6 * largest);
    const double e = ref_norm == 0 ? (d == 0 ? 0.0 : std::numeric_limits<double>::infinity())
                                   : std::sqrt(d) / ref_norm;
    EXPECT_LE(e, bound) << what << ": " << name;
    if (e >= worst) {
      worst = e;
      worst_name = name;
    }
  }
  std::printf("%s: worst relative gradient error %.3g (%s), bound %.3g\n", what.c_str(), worst,
              worst_name.c_str(), bound);
}

}  // namespace testing
}  // namespace models
}  // namespace mt
