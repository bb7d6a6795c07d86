#include "core/ops/layernorm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::IsError;
using ::mt::testing::kFloatTypes;
using ::mt::testing::LayerNormRef;
using ::mt::testing::LayerNormReference;
using ::mt::testing::MaxAbs;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);
constexpr float kEps = 1e-5f;

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Shape Leading(const Shape& shape) { return Shape(shape.begin(), shape.end() - 1); }

// Every op runs on the calling thread alone and on a pool of three.
using LayerNormTest = ::mt::testing::ThreadedOpTest;

TEST_F(LayerNormTest, HandComputedRow) {
  // x = [1, 2, 3, 4]: mean 2.5, variance 1.25, rstd 1 / sqrt(1.25).
  Tensor x = FromDoubles({1, 4}, DType::kF32, {1, 2, 3, 4});
  Tensor gamma = FromDoubles({4}, DType::kF32, {1, 1, 2, 1});
  Tensor beta = FromDoubles({4}, DType::kF32, {0, 0, 0, 10});
  Tensor y = Tensor::Host({1, 4}, DType::kF32);
  Tensor mean = Tensor::Host({1}, DType::kF32), rstd = Tensor::Host({1}, DType::kF32);
  ASSERT_TRUE(LayerNorm(ExecContext{}, x.view(), gamma.view(), beta.view(), 0.0f, y.view(),
                        mean.view(), rstd.view())
                  .ok());
  EXPECT_TRUE(AllClose(
      y.view(), {-1.3416407864998738, -0.4472135954999579, 0.8944271909999159, 11.341640786499874},
      4 * kU32, 0));
  EXPECT_TRUE(AllClose(mean.view(), {2.5}, 0, 0));
  EXPECT_TRUE(AllClose(rstd.view(), {0.8944271909999159}, 2 * kU32, 0));
}

TEST_F(LayerNormTest, ForwardMatchesReference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (DType pt : {DType::kF32, dt}) {
        for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{2, 5, 129}, Shape{300, 129}}) {
          SCOPED_TRACE(absl::StrCat("x ", DTypeName(dt), ShapeToString(shape), " params ",
                                    DTypeName(pt), " threads ", ctx.num_threads()));
          const int64_t C = shape.back();
          // An offset mean, so that a one-pass variance would lose digits.
          Tensor x = RandomTensor(shape, dt, 1, -1.0, 3.0);
          Tensor gamma = RandomTensor({C}, pt, 2, 0.5, 1.5);
          Tensor beta = RandomTensor({C}, pt, 3);
          Tensor y = Tensor::Host(shape, dt);
          Tensor mean = Tensor::Host(Leading(shape), DType::kF32);            // Like x without C.
          Tensor rstd = Tensor::Host({NumElements(shape) / C}, DType::kF32);  // Flat [R].
          ASSERT_TRUE(LayerNorm(ctx, x.view(), gamma.view(), beta.view(), kEps, y.view(),
                                mean.view(), rstd.view())
                          .ok());
          const LayerNormRef want = LayerNormReference(ToDoubles(x.view()), ToDoubles(gamma.view()),
                                                       ToDoubles(beta.view()), kEps);
          // f32 statistics: sums of C terms with eight accumulators, then one rounding of y to
          // the dtype.
          const double f32_err = (16 + C / 4.0) * kU32;
          EXPECT_TRUE(AllClose(y.view(), want.y, UnitRoundoff(dt), f32_err * MaxAbs(want.y)));
          EXPECT_TRUE(AllClose(mean.view(), want.mean, f32_err, f32_err * 3.0));
          EXPECT_TRUE(AllClose(rstd.view(), want.rstd, f32_err, 0));
        }
      }
    }
  }
}

