// Whole-tensor reductions on the GPU against the CPU backend: f64 accumulation on both sides, so
// sums agree to f64 rounding and Max exactly; NaN and empty tensors behave alike. Skipped without
// a GPU.
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/reduce.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::FromDoubles;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::RandomTensor;
using ::mt::testing::Side;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;

using Reduction = absl::StatusOr<double> (*)(const ExecContext&, const TensorView&);

class ReduceCudaTest : public CudaOpTest {
 protected:
  // The reduction of x on both backends: EXPECTs |gpu - cpu| <= tol (equality when tol is 0,
  // which also holds for infinities).
  void ExpectMatches(const char* name, Reduction fn, const Mirrored& x, double tol) {
    SCOPED_TRACE(name);
    const absl::StatusOr<double> cpu = fn(cpu_, x[Side::kCpu]);
    const absl::StatusOr<double> gpu = fn(gpu_, x[Side::kGpu]);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    if (tol == 0) {
      EXPECT_EQ(*gpu, *cpu);
    } else {
      EXPECT_NEAR(*gpu, *cpu, tol);
    }
  }
};

TEST_F(ReduceCudaTest, MatchesCpu) {
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{17}, int64_t{129}, int64_t{16385},
                      (int64_t{1} << 20) + 7}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " n ", n));
      const Mirrored x = Mirror(RandomTensor({n}, dt, seed++, -2.0, 1.0));
      double abs_sum = 0, sq_sum = 0;
      for (double v : ToDoubles(x.cpu().view())) {
        abs_sum += std::fabs(v);
        sq_sum += v * v;
      }
      // Each side is within n 2^-53 of the exact sum of |terms|.
      const double eps = std::ldexp(1.0, -53) * 2.0 * (n + 2);
      ExpectMatches("Sum", &Sum, x, eps * abs_sum);
      ExpectMatches("SumOfSquares", &SumOfSquares, x, eps * sq_sum);
      ExpectMatches("L2Norm", &L2Norm, x, eps * std::sqrt(sq_sum) + 1e-300);
      ExpectMatches("Max", &Max, x, 0);  // -inf for n = 0.
    }
  }
}

TEST_F(ReduceCudaTest, NaNPropagates) {
  std::vector<double> v(5000, 1.0);
  v[4321] = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = ToDevice(FromDoubles({5000}, DType::kBF16, v));
  for (Reduction fn : {&Sum, &Max, &SumOfSquares, &L2Norm}) {
    absl::StatusOr<double> r = fn(gpu_, x.view());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::isnan(*r));
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
