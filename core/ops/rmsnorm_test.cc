// RmsNorm and RmsNormBackward on the CPU against float64 references: a hand-computed row, odd
// shapes in every dtype with f32 or 16-bit gamma, gradients against central differences,
// thread-count invariance, in-place use and argument errors.
#include "core/ops/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::testing::HasSubstr;

using Vec = std::vector<double>;

const double kU32 = UnitRoundoff(DType::kF32);
constexpr float kEps = 1e-5f;

double Largest(const Vec& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// float64 RMSNorm of the rows of x [R, C]: y and each row's rstd.
struct RmsRef {
  Vec y, rstd;
};
RmsRef Reference(const Vec& x, const Vec& gamma, double eps) {
  const size_t C = gamma.size(), R = x.size() / C;
  RmsRef out{Vec(x.size()), Vec(R)};
  for (size_t r = 0; r < R; ++r) {
    const double* row = x.data() + r * C;
    const double mean_sq = std::inner_product(row, row + C, row, 0.0) / static_cast<double>(C);
    out.rstd[r] = 1.0 / std::sqrt(mean_sq + eps);
    for (size_t c = 0; c < C; ++c) out.y[r * C + c] = row[c] * out.rstd[r] * gamma[c];
  }
  return out;
}

// sum(w * RMSNorm(x, gamma)): the scalar whose gradients the backward gives for dy = w.
double Weighted(const Vec& w, const Vec& x, const Vec& gamma) {
  const Vec y = Reference(x, gamma, kEps).y;
  return std::inner_product(w.begin(), w.end(), y.begin(), 0.0);
}

// Half the spacing of f16's subnormals (tiny outputs round absolutely, not relatively); bf16 and
// f32 outputs here stay far above their subnormal ranges.
double SubnormalHalfStep(DType dt) { return dt == DType::kF16 ? std::ldexp(1.0, -25) : 1e-30; }

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

class RmsNormTest : public ::testing::Test {
 protected:
  ThreadPool pool_{3};
  std::vector<ExecContext> Contexts() { return {ExecContext{}, ExecContext{&pool_}}; }
};

TEST_F(RmsNormTest, HandComputedRow) {
  // x = [1, 2, 3, 4]: mean square 7.5, rstd = 1 / sqrt(7.5) = 0.3651483716701107.
  Tensor x = FromDoubles({1, 4}, DType::kF32, {1, 2, 3, 4});
  Tensor gamma = FromDoubles({4}, DType::kF32, {1, 1, 2, -1});
  Tensor y = Tensor::Host({1, 4}, DType::kF32), rstd = Tensor::Host({1}, DType::kF32);
  ASSERT_TRUE(RmsNorm(ExecContext{}, x.view(), gamma.view(), 0.0f, y.view(), rstd.view()).ok());
  const double rs = 0.3651483716701107;
  EXPECT_TRUE(AllClose(rstd.view(), {rs}, 4 * kU32, 0));
  EXPECT_TRUE(AllClose(y.view(), {rs, 2 * rs, 6 * rs, -4 * rs}, 6 * kU32, 0));
}

TEST_F(RmsNormTest, ForwardMatchesReference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType pt : {DType::kF32, dt}) {
        for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{2, 5, 129}, Shape{300, 257}}) {
          SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape), " gamma ", DTypeName(pt),
                                    " threads ", ctx.num_threads()));
          const int64_t C = shape.back(), R = NumElements(shape) / C;
          Tensor x = RandomTensor(shape, dt, 1, -2.0, 3.0);
          Tensor gamma = RandomTensor({C}, pt, 2, -1.5, 1.5);
          Tensor y = Tensor::Host(shape, dt);
          // rstd shaped like x without its last dim, or flat [R].
          Tensor rstd =
              Tensor::Host(shape.size() == 3 ? Shape{shape[0], shape[1]} : Shape{R}, DType::kF32);
          ASSERT_TRUE(RmsNorm(ctx, x.view(), gamma.view(), kEps, y.view(), rstd.view()).ok());
          const RmsRef want = Reference(ToDoubles(x.view()), ToDoubles(gamma.view()), kEps);
          // The mean square is an f32 sum of C non-negative terms over 16 lanes (relative error
          // below (C / 16 + 5) u); rstd halves it and adds the sqrt and division; y adds two
          // products and the rounding to its dtype. Every error is relative to the element.
          const double stat = (C / 16.0 + 8) * kU32;
          EXPECT_TRUE(AllClose(rstd.view(), want.rstd, stat, 0));
          EXPECT_TRUE(AllClose(y.view(), want.y, UnitRoundoff(dt) + stat + 3 * kU32,
                               SubnormalHalfStep(dt)));
        }
      }
    }
  }
}

