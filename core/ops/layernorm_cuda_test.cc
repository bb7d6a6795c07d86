// LayerNorm forward and backward on the GPU against the CPU backend: every dtype, f32 or 16-bit
// parameters, odd row counts and widths (one warp per row, so widths around 32 and far above it).
// Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/layernorm.h"
#include "core/ops/testutil.h"

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

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

using LayerNormCudaTest = CudaOpTest;

TEST_F(LayerNormCudaTest, ForwardAndBackwardMatchCpu) {
  const float kEps = 1e-5f;
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType pt : {DType::kF32, dt}) {
      for (const Shape& shape : {Shape{1, 1}, Shape{3, 17}, Shape{5, 33}, Shape{2, 3, 129},
                                 Shape{33, 1536}, Shape{7, 4099}}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), " params ", DTypeName(pt), ShapeToString(shape)));
        const int64_t C = shape.back();
        const int64_t R = NumElements(shape) / C;
        Tensor x = RandomTensor(shape, dt, seed++, -2.0, 3.0);
        Tensor gamma = RandomTensor({C}, pt, seed++, 0.5, 1.5);
        Tensor beta = RandomTensor({C}, pt, seed++);
        Tensor dy = RandomTensor(shape, dt, seed++);

        Tensor y_cpu = Tensor::Host(shape, dt);
        Tensor mean_cpu = Tensor::Host({R}, DType::kF32), rstd_cpu = Tensor::Host({R}, DType::kF32);
        ASSERT_TRUE(LayerNorm(cpu_, x.view(), gamma.view(), beta.view(), kEps, y_cpu.view(),
                              mean_cpu.view(), rstd_cpu.view())
                        .ok());
        Tensor x_dev = ToDevice(x), g_dev = ToDevice(gamma), b_dev = ToDevice(beta);
        Tensor y_dev = EmptyDevice(shape, dt);
        Tensor mean_dev = EmptyDevice({R}, DType::kF32), rstd_dev = EmptyDevice({R}, DType::kF32);
        absl::Status s = LayerNorm(gpu_, x_dev.view(), g_dev.view(), b_dev.view(), kEps,
                                   y_dev.view(), mean_dev.view(), rstd_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        // f32 sums of C terms on both sides: statistics within about C u32 of each other.
        const double sum_tol = 4.0 * (C + 4) * kU32;
        const double u = dt == DType::kF32 ? 0.0 : UnitRoundoff(dt);
        EXPECT_TRUE(AllClose(ToHost(mean_dev.view()).view(), ToDoubles(mean_cpu.view()), 0,
                             sum_tol * 3.0));
        EXPECT_TRUE(
            AllClose(ToHost(rstd_dev.view()).view(), ToDoubles(rstd_cpu.view()), sum_tol, 0));
        const std::vector<double> y_ref = ToDoubles(y_cpu.view());
        EXPECT_TRUE(AllClose(ToHost(y_dev.view()).view(), y_ref, 2 * u,
                             sum_tol * (MaxAbs(y_ref) + 2.0)));

        // Backward from the CPU's statistics, so both sides start from the same mean and rstd.
        Tensor dx_cpu = Tensor::Host(shape, dt);
        Tensor dg_cpu = Tensor::Host({C}, pt), db_cpu = Tensor::Host({C}, pt);
        ASSERT_TRUE(LayerNormBackward(cpu_, x.view(), gamma.view(), mean_cpu.view(),
                                      rstd_cpu.view(), dy.view(), dx_cpu.view(), dg_cpu.view(),
                                      db_cpu.view())
                        .ok());
        Tensor m_dev = ToDevice(mean_cpu), r_dev = ToDevice(rstd_cpu), dy_dev = ToDevice(dy);
        Tensor dx_dev = EmptyDevice(shape, dt);
        Tensor dg_dev = EmptyDevice({C}, pt), db_dev = EmptyDevice({C}, pt);
        s = LayerNormBackward(gpu_, x_dev.view(), g_dev.view(), m_dev.view(), r_dev.view(),
                              dy_dev.view(), dx_dev.view(), dg_dev.view(), db_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        // dx = rstd (g - mean(g) - xhat mean(g xhat)): the two means are sums of C terms.
        const double rs = MaxAbs(ToDoubles(rstd_cpu.view()));
        const double g_max = MaxAbs(ToDoubles(dy.view())) * MaxAbs(ToDoubles(gamma.view()));
        const double xhat_max = 4.0 * rs;  // |x - mean| < 4.
        EXPECT_TRUE(AllClose(ToHost(dx_dev.view()).view(), ToDoubles(dx_cpu.view()), 2 * u,
                             sum_tol * rs * g_max * (2.0 + xhat_max * xhat_max)));
        // dgamma, dbeta: sums over R rows.
        const std::vector<double> d = ToDoubles(dy.view()), xs = ToDoubles(x.view());
        const std::vector<double> mu = ToDoubles(mean_cpu.view()), rv = ToDoubles(rstd_cpu.view());
        const std::vector<double> dg_ref = ToDoubles(dg_cpu.view());
        const std::vector<double> db_ref = ToDoubles(db_cpu.view());
        const double up = pt == DType::kF32 ? 0.0 : UnitRoundoff(pt);
        std::vector<double> dg_bound(C), db_bound(C);
        for (int64_t c = 0; c < C; ++c) {
          double sg = 0, sb = 0;
          for (int64_t r = 0; r < R; ++r) {
            const double xhat = (xs[r * C + c] - mu[r]) * rv[r];
            sg += std::fabs(d[r * C + c] * xhat);
            sb += std::fabs(d[r * C + c]);
          }
          dg_bound[c] = 4.0 * (R + 4) * kU32 * sg + 2 * up * std::fabs(dg_ref[c]) + 1e-30;
          db_bound[c] = 4.0 * (R + 4) * kU32 * sb + 2 * up * std::fabs(db_ref[c]) + 1e-30;
        }
        EXPECT_TRUE(WithinBounds(ToHost(dg_dev.view()).view(), dg_cpu.view(), dg_bound));
        EXPECT_TRUE(WithinBounds(ToHost(db_dev.view()).view(), db_cpu.view(), db_bound));
      }
    }
  }
}