TEST_F(LayerNormTest, BackwardMatchesFiniteDifferences) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (DType pt : {DType::kF32, dt}) {
        for (const Shape& shape : {Shape{1, 1}, Shape{3, 17}, Shape{2, 3, 33}}) {
          SCOPED_TRACE(absl::StrCat("x ", DTypeName(dt), ShapeToString(shape), " params ",
                                    DTypeName(pt), " threads ", ctx.num_threads()));
          const int64_t C = shape.back();
          const int64_t R = NumElements(shape) / C;
          Tensor x = RandomTensor(shape, dt, 4, -1.0, 3.0);
          Tensor gamma = RandomTensor({C}, pt, 5, 0.5, 1.5);
          Tensor beta = RandomTensor({C}, pt, 6);
          Tensor dy = RandomTensor(shape, dt, 7);
          Tensor y = Tensor::Host(shape, dt);
          Tensor mean = Tensor::Host({R}, DType::kF32), rstd = Tensor::Host({R}, DType::kF32);
          ASSERT_TRUE(LayerNorm(ctx, x.view(), gamma.view(), beta.view(), kEps, y.view(),
                                mean.view(), rstd.view())
                          .ok());
          Tensor dx = Tensor::Host(shape, dt);
          Tensor dgamma = RandomTensor({C}, pt, 8, 5, 6);  // Garbage: must be overwritten.
          Tensor dbeta = RandomTensor({C}, pt, 9, 5, 6);
          ASSERT_TRUE(LayerNormBackward(ctx, x.view(), gamma.view(), mean.view(), rstd.view(),
                                        dy.view(), dx.view(), dgamma.view(), dbeta.view())
                          .ok());

          const std::vector<double> xd = ToDoubles(x.view()), gd = ToDoubles(gamma.view()),
                                    bd = ToDoubles(beta.view()), dyd = ToDoubles(dy.view());
          // L = sum(dy * LayerNorm(x, gamma, beta)); its gradients are the backward's outputs.
          const std::vector<double> want_dx = NumericalGradient(
              [&](const std::vector<double>& v) {
                return Dot(dyd, LayerNormReference(v, gd, bd, kEps).y);
              },
              xd);
          const std::vector<double> want_dgamma = NumericalGradient(
              [&](const std::vector<double>& v) {
                return Dot(dyd, LayerNormReference(xd, v, bd, kEps).y);
              },
              gd);
          const std::vector<double> want_dbeta = NumericalGradient(
              [&](const std::vector<double>& v) {
                return Dot(dyd, LayerNormReference(xd, gd, v, kEps).y);
              },
              bd);
          // dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma: f32 sums of C terms,
          // each of size about rstd |g| |xhat|; then one rounding to the dtype.
          const double rstd_max = MaxAbs(ToDoubles(rstd.view()));
          const double f32_err = (16 + C) * kU32;
          EXPECT_TRUE(
              AllClose(dx.view(), want_dx, UnitRoundoff(dt), f32_err * rstd_max * 1.5 * 4 + 1e-7));
          // dgamma, dbeta: f32 sums over R rows of terms below 1 * 4, one rounding to pt.
          EXPECT_TRUE(AllClose(dgamma.view(), want_dgamma, UnitRoundoff(pt),
                               (16 + C + R) * kU32 * 4 * R + 1e-7));
          EXPECT_TRUE(
              AllClose(dbeta.view(), want_dbeta, UnitRoundoff(pt), (16 + R) * kU32 * R + 1e-7));
        }
      }
    }
  }
}