TEST_F(RmsNormTest, BackwardMatchesFiniteDifferences) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType pt : {DType::kF32, dt}) {
        for (const Shape& shape : {Shape{1, 1}, Shape{3, 17}, Shape{2, 3, 33}}) {
          SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape), " gamma ", DTypeName(pt),
                                    " threads ", ctx.num_threads()));
          const int64_t C = shape.back(), R = NumElements(shape) / C;
          Tensor x = RandomTensor(shape, dt, 3, -1.0, 2.0);
          Tensor gamma = RandomTensor({C}, pt, 4, 0.5, 1.5);
          Tensor dy = RandomTensor(shape, dt, 5);
          Tensor y = Tensor::Host(shape, dt), rstd = Tensor::Host({R}, DType::kF32);
          ASSERT_TRUE(RmsNorm(ctx, x.view(), gamma.view(), kEps, y.view(), rstd.view()).ok());
          Tensor dx = RandomTensor(shape, dt, 6, 7, 8);    // Must be overwritten...
          Tensor dgamma = RandomTensor({C}, pt, 7, 7, 8);  // ...not accumulated into.
          ASSERT_TRUE(RmsNormBackward(ctx, x.view(), gamma.view(), rstd.view(), dy.view(),
                                      dx.view(), dgamma.view())
                          .ok());
          const Vec xd = ToDoubles(x.view()), gd = ToDoubles(gamma.view());
          const Vec w = ToDoubles(dy.view());
          const Vec want_dx =
              NumericalGradient([&](const Vec& v) { return Weighted(w, v, gd); }, xd);
          const Vec want_dgamma =
              NumericalGradient([&](const Vec& v) { return Weighted(w, xd, v); }, gd);
          // dx = rstd (g - xhat mean(g xhat)): the mean is an f32 sum of C terms of size up to
          // |g| |xhat|; then one rounding to the dtype.
          const double rs = Largest(ToDoubles(rstd.view()));
          const double xhat = Largest(xd) * rs, g = Largest(w) * 1.5;
          EXPECT_TRUE(AllClose(dx.view(), want_dx, UnitRoundoff(dt),
                               (16 + C) * kU32 * rs * g * (1 + xhat * xhat) + 1e-8));
          // dgamma: f32 sums over R rows of |dy xhat| <= xhat; one rounding to gamma's dtype.
          EXPECT_TRUE(AllClose(dgamma.view(), want_dgamma, UnitRoundoff(pt),
                               (16 + R) * kU32 * R * xhat + 1e-8));
          EXPECT_GT(Largest(want_dgamma), 0.05) << "degenerate case";
        }
      }
    }
  }
}

// The row sums are SIMD kernels with runtime dispatch summing in f64 lanes in a fixed layout
// (reduce_simd.h): every target gives the same bits, with and without threads.
TEST_F(RmsNormTest, ResultsDoNotDependOnThreadsOrSimdTargetAndMayRunInPlace) {
  // Two column tasks (C > 256) and many 64-row partial sums.
  const int64_t R = 1001, C = 300;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor x = RandomTensor({R, C}, dt, 8, -1.0, 3.0);
    Tensor gamma = RandomTensor({C}, DType::kF32, 9, 0.5, 1.5);
    Tensor dy = RandomTensor({R, C}, dt, 10);
    std::vector<std::vector<Tensor>> runs;
    for (const SimdTarget& target : SimdTargets()) {
      ScopedSimdTarget scope(target);
      for (const ExecContext& ctx : Contexts()) {
        std::vector<Tensor> out;
        out.push_back(Tensor::Host({R, C}, dt));        // y
        out.push_back(Tensor::Host({R}, DType::kF32));  // rstd
        out.push_back(Tensor::Host({R, C}, dt));        // dx
        out.push_back(Tensor::Host({C}, DType::kF32));  // dgamma
        ASSERT_TRUE(RmsNorm(ctx, x.view(), gamma.view(), kEps, out[0].view(), out[1].view()).ok());
        ASSERT_TRUE(RmsNormBackward(ctx, x.view(), gamma.view(), out[1].view(), dy.view(),
                                    out[2].view(), out[3].view())
                        .ok());
        runs.push_back(std::move(out));
      }
    }
    ASSERT_GE(runs.size(), 2u);
    for (size_t k = 1; k < runs.size(); ++k) {
      for (size_t i = 0; i < runs[0].size(); ++i) {
        EXPECT_TRUE(SameBytes(runs[k][i], runs[0][i])) << "run " << k << " output " << i;
      }
    }
    // dgamma over many rows against float64 sums of dy * x * rstd.
    const Vec xd = ToDoubles(x.view()), dyd = ToDoubles(dy.view());
    const Vec rs = Reference(xd, ToDoubles(gamma.view()), kEps).rstd;
    Vec want(C), magnitude(C);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        want[c] += dyd[r * C + c] * xd[r * C + c] * rs[r];
        magnitude[c] += std::fabs(dyd[r * C + c] * xd[r * C + c] * rs[r]);
      }
    }
    // Blocks of 64 rows, then 16 blocks in order; each term good to a few ulps.
    EXPECT_TRUE(AllClose(runs[0][3].view(), want, 0, (64 + 16 + 8) * kU32 * Largest(magnitude)));

    // In place: y over x, dx over dy.
    const ExecContext ctx{&pool_};
    Tensor dgamma = Tensor::Host({C}, DType::kF32), rstd = Tensor::Host({R}, DType::kF32);
    ASSERT_TRUE(RmsNormBackward(ctx, x.view(), gamma.view(), runs[0][1].view(), dy.view(),
                                dy.view(), dgamma.view())
                    .ok());
    EXPECT_TRUE(SameBytes(dy, runs[0][2]));
    EXPECT_TRUE(SameBytes(dgamma, runs[0][3]));
    ASSERT_TRUE(RmsNorm(ctx, x.view(), gamma.view(), kEps, x.view(), rstd.view()).ok());
    EXPECT_TRUE(SameBytes(x, runs[0][0]));
  }
}