// y may alias x, and dx may alias dy: the GPU kernels read a row before overwriting it.
TEST_F(LayerNormCudaTest, InPlace) {
  const Shape shape = {9, 257};
  Tensor x = RandomTensor(shape, DType::kBF16, 7);
  Tensor gamma = RandomTensor({257}, DType::kF32, 8, 0.5, 1.5);
  Tensor beta = RandomTensor({257}, DType::kF32, 9);
  Tensor dy = RandomTensor(shape, DType::kBF16, 10);
  Tensor x_dev = ToDevice(x), g_dev = ToDevice(gamma), b_dev = ToDevice(beta);
  Tensor y_dev = EmptyDevice(shape, DType::kBF16);
  Tensor mean = EmptyDevice({9}, DType::kF32), rstd = EmptyDevice({9}, DType::kF32);
  ASSERT_TRUE(LayerNorm(gpu_, x_dev.view(), g_dev.view(), b_dev.view(), 1e-5f, y_dev.view(),
                        mean.view(), rstd.view())
                  .ok());
  Tensor inplace = ToDevice(x);
  ASSERT_TRUE(LayerNorm(gpu_, inplace.view(), g_dev.view(), b_dev.view(), 1e-5f, inplace.view(),
                        mean.view(), rstd.view())
                  .ok());
  EXPECT_TRUE(testing::SameBits(ToHost(inplace.view()).view(), ToHost(y_dev.view()).view()));

  Tensor dy_dev = ToDevice(dy), dx_dev = EmptyDevice(shape, DType::kBF16);
  Tensor dg = EmptyDevice({257}, DType::kF32), db = EmptyDevice({257}, DType::kF32);
  ASSERT_TRUE(LayerNormBackward(gpu_, x_dev.view(), g_dev.view(), mean.view(), rstd.view(),
                                dy_dev.view(), dx_dev.view(), dg.view(), db.view())
                  .ok());
  Tensor dg2 = EmptyDevice({257}, DType::kF32), db2 = EmptyDevice({257}, DType::kF32);
  ASSERT_TRUE(LayerNormBackward(gpu_, x_dev.view(), g_dev.view(), mean.view(), rstd.view(),
                                dy_dev.view(), dy_dev.view(), dg2.view(), db2.view())
                  .ok());
  EXPECT_TRUE(testing::SameBits(ToHost(dy_dev.view()).view(), ToHost(dx_dev.view()).view()));
  EXPECT_TRUE(testing::SameBits(ToHost(dg2.view()).view(), ToHost(dg.view()).view()));
  EXPECT_TRUE(testing::SameBits(ToHost(db2.view()).view(), ToHost(db.view()).view()));
}

}  // namespace
}  // namespace ops
}  // namespace mt