TEST_F(LayerNormTest, ResultsDoNotDependOnThreadsOrSimdTargetAndMayRunInPlace) {
  const Shape shape = {2001, 129};  // Many row blocks for the pool.
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dt));
    const int64_t C = 129, R = 2001;
    Tensor x = RandomTensor(shape, dt, 10, -1.0, 3.0);
    Tensor gamma = RandomTensor({C}, DType::kF32, 11, 0.5, 1.5);
    Tensor beta = RandomTensor({C}, DType::kF32, 12);
    Tensor dy = RandomTensor(shape, dt, 13);
    // Every SIMD target, each with and without threads (layernorm_simd.h: the same bits).
    std::vector<std::vector<Tensor>> results;
    for (const SimdTarget& target : SimdTargets()) {
      ScopedSimdTarget scope(target);
      for (const ExecContext& ctx : Contexts()) {
        std::vector<Tensor> r;
        r.push_back(Tensor::Host(shape, dt));         // y
        r.push_back(Tensor::Host({R}, DType::kF32));  // mean
        r.push_back(Tensor::Host({R}, DType::kF32));  // rstd
        r.push_back(Tensor::Host(shape, dt));         // dx
        r.push_back(Tensor::Host({C}, DType::kF32));  // dgamma
        r.push_back(Tensor::Host({C}, DType::kF32));  // dbeta
        ASSERT_TRUE(LayerNorm(ctx, x.view(), gamma.view(), beta.view(), kEps, r[0].view(),
                              r[1].view(), r[2].view())
                        .ok());
        ASSERT_TRUE(LayerNormBackward(ctx, x.view(), gamma.view(), r[1].view(), r[2].view(),
                                      dy.view(), r[3].view(), r[4].view(), r[5].view())
                        .ok());
        results.push_back(std::move(r));
      }
    }
    for (size_t k = 1; k < results.size(); ++k) {
      for (size_t i = 0; i < results[0].size(); ++i) {
        EXPECT_TRUE(SameBits(results[k][i], results[0][i])) << "run " << k << " output " << i;
      }
    }
    // The reduction over many row blocks against float64 sums.
    const std::vector<double> xd = ToDoubles(x.view()), dyd = ToDoubles(dy.view());
    const LayerNormRef ref =
        LayerNormReference(xd, ToDoubles(gamma.view()), ToDoubles(beta.view()), kEps);
    std::vector<double> want_dgamma(C), want_dbeta(C), abs_sum(C);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const double xhat = (xd[r * C + c] - ref.mean[r]) * ref.rstd[r];
        want_dgamma[c] += dyd[r * C + c] * xhat;
        want_dbeta[c] += dyd[r * C + c];
        abs_sum[c] += std::fabs(dyd[r * C + c]) * (1 + std::fabs(xhat));
      }
    }
    // f32 sums: 16 rows per block, then up to 128 blocks; xhat good to about C ulps.
    const double atol = (16 + 128 + C) * kU32 * MaxAbs(abs_sum);
    EXPECT_TRUE(AllClose(results[0][4].view(), want_dgamma, 0, atol));
    EXPECT_TRUE(AllClose(results[0][5].view(), want_dbeta, 0, atol));

    // In place: y over x, dx over dy.
    const ExecContext ctx{&pool_};
    Tensor mean = Tensor::Host({R}, DType::kF32), rstd = Tensor::Host({R}, DType::kF32);
    Tensor dgamma = Tensor::Host({C}, DType::kF32), dbeta = Tensor::Host({C}, DType::kF32);
    ASSERT_TRUE(LayerNormBackward(ctx, x.view(), gamma.view(), results[0][1].view(),
                                  results[0][2].view(), dy.view(), dy.view(), dgamma.view(),
                                  dbeta.view())
                    .ok());
    EXPECT_TRUE(SameBits(dy, results[0][3]));
    ASSERT_TRUE(LayerNorm(ctx, x.view(), gamma.view(), beta.view(), kEps, x.view(), mean.view(),
                          rstd.view())
                    .ok());
    EXPECT_TRUE(SameBits(x, results[0][0]));
  }
}

// ---- Errors: valid bf16 arguments with f32 parameters, broken one at a time ----

class LayerNormErrorTest : public ::testing::Test {
 protected:
  static constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

  void SetUp() override { ASSERT_TRUE(Forward(x_.view(), gamma_.view(), beta_.view()).ok()); }

  absl::Status Forward(const TensorView& x, const TensorView& g, const TensorView& b,
                       float eps = kEps) const {
    return Forward(x, g, b, eps, y_.view(), mean_.view(), rstd_.view());
  }
  absl::Status Forward(const TensorView& x, const TensorView& g, const TensorView& b, float eps,
                       const TensorView& y, const TensorView& m, const TensorView& r) const {
    return LayerNorm(ctx_, x, g, b, eps, y, m, r);
  }

  const ExecContext ctx_;
  const Tensor x_ = RandomTensor({3, 4}, DType::kBF16, 14);
  const Tensor y_ = Tensor::Host({3, 4}, DType::kBF16);
  const Tensor gamma_ = RandomTensor({4}, DType::kF32, 15);
  const Tensor beta_ = RandomTensor({4}, DType::kF32, 16);
  const Tensor mean_ = Tensor::Host({3}, DType::kF32);
  const Tensor rstd_ = Tensor::Host({3}, DType::kF32);
};

