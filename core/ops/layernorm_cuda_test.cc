// LayerNorm forward and backward on the GPU against the CPU backend: every dtype, f32 or 16-bit
// parameters, odd row counts and widths (one warp per row, so widths around 32 and far above it).
// Skipped without a GPU.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/layernorm.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::GpuMatchesCpu;
using ::mt::testing::GpuWithinBounds;
using ::mt::testing::kBitwise;
using ::mt::testing::MaxAbs;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::MirrorNaN;
using ::mt::testing::RandomTensor;
using ::mt::testing::Side;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::Tolerance;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);

// Bounds on dgamma and dbeta (sums over R rows of dy * xhat and of dy, both in f32): 4 (R + 4)
// u32 times the sums of |terms|, plus two roundings to a 16-bit parameter dtype.
void ParameterGradientBounds(const Tensor& x, const Tensor& dy, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dg, const Tensor& db,
                             std::vector<double>* dg_bound, std::vector<double>* db_bound) {
  const int64_t C = dg.numel(), R = mean.numel();
  const std::vector<double> d = ToDoubles(dy.view()), xs = ToDoubles(x.view());
  const std::vector<double> mu = ToDoubles(mean.view()), rv = ToDoubles(rstd.view());
  const std::vector<double> dg_ref = ToDoubles(dg.view()), db_ref = ToDoubles(db.view());
  const double up = dg.dtype() == DType::kF32 ? 0.0 : UnitRoundoff(dg.dtype());
  dg_bound->assign(C, 0.0);
  db_bound->assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    double sg = 0, sb = 0;
    for (int64_t r = 0; r < R; ++r) {
      const double xhat = (xs[r * C + c] - mu[r]) * rv[r];
      sg += std::fabs(d[r * C + c] * xhat);
      sb += std::fabs(d[r * C + c]);
    }
    (*dg_bound)[c] = 4.0 * (R + 4) * kU32 * sg + 2 * up * std::fabs(dg_ref[c]) + 1e-30;
    (*db_bound)[c] = 4.0 * (R + 4) * kU32 * sb + 2 * up * std::fabs(db_ref[c]) + 1e-30;
  }
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
        const Mirrored x = Mirror(RandomTensor(shape, dt, seed++, -2.0, 3.0));
        const Mirrored gamma = Mirror(RandomTensor({C}, pt, seed++, 0.5, 1.5));
        const Mirrored beta = Mirror(RandomTensor({C}, pt, seed++));
        const Mirrored dy = Mirror(RandomTensor(shape, dt, seed++));
        const Mirrored y = MirrorNaN(shape, dt);
        const Mirrored mean = MirrorNaN({R}, DType::kF32), rstd = MirrorNaN({R}, DType::kF32);
        ASSERT_TRUE(OnBoth([&](const ExecContext& c, Side s) {
          return LayerNorm(c, x[s], gamma[s], beta[s], kEps, y[s], mean[s], rstd[s]);
        }));
        // f32 sums of C terms on both sides: statistics within about C u32 of each other.
        const double sum_tol = 4.0 * (C + 4) * kU32;
        EXPECT_TRUE(GpuMatchesCpu(mean, Tolerance{0, sum_tol * 3.0}));
        EXPECT_TRUE(GpuMatchesCpu(rstd, Tolerance{sum_tol, 0}));
        const double y_max = MaxAbs(ToDoubles(y.cpu().view()));
        EXPECT_TRUE(GpuMatchesCpu(y, Tolerance{0, sum_tol * (y_max + 2.0)}));

        // Backward from the CPU's statistics, so both sides start from the same mean and rstd.
        const Mirrored mean_in = Mirror(mean.cpu().view()), rstd_in = Mirror(rstd.cpu().view());
        const Mirrored dx = MirrorNaN(shape, dt);
        const Mirrored dg = MirrorNaN({C}, pt), db = MirrorNaN({C}, pt);
        ASSERT_TRUE(OnBoth([&](const ExecContext& c, Side s) {
          return LayerNormBackward(c, x[s], gamma[s], mean_in[s], rstd_in[s], dy[s], dx[s], dg[s],
                                   db[s]);
        }));
        // dx = rstd (g - mean(g) - xhat mean(g xhat)): the two means are sums of C terms.
        const double rs = MaxAbs(ToDoubles(rstd.cpu().view()));
        const double g_max =
            MaxAbs(ToDoubles(dy.cpu().view())) * MaxAbs(ToDoubles(gamma.cpu().view()));
        const double xhat_max = 4.0 * rs;  // |x - mean| < 4.
        EXPECT_TRUE(
            GpuMatchesCpu(dx, Tolerance{0, sum_tol * rs * g_max * (2.0 + xhat_max * xhat_max)}));
        std::vector<double> dg_bound, db_bound;
        ParameterGradientBounds(x.cpu(), dy.cpu(), mean.cpu(), rstd.cpu(), dg.cpu(), db.cpu(),
                                &dg_bound, &db_bound);
        EXPECT_TRUE(GpuWithinBounds(dg[Side::kGpu], dg[Side::kCpu], dg_bound));
        EXPECT_TRUE(GpuWithinBounds(db[Side::kGpu], db[Side::kCpu], db_bound));
      }
    }
  }
}