TEST_F(RmsNormTest, BadArgumentsAreReported) {
  const ExecContext ctx;
  Tensor x = RandomTensor({3, 4}, DType::kBF16, 11);
  Tensor y = Tensor::Host({3, 4}, DType::kBF16);
  Tensor gamma = RandomTensor({4}, DType::kF32, 12);
  Tensor rstd = Tensor::Host({3}, DType::kF32);
  auto status_of = [&](const TensorView& x, const TensorView& g, float eps, const TensorView& y,
                       const TensorView& r) { return RmsNorm(ctx, x, g, eps, y, r); };
  auto expect_error = [](const absl::Status& s, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(text));
  };
  ASSERT_TRUE(status_of(x.view(), gamma.view(), kEps, y.view(), rstd.view()).ok());

  Tensor y35 = Tensor::Host({3, 5}, DType::kBF16);
  expect_error(status_of(x.view(), gamma.view(), kEps, y35.view(), rstd.view()),
               absl::StatusCode::kInvalidArgument, "RmsNorm: y has shape [3, 5]");
  Tensor y16 = Tensor::Host({3, 4}, DType::kF16);
  expect_error(status_of(x.view(), gamma.view(), kEps, y16.view(), rstd.view()),
               absl::StatusCode::kInvalidArgument, "y has dtype f16, expected bf16");
  Tensor g5 = RandomTensor({5}, DType::kF32, 13);
  expect_error(status_of(x.view(), g5.view(), kEps, y.view(), rstd.view()),
               absl::StatusCode::kInvalidArgument, "gamma has shape [5]");
  Tensor g16 = RandomTensor({4}, DType::kF16, 14);
  expect_error(status_of(x.view(), g16.view(), kEps, y.view(), rstd.view()),
               absl::StatusCode::kInvalidArgument, "gamma has dtype f16, expected f32 or bf16");
  Tensor r4 = Tensor::Host({4}, DType::kF32);
  expect_error(status_of(x.view(), gamma.view(), kEps, y.view(), r4.view()),
               absl::StatusCode::kInvalidArgument, "rstd has shape [4], expected [3]");
  Tensor r_bf16 = Tensor::Host({3}, DType::kBF16);
  expect_error(status_of(x.view(), gamma.view(), kEps, y.view(), r_bf16.view()),
               absl::StatusCode::kInvalidArgument, "rstd has dtype bf16, expected f32");
  for (float eps : {-1.0f, NAN, INFINITY}) {
    expect_error(status_of(x.view(), gamma.view(), eps, y.view(), rstd.view()),
                 absl::StatusCode::kInvalidArgument, "must be finite and non-negative");
  }
  Tensor xi = Tensor::Zeros({3, 4}, DType::kI32);
  expect_error(status_of(xi.view(), gamma.view(), kEps, xi.view(), rstd.view()),
               absl::StatusCode::kUnimplemented, "x has unsupported dtype i32");
  TensorView strided = x.view();
  strided.shape = {3, 2};
  strided.strides = {4, 2};
  TensorView g2(gamma.data(), {2}, DType::kF32);
  expect_error(status_of(strided, g2, kEps, y.view().Flatten2D(), rstd.view()),
               absl::StatusCode::kInvalidArgument, "must be contiguous");

  // Backward: dgamma of another dtype than gamma.
  Tensor dx = Tensor::Host({3, 4}, DType::kBF16), dgamma = Tensor::Host({4}, DType::kBF16);
  expect_error(
      RmsNormBackward(ctx, x.view(), gamma.view(), rstd.view(), y.view(), dx.view(), dgamma.view()),
      absl::StatusCode::kInvalidArgument,
      "RmsNormBackward: dgamma has dtype bf16, expected f32 (that of gamma)");

  // Devices: one CUDA view among CPU ones, then all CUDA views over host memory.
  TensorView x_gpu(x.data(), {3, 4}, DType::kBF16, Device::Cuda(0));
  expect_error(status_of(x.view(), gamma.view(), kEps, x_gpu, rstd.view()),
               absl::StatusCode::kInvalidArgument, "y is on cuda:0");
  TensorView g_gpu(gamma.data(), {4}, DType::kF32, Device::Cuda(0));
  TensorView r_gpu(rstd.data(), {3}, DType::kF32, Device::Cuda(0));
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(status_of(x_gpu, g_gpu, kEps, x_gpu, r_gpu)));
  TensorView dg_gpu(gamma.data(), {4}, DType::kF32, Device::Cuda(0));
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(
      RmsNormBackward(ctx, x_gpu, g_gpu, r_gpu, x_gpu, x_gpu, dg_gpu)));
}

}  // namespace
}  // namespace ops
}  // namespace mt