TEST_F(LayerNormErrorTest, ShapesAndDtypes) {
  const TensorView x = x_.view(), gamma = gamma_.view(), beta = beta_.view();
  const TensorView y = y_.view(), mean = mean_.view(), rstd = rstd_.view();
  Tensor y_bad = Tensor::Host({3, 5}, DType::kBF16);
  EXPECT_TRUE(IsError(Forward(x, gamma, beta, kEps, y_bad.view(), mean, rstd), kInvalid,
                      "LayerNorm: y has shape [3, 5]"));
  Tensor g5 = RandomTensor({5}, DType::kF32, 17);
  EXPECT_TRUE(IsError(Forward(x, g5.view(), beta), kInvalid, "gamma has shape [5]"));
  Tensor m4 = Tensor::Host({4}, DType::kF32);
  EXPECT_TRUE(
      IsError(Forward(x, gamma, beta, kEps, y, m4.view(), rstd), kInvalid, "mean has shape [4]"));
  Tensor g16 = RandomTensor({4}, DType::kF16, 18);  // Neither f32 nor x's bf16.
  EXPECT_TRUE(
      IsError(Forward(x, g16.view(), beta), kInvalid, "gamma has dtype f16, expected f32 or bf16"));
  Tensor b16 = RandomTensor({4}, DType::kBF16, 19);  // gamma f32, beta bf16.
  EXPECT_TRUE(IsError(Forward(x, gamma, b16.view()), kInvalid));
  Tensor xi = Tensor::Zeros({3, 4}, DType::kI32);
  EXPECT_TRUE(IsError(Forward(xi.view(), gamma, beta, kEps, xi.view(), mean, rstd),
                      absl::StatusCode::kUnimplemented, "x has unsupported dtype i32"));
}

TEST_F(LayerNormErrorTest, EpsAndLayout) {
  for (float eps : {-1.0f, NAN, INFINITY}) {
    EXPECT_TRUE(IsError(Forward(x_.view(), gamma_.view(), beta_.view(), eps), kInvalid)) << eps;
  }
  TensorView strided = x_.view();
  strided.shape = {3, 2};
  strided.strides = {4, 2};
  TensorView g2(gamma_.data(), {2}, DType::kF32), b2(beta_.data(), {2}, DType::kF32);
  EXPECT_TRUE(
      IsError(Forward(strided, g2, b2, kEps, y_.view().Flatten2D(), mean_.view(), rstd_.view()),
              kInvalid, "x (bf16[3, 2] on cpu) must be contiguous"));
}

// dx of the wrong shape, dgamma of another dtype than gamma.
TEST_F(LayerNormErrorTest, Backward) {
  Tensor dx = Tensor::Host({3, 4}, DType::kBF16), dx_bad = Tensor::Host({4, 3}, DType::kBF16);
  Tensor dgamma = Tensor::Host({4}, DType::kF32), dbeta = Tensor::Host({4}, DType::kF32);
  Tensor dgamma_bf16 = Tensor::Host({4}, DType::kBF16);
  auto backward = [&](const TensorView& dx, const TensorView& dgamma) {
    return LayerNormBackward(ctx_, x_.view(), gamma_.view(), mean_.view(), rstd_.view(), y_.view(),
                             dx, dgamma, dbeta.view());
  };
  EXPECT_TRUE(IsError(backward(dx_bad.view(), dgamma.view()), kInvalid));
  EXPECT_TRUE(IsError(backward(dx.view(), dgamma_bf16.view()), kInvalid,
                      "LayerNormBackward: dgamma has dtype bf16"));
}

// A CUDA view mixed with CPU ones, and all-CUDA views. Never read.
TEST_F(LayerNormErrorTest, Devices) {
  TensorView x_gpu(x_.data(), {3, 4}, DType::kBF16, Device::Cuda(0));
  EXPECT_TRUE(IsError(
      Forward(x_.view(), gamma_.view(), beta_.view(), kEps, x_gpu, mean_.view(), rstd_.view()),
      kInvalid, "y is on cuda:0"));
  TensorView g_gpu(gamma_.data(), {4}, DType::kF32, Device::Cuda(0));
  TensorView b_gpu(beta_.data(), {4}, DType::kF32, Device::Cuda(0));
  TensorView m_gpu(mean_.data(), {3}, DType::kF32, Device::Cuda(0));
  TensorView r_gpu(rstd_.data(), {3}, DType::kF32, Device::Cuda(0));
  EXPECT_TRUE(
      ::mt::testing::RejectsFakeCudaViews(Forward(x_gpu, g_gpu, b_gpu, kEps, x_gpu, m_gpu, r_gpu)));
}

}  // namespace
}  // namespace ops
}  // namespace mt
