// In-process check of the OpenBLAS kernel that //core/ops:gemm's users get: OpenBLAS was loaded
// before main() (by //core:openblas_autoload), reports the core chosen from this CPU's features
// (or the user's OPENBLAS_CORETYPE, which gemm_openblas_user_test sets), and its sgemm computes.
#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/cpu_features.h"
#include "core/openblas.h"
#include "core/ops/gemm.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

// Whether libopenblas was in the process when this file's static objects were initialised, i.e.
// before main() and before any test could load it.
const bool kLoadedBeforeMain = [] {
  void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}();

TEST(GemmOpenBlasTest, LoadedBeforeMainWithTheChosenCore) {
  EXPECT_TRUE(kLoadedBeforeMain);
  const OpenBlas& blas = LoadOpenBlas();
  ASSERT_TRUE(blas.status.ok()) << blas.status;
  EXPECT_FALSE(blas.loaded_before) << "libopenblas was loaded before the choice was made";
  std::printf("blas: %s\n", DescribeBlas().c_str());
  if (const char* user = std::getenv("OPENBLAS_CORETYPE"); user != nullptr) {
    EXPECT_EQ(blas.choice.source, BlasCoreSource::kUser);
    EXPECT_EQ(blas.user_coretype, user);
    // OpenBLAS matches the name without regard to case.
    EXPECT_EQ(strcasecmp(blas.core.c_str(), user), 0) << blas.core << " vs the user's " << user;
    return;
  }
  const CpuFeatures cpu = DetectCpuFeatures();
  const char* expected = OpenBlasCoreForFeatures(cpu);
  if (expected == nullptr) {
    EXPECT_EQ(blas.choice.source, BlasCoreSource::kOpenBlas);
    return;
  }
  EXPECT_EQ(blas.choice.source, BlasCoreSource::kCpuFeatures);
  EXPECT_EQ(blas.core, expected) << CpuFeaturesString(cpu);
  EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr) << "our setting leaked into the environment";
}

// The loaded kernel computes: an odd-sized product against float64 on 2 threads.
TEST(GemmOpenBlasTest, TheLoadedKernelMultiplies) {
  const int64_t M = 67, N = 45, K = 131;
  Tensor a = testing::RandomTensor({M, K}, DType::kF32, 1);
  Tensor b = testing::RandomTensor({K, N}, DType::kF32, 2);
  Tensor c = Tensor::Host({M, N}, DType::kF32);
  testing::WriteDoubles(std::vector<double>(M * N, std::nan("")), c.view());
  ThreadPool pool(2);
  ExecContext ctx;
  ctx.pool = &pool;
  GemmOptions options;
  options.cpu_backend = CpuGemmBackend::kOpenBlas;
  ASSERT_TRUE(Gemm(ctx, a.view(), b.view(), c.view(), options).ok());
  const std::vector<double> av = testing::ToDoubles(a.view()), bv = testing::ToDoubles(b.view());
  std::vector<double> expected(M * N, 0.0);
  double max_magnitude = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        sum += av[i * K + k] * bv[k * N + j];
        magnitude += std::fabs(av[i * K + k] * bv[k * N + j]);
      }
      expected[i * N + j] = sum;
      max_magnitude = std::max(max_magnitude, magnitude);
    }
  }
  // Any summation order: |error| <= K u sum |a b| (plus one rounding of the result).
  const double atol = (K + 1) * testing::UnitRoundoff(DType::kF32) * max_magnitude;
  EXPECT_TRUE(testing::AllClose(c.view(), expected, 0.0, atol));
}

}  // namespace
}  // namespace ops
}  // namespace mt
