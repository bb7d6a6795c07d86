// Whole-tensor reductions on the GPU against the CPU backend: f64 accumulation on both sides, so
// sums agree to f64 rounding and Max exactly; NaN and empty tensors behave alike. Skipped without
// a GPU.
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/reduce.h"
#include "core/ops/testutil.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;

using ReduceCudaTest = CudaOpTest;

TEST_F(ReduceCudaTest, MatchesCpu) {
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{17}, int64_t{129},
                      int64_t{16385}, (int64_t{1} << 20) + 7}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " n ", n));
      Tensor x = RandomTensor({n}, dt, seed++, -2.0, 1.0);
      Tensor x_dev = ToDevice(x);
      double abs_sum = 0, sq_sum = 0;
      for (double v : ToDoubles(x.view())) {
        abs_sum += std::fabs(v);
        sq_sum += v * v;
      }
      // Each side is within n 2^-53 of the exact sum of |terms|.
      const double eps = std::ldexp(1.0, -53) * 2.0 * (n + 2);
      absl::StatusOr<double> cpu = Sum(cpu_, x.view()), gpu = Sum(gpu_, x_dev.view());
      ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
      EXPECT_NEAR(*gpu, *cpu, eps * abs_sum);
      cpu = SumOfSquares(cpu_, x.view());
      gpu = SumOfSquares(gpu_, x_dev.view());
      ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
      EXPECT_NEAR(*gpu, *cpu, eps * sq_sum);
      cpu = L2Norm(cpu_, x.view());
      gpu = L2Norm(gpu_, x_dev.view());
      ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
      EXPECT_NEAR(*gpu, *cpu, eps * std::sqrt(sq_sum) + 1e-300);
      cpu = Max(cpu_, x.view());
      gpu = Max(gpu_, x_dev.view());
      ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
      EXPECT_EQ(*gpu, *cpu);  // -inf for n = 0.
    }
  }
}

TEST_F(ReduceCudaTest, NaNPropagates) {
  std::vector<double> v(5000, 1.0);
  v[4321] = std::numeric_limits<double>::quiet_NaN();
  Tensor x = ToDevice(testing::FromDoubles({5000}, DType::kBF16, v));
  for (auto* fn : {&Sum, &Max, &SumOfSquares, &L2Norm}) {
    absl::StatusOr<double> r = (*fn)(gpu_, x.view());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::isnan(*r));
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