// y may alias x, and dx may alias dy: the GPU kernels read a row before overwriting it.
TEST_F(LayerNormCudaTest, InPlace) {
  const Shape shape = {9, 257};
  const Tensor x = RandomTensor(shape, DType::kBF16, 7);
  const Tensor gamma = ToDevice(RandomTensor({257}, DType::kF32, 8, 0.5, 1.5));
  const Tensor beta = ToDevice(RandomTensor({257}, DType::kF32, 9));
  const Tensor x_dev = ToDevice(x), dy = ToDevice(RandomTensor(shape, DType::kBF16, 10));
  const Tensor y = EmptyDevice(shape, DType::kBF16);
  const Tensor mean = EmptyDevice({9}, DType::kF32), rstd = EmptyDevice({9}, DType::kF32);
  ASSERT_TRUE(LayerNorm(gpu_, x_dev.view(), gamma.view(), beta.view(), 1e-5f, y.view(), mean.view(),
                        rstd.view())
                  .ok());
  const Tensor inplace = ToDevice(x);
  ASSERT_TRUE(LayerNorm(gpu_, inplace.view(), gamma.view(), beta.view(), 1e-5f, inplace.view(),
                        mean.view(), rstd.view())
                  .ok());
  EXPECT_TRUE(GpuMatchesCpu(inplace.view(), ToHost(y.view()).view(), kBitwise));

  const Tensor dx = EmptyDevice(shape, DType::kBF16);
  const Tensor dg = EmptyDevice({257}, DType::kF32), db = EmptyDevice({257}, DType::kF32);
  ASSERT_TRUE(LayerNormBackward(gpu_, x_dev.view(), gamma.view(), mean.view(), rstd.view(),
                                dy.view(), dx.view(), dg.view(), db.view())
                  .ok());
  const Tensor dg2 = EmptyDevice({257}, DType::kF32), db2 = EmptyDevice({257}, DType::kF32);
  ASSERT_TRUE(LayerNormBackward(gpu_, x_dev.view(), gamma.view(), mean.view(), rstd.view(),
                                dy.view(), dy.view(), dg2.view(), db2.view())
                  .ok());
  EXPECT_TRUE(GpuMatchesCpu(dy.view(), ToHost(dx.view()).view(), kBitwise));
  EXPECT_TRUE(GpuMatchesCpu(dg2.view(), ToHost(dg.view()).view(), kBitwise));
  EXPECT_TRUE(GpuMatchesCpu(db2.view(), ToHost(db.view()).view(), kBitwise));
}

}  // namespace
}  // namespace ops
}  // namespace mt
