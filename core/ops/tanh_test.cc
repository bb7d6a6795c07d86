#include "core/ops/tanh.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::kFloatTypes;
using ::mt::testing::kOddShapes;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::testing::HasSubstr;

const double kU32 = UnitRoundoff(DType::kF32);

// Every op runs on the calling thread alone and on a pool of three.
using TanhTest = ::mt::testing::ThreadedOpTest;

TEST_F(TanhTest, MatchesHandComputedValues) {
  // tanh(0.5) = (e - 1) / (e + 1), tanh(-2) = -(e^4 - 1) / (e^4 + 1), and saturation at 20.
  const double e = std::exp(1.0), e4 = std::exp(4.0);
  Tensor x = FromDoubles({4}, DType::kF32, {0.5, -2.0, 20.0, 0.0});
  Tensor y = Tensor::Host({4}, DType::kF32);
  ASSERT_TRUE(Tanh(ExecContext{}, x.view(), y.view()).ok());
  EXPECT_TRUE(AllClose(y.view(), {(e - 1) / (e + 1), -(e4 - 1) / (e4 + 1), 1.0, 0.0}, 4 * kU32, 0));
}

TEST_F(TanhTest, MatchesFloat64Reference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : kOddShapes) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        Tensor x = RandomTensor(shape, dt, 3, -4.0, 4.0);
        Tensor y = Tensor::Host(shape, dt);
        ASSERT_TRUE(Tanh(ctx, x.view(), y.view()).ok());
        std::vector<double> want = ToDoubles(x.view());
        for (double& v : want) v = std::tanh(v);
        // tanh in f32 is good to a few ulps, then one rounding to the dtype. Near 0 the relative
        // bound holds too (tanh(x) ~ x), so the absolute slack only covers f16 subnormals.
        EXPECT_TRUE(AllClose(y.view(), want, UnitRoundoff(dt) + 4 * kU32, 1e-7));
        // In place gives the same bits.
        ASSERT_TRUE(Tanh(ctx, x.view(), x.view()).ok());
        EXPECT_TRUE(SameBits(x, y));
      }
    }
  }
}

TEST_F(TanhTest, BackwardMatchesFiniteDifferences) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{5, 129}, Shape{129, 129}}) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        Tensor x = RandomTensor(shape, dt, 8, -3.0, 3.0);
        Tensor dy = RandomTensor(shape, dt, 9);
        Tensor y = Tensor::Host(shape, dt), dx = Tensor::Host(shape, dt);
        ASSERT_TRUE(Tanh(ctx, x.view(), y.view()).ok());
        ASSERT_TRUE(TanhBackward(ctx, y.view(), dy.view(), dx.view()).ok());
        const std::vector<double> dyd = ToDoubles(dy.view()), xd = ToDoubles(x.view());
        std::vector<double> want;
        if (xd.size() <= 1000) {
          auto loss = [&](const std::vector<double>& xs) {
            double l = 0;
            for (size_t i = 0; i < xs.size(); ++i) l += dyd[i] * std::tanh(xs[i]);
            return l;
          };
          want = NumericalGradient(loss, xd);
        } else {
          // The loss is separable, so its numerical gradient is the element-wise central
          // difference times dy; computed directly, as the full one costs O(n^2).
          const double step = 1e-6;
          for (size_t i = 0; i < xd.size(); ++i) {
            want.push_back(dyd[i] * (std::tanh(xd[i] + step) - std::tanh(xd[i] - step)) /
                           (2 * step));
          }
        }
        // y = tanh(x) (1 + d) with |d| <= u (one rounding to the dtype), so 1 - y^2 is off by
        // about 2 u tanh(x)^2 <= 2 u absolutely; times |dy| <= 1, plus dx's own rounding (u
        // relative) and the f32 math and finite differences (a few f32 ulps).
        const double u = UnitRoundoff(dt);
        EXPECT_TRUE(AllClose(dx.view(), want, u + 8 * kU32, 4 * u + 1e-7));
        // dx may alias dy.
        ASSERT_TRUE(TanhBackward(ctx, y.view(), dy.view(), dy.view()).ok());
        EXPECT_TRUE(SameBits(dy, dx));
      }
    }
  }
}

TEST_F(TanhTest, BadArgumentsAreReported) {
  const ExecContext ctx;
  Tensor a = RandomTensor({3, 4}, DType::kF32, 20);
  Tensor b = RandomTensor({3, 5}, DType::kF32, 21);
  Tensor h = RandomTensor({3, 4}, DType::kBF16, 22);
  Tensor i = Tensor::Zeros({3, 4}, DType::kI32);

  absl::Status s = Tanh(ctx, a.view(), b.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Tanh: y has shape [3, 5], expected [3, 4]"));

  s = Tanh(ctx, i.view(), i.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Tanh: x has unsupported dtype i32"));

  s = Tanh(ctx, a.view(), h.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Tanh: y has dtype bf16, expected f32"));

  TensorView strided = b.view();  // Every other column of a [3, 5]: not contiguous.
  strided.shape = {3, 2};
  strided.strides = {5, 2};
  s = Tanh(ctx, strided, strided);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Tanh: x"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("must be contiguous"));

  s = TanhBackward(ctx, a.view(), b.view(), a.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("TanhBackward: dy has shape [3, 5]"));
  s = TanhBackward(ctx, a.view(), a.view(), h.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("TanhBackward: dx has dtype bf16"));

  // Devices: mixed devices are InvalidArgument (the view is never dereferenced). What CUDA
  // tensors get, with and without a GPU, is cuda_dispatch_test's.
  TensorView on_gpu(a.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  s = Tanh(ctx, a.view(), on_gpu);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Tanh: y is on cuda:0"));
}

}  // namespace
}  // namespace ops
}  // namespace mt
