// RmsNorm forward and backward on the GPU against the CPU backend: every dtype, f32 or 16-bit
// gamma, odd row counts and widths (one block per row: widths below a warp, around the block size
// and far above it). Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::UnitRoundoff;
using ::mt::testing::WithinBounds;

const double kU32 = UnitRoundoff(DType::kF32);

using RmsNormCudaTest = CudaOpTest;

TEST_F(RmsNormCudaTest, ForwardAndBackwardMatchCpu) {
  const float kEps = 1e-6f;
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType pt : {DType::kF32, dt}) {
      for (const Shape& shape : {Shape{1, 1}, Shape{3, 17}, Shape{5, 33}, Shape{2, 3, 257},
                                 Shape{33, 1536}, Shape{7, 4099}}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), " gamma ", DTypeName(pt), ShapeToString(shape)));
        const int64_t C = shape.back(), R = NumElements(shape) / C;
        Tensor x = RandomTensor(shape, dt, seed++, -2.0, 3.0);
        Tensor gamma = RandomTensor({C}, pt, seed++, -1.5, 1.5);
        Tensor dy = RandomTensor(shape, dt, seed++);
        Tensor y_cpu = Tensor::Host(shape, dt), rstd_cpu = Tensor::Host({R}, DType::kF32);
        ASSERT_TRUE(
            RmsNorm(cpu_, x.view(), gamma.view(), kEps, y_cpu.view(), rstd_cpu.view()).ok());
        Tensor x_dev = ToDevice(x), g_dev = ToDevice(gamma);
        Tensor y_dev = EmptyDevice(shape, dt), rstd_dev = EmptyDevice({R}, DType::kF32);
        absl::Status s =
            RmsNorm(gpu_, x_dev.view(), g_dev.view(), kEps, y_dev.view(), rstd_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        // Both sides sum C non-negative squares in f32 in different orders: the mean squares,
        // and so rstd and y, agree within about C u32 relative; y then rounds to its dtype.
        const double sum_tol = (C + 8) * kU32;
        const double u = dt == DType::kF32 ? 0.0 : UnitRoundoff(dt);
        EXPECT_TRUE(
            AllClose(ToHost(rstd_dev.view()).view(), ToDoubles(rstd_cpu.view()), sum_tol, 0));
        EXPECT_TRUE(AllClose(ToHost(y_dev.view()).view(), ToDoubles(y_cpu.view()), 2 * u + sum_tol,
                             dt == DType::kF16 ? std::ldexp(1.0, -24) : 0.0));

        // Backward from the CPU's rstd, so both sides start from the same statistics.
        Tensor dx_cpu = Tensor::Host(shape, dt), dg_cpu = Tensor::Host({C}, pt);
        ASSERT_TRUE(RmsNormBackward(cpu_, x.view(), gamma.view(), rstd_cpu.view(), dy.view(),
                                    dx_cpu.view(), dg_cpu.view())
                        .ok());
        Tensor r_dev = ToDevice(rstd_cpu), dy_dev = ToDevice(dy);
        Tensor dx_dev = EmptyDevice(shape, dt), dg_dev = EmptyDevice({C}, pt);
        s = RmsNormBackward(gpu_, x_dev.view(), g_dev.view(), r_dev.view(), dy_dev.view(),
                            dx_dev.view(), dg_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        // dx = rstd (g - xhat mean(g xhat)): the mean is a sum of C terms of size |g| |xhat|.
        const std::vector<double> xs = ToDoubles(x.view()), d = ToDoubles(dy.view());
        const std::vector<double> rv = ToDoubles(rstd_cpu.view());
        const double rs = *std::max_element(rv.begin(), rv.end());
        const double xhat = 3.0 * rs, g = 1.5;
        EXPECT_TRUE(AllClose(ToHost(dx_dev.view()).view(), ToDoubles(dx_cpu.view()), 2 * u,
                             sum_tol * rs * g * (2.0 + xhat * xhat)));
        // dgamma: sums over R rows of dy * xhat, bounded per column by their absolute sums.
        const std::vector<double> dg_ref = ToDoubles(dg_cpu.view());
        const double up = pt == DType::kF32 ? 0.0 : UnitRoundoff(pt);
        std::vector<double> bound(C);
        for (int64_t c = 0; c < C; ++c) {
          double magnitude = 0;
          for (int64_t r = 0; r < R; ++r)
            magnitude += std::fabs(d[r * C + c] * xs[r * C + c] * rv[r]);
          bound[c] = 4.0 * (R + 8) * kU32 * magnitude + 2 * up * std::fabs(dg_ref[c]) + 1e-30;
        }
        EXPECT_TRUE(WithinBounds(ToHost(dg_dev.view()).view(), dg_cpu.view(), bound));
      }
    }
  }
}

// y may alias x, and dx may alias dy: every GPU thread reads its elements before writing them.
TEST_F(RmsNormCudaTest, InPlace) {
  const Shape shape = {9, 1025};
  Tensor x = RandomTensor(shape, DType::kBF16, 7);
  Tensor gamma = RandomTensor({1025}, DType::kF32, 8, 0.5, 1.5);
  Tensor dy = RandomTensor(shape, DType::kBF16, 9);
  Tensor x_dev = ToDevice(x), g_dev = ToDevice(gamma), y_dev = EmptyDevice(shape, DType::kBF16);
  Tensor rstd = EmptyDevice({9}, DType::kF32);
  ASSERT_TRUE(RmsNorm(gpu_, x_dev.view(), g_dev.view(), 1e-5f, y_dev.view(), rstd.view()).ok());
  Tensor inplace = ToDevice(x);
  ASSERT_TRUE(RmsNorm(gpu_, inplace.view(), g_dev.view(), 1e-5f, inplace.view(), rstd.view()).ok());
  EXPECT_TRUE(testing::SameBits(ToHost(inplace.view()).view(), ToHost(y_dev.view()).view()));

  Tensor dy_dev = ToDevice(dy), dx_dev = EmptyDevice(shape, DType::kBF16);
  Tensor dg = EmptyDevice({1025}, DType::kF32), dg2 = EmptyDevice({1025}, DType::kF32);
  ASSERT_TRUE(RmsNormBackward(gpu_, x_dev.view(), g_dev.view(), rstd.view(), dy_dev.view(),
                              dx_dev.view(), dg.view())
                  .ok());
  ASSERT_TRUE(RmsNormBackward(gpu_, x_dev.view(), g_dev.view(), rstd.view(), dy_dev.view(),
                              dy_dev.view(), dg2.view())
                  .ok());
  EXPECT_TRUE(testing::SameBits(ToHost(dy_dev.view()).view(), ToHost(dx_dev.view()).view()));
  EXPECT_TRUE(testing::SameBits(ToHost(dg2.view()).view(), ToHost(dg.view()).view()));
}

}  // namespace
}  // namespace ops
}  // namespace mt
