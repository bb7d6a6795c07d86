// The element-wise ops on the CPU (BiasAdd, BiasGrad, Gelu and its backward, Add, Scale,
// Convert, Fill) against float64 references and finite differences, thread-count independence
// and argument errors. Dropout and BiasDropoutAdd are in dropout_test.cc, the CUDA backend in
// elementwise_cuda_test.cc.
#include "core/ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_device.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::GeluReference;
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
using ElementwiseTest = ::mt::testing::ThreadedOpTest;

TEST_F(ElementwiseTest, BiasAddMatchesReference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : kOddShapes) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        const int64_t N = shape.back();
        Tensor x = RandomTensor(shape, dt, 1);
        Tensor bias = RandomTensor({N}, dt, 2);
        Tensor y = Tensor::Host(shape, dt);
        ASSERT_TRUE(BiasAdd(ctx, x.view(), bias.view(), y.view()).ok());
        const std::vector<double> xd = ToDoubles(x.view()), bd = ToDoubles(bias.view());
        std::vector<double> want(xd.size());
        for (size_t i = 0; i < xd.size(); ++i) want[i] = xd[i] + bd[i % N];
        // One f32 rounding of the sum, one rounding to the dtype (f16 subnormals: absolute).
        EXPECT_TRUE(AllClose(y.view(), want, UnitRoundoff(dt) + 2 * kU32, 1e-7));
        // In place.
        ASSERT_TRUE(BiasAdd(ctx, x.view(), bias.view(), x.view()).ok());
        EXPECT_TRUE(SameBits(x, y));
      }
    }
  }
}

TEST_F(ElementwiseTest, BiasGradMatchesReferenceAndFiniteDifferences) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{2, 5, 129}, Shape{2000, 129}}) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        const int64_t N = shape.back();
        const int64_t R = NumElements(shape) / N;
        Tensor dy = RandomTensor(shape, dt, 3);
        Tensor dbias = RandomTensor({N}, dt, 4);  // Garbage: must be overwritten.
        ASSERT_TRUE(BiasGrad(ctx, dy.view(), dbias.view()).ok());
        const std::vector<double> dyd = ToDoubles(dy.view());
        std::vector<double> want(N, 0.0);
        for (size_t i = 0; i < dyd.size(); ++i) want[i % N] += dyd[i];
        // f32 partial sums over at most R terms (|dy| <= 1), then one rounding to the dtype.
        EXPECT_TRUE(AllClose(dbias.view(), want, UnitRoundoff(dt), 2 * R * kU32));
        if (dt != DType::kF32) {
          // Mixed precision: an f32 dbias keeps the f32 sums (no rounding to dy's dtype), and is
          // bitwise what the 16-bit output rounds from.
          Tensor dbias32 = RandomTensor({N}, DType::kF32, 4);
          ASSERT_TRUE(BiasGrad(ctx, dy.view(), dbias32.view()).ok());
          EXPECT_TRUE(AllClose(dbias32.view(), want, 0, 2 * R * kU32));
          Tensor rounded = Tensor::Host({N}, dt);
          ASSERT_TRUE(Convert(ctx, dbias32.view(), rounded.view()).ok());
          EXPECT_TRUE(SameBits(rounded, dbias));
        }

        if (dt == DType::kF32 && R * N < 1000) {
          // BiasGrad is the gradient of L(bias) = sum(dy * BiasAdd(x, bias)) with respect to bias.
          const std::vector<double> xd = ToDoubles(RandomTensor(shape, dt, 5).view());
          auto loss = [&](const std::vector<double>& b) {
            double l = 0;
            for (size_t i = 0; i < xd.size(); ++i) l += dyd[i] * (xd[i] + b[i % N]);
            return l;
          };
          const std::vector<double> b0 = ToDoubles(RandomTensor({N}, dt, 6).view());
          EXPECT_TRUE(AllClose(dbias.view(), NumericalGradient(loss, b0), 1e-6, 1e-6));
        }
      }
    }
  }
}

TEST_F(ElementwiseTest, GeluMatchesReference) {
  // Hand-computed values of the tanh approximation (not the erf GeLU: gelu(1) = 0.84134...).
  Tensor x = FromDoubles({4}, DType::kF32, {1.0, -1.0, 2.0, -0.5});
  Tensor y = Tensor::Host({4}, DType::kF32);
  ASSERT_TRUE(Gelu(ExecContext{}, x.view(), y.view()).ok());
  EXPECT_TRUE(AllClose(
      y.view(), {0.8411919906082768, -0.15880800939172324, 1.954597694087775, -0.15428599017485606},
      4 * kU32, 0));

  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : kOddShapes) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        Tensor x = RandomTensor(shape, dt, 7, -4.0, 4.0);
        Tensor y = Tensor::Host(shape, dt);
        ASSERT_TRUE(Gelu(ctx, x.view(), y.view()).ok());
        std::vector<double> want = ToDoubles(x.view());
        for (double& v : want) v = GeluReference(v);
        // tanh in f32 is good to a few ulps; 1 + tanh cancels for x < 0, where the absolute
        // error is about |x| ulps of 1.
        EXPECT_TRUE(AllClose(y.view(), want, UnitRoundoff(dt) + 8 * kU32, 32 * kU32));
      }
    }
  }
}

TEST_F(ElementwiseTest, GeluBackwardMatchesFiniteDifferences) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{5, 129}}) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        Tensor x = RandomTensor(shape, dt, 8, -4.0, 4.0);
        Tensor dy = RandomTensor(shape, dt, 9);
        Tensor dx = Tensor::Host(shape, dt);
        ASSERT_TRUE(GeluBackward(ctx, x.view(), dy.view(), dx.view()).ok());
        const std::vector<double> dyd = ToDoubles(dy.view());
        auto loss = [&](const std::vector<double>& xs) {
          double l = 0;
          for (size_t i = 0; i < xs.size(); ++i) l += dyd[i] * GeluReference(xs[i]);
          return l;
        };
        // Each element of the loss is separable, so the numerical gradient of the sum is the
        // element-wise derivative times dy.
        const std::vector<double> want = NumericalGradient(loss, ToDoubles(x.view()));
        EXPECT_TRUE(AllClose(dx.view(), want, UnitRoundoff(dt) + 16 * kU32, 64 * kU32 + 1e-7));
        // dx may alias dy.
        ASSERT_TRUE(GeluBackward(ctx, x.view(), dy.view(), dy.view()).ok());
        EXPECT_TRUE(SameBits(dy, dx));
      }
    }
  }
}

// GeLU's SIMD kernel (gelu_simd.h) at each target this machine runs: the float64 values within
// the tolerances above, and each element's bits independent of where it falls in a range (whole
// vectors or the padded tail), which tensor-parallel invariance relies on.
TEST_F(ElementwiseTest, GeluAtEverySimdTargetMatchesFloat64AndIgnoresPosition) {
  const int64_t n = 203;
  Tensor x = RandomTensor({n}, DType::kF32, 21, -6.0, 6.0);
  Tensor dy = RandomTensor({n}, DType::kF32, 22);
  const std::vector<double> xd = ToDoubles(x.view()), dyd = ToDoubles(dy.view());
  std::vector<double> want_y(n), want_dx(n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = xd[i], k = std::sqrt(2.0 / M_PI), c = 0.044715;
    const double t = std::tanh(k * (v + c * v * v * v));
    want_y[i] = GeluReference(v);
    want_dx[i] = dyd[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v));
  }
  auto shifted = [](const Tensor& t, int64_t k) {
    return TensorView(t.data_as<float>() + k, {t.numel() - k}, DType::kF32, Device::Cpu());
  };
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    Tensor y = Tensor::Host({n}, DType::kF32), dx = Tensor::Host({n}, DType::kF32);
    ASSERT_TRUE(Gelu(ExecContext{}, x.view(), y.view()).ok());
    ASSERT_TRUE(GeluBackward(ExecContext{}, x.view(), dy.view(), dx.view()).ok());
    EXPECT_TRUE(AllClose(y.view(), want_y, 8 * kU32, 32 * kU32));
    EXPECT_TRUE(AllClose(dx.view(), want_dx, 16 * kU32, 64 * kU32));
    for (int64_t k = 1; k <= 17; ++k) {
      Tensor y2 = Tensor::Host({n}, DType::kF32), dx2 = Tensor::Host({n}, DType::kF32);
      ASSERT_TRUE(Gelu(ExecContext{}, shifted(x, k), shifted(y2, k)).ok());
      ASSERT_TRUE(GeluBackward(ExecContext{}, shifted(x, k), shifted(dy, k), shifted(dx2, k)).ok());
      EXPECT_EQ(0, std::memcmp(y.data_as<float>() + k, y2.data_as<float>() + k, (n - k) * 4)) << k;
      EXPECT_EQ(0, std::memcmp(dx.data_as<float>() + k, dx2.data_as<float>() + k, (n - k) * 4))
          << k;
    }
  }
}

TEST_F(ElementwiseTest, ErfGeluAndItsBackwardMatchFloat64) {
  // x Phi(x) in float64: gelu(1) = 0.8413447460685429 (not the tanh form's 0.84119...).
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  Tensor one = FromDoubles({2}, DType::kF32, {1.0, -2.0});
  Tensor out = Tensor::Host({2}, DType::kF32);
  ASSERT_TRUE(Gelu(ExecContext{}, one.view(), out.view(), GeluForm::kErf).ok());
  // 1 + erf cancels for x < 0: an absolute error of a few ulps of 1 there.
  EXPECT_TRUE(AllClose(out.view(), {0.8413447460685429, -0.04550026389635842}, 4 * kU32, 4 * kU32));
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      const Shape shape{5, 129};
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " threads ", ctx.num_threads()));
      Tensor x = RandomTensor(shape, dt, 17, -4.0, 4.0);
      Tensor y = Tensor::Host(shape, dt);
      ASSERT_TRUE(Gelu(ctx, x.view(), y.view(), GeluForm::kErf).ok());
      std::vector<double> want = ToDoubles(x.view());
      for (double& v : want) v = gelu(v);
      // erf and exp in f32 are good to a few ulps; 1 + erf cancels for x < 0 as 1 + tanh does.
      EXPECT_TRUE(AllClose(y.view(), want, UnitRoundoff(dt) + 8 * kU32, 32 * kU32));
      Tensor dy = RandomTensor(shape, dt, 18);
      Tensor dx = Tensor::Host(shape, dt);
      ASSERT_TRUE(GeluBackward(ctx, x.view(), dy.view(), dx.view(), GeluForm::kErf).ok());
      const std::vector<double> dyd = ToDoubles(dy.view());
      auto loss = [&](const std::vector<double>& xs) {
        double l = 0;
        for (size_t i = 0; i < xs.size(); ++i) l += dyd[i] * gelu(xs[i]);
        return l;
      };
      EXPECT_TRUE(AllClose(dx.view(), NumericalGradient(loss, ToDoubles(x.view())),
                           UnitRoundoff(dt) + 16 * kU32, 64 * kU32 + 1e-7));
    }
  }
}

TEST_F(ElementwiseTest, AddAndScaleMatchReference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : kOddShapes) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        Tensor a = RandomTensor(shape, dt, 10);
        Tensor b = RandomTensor(shape, dt, 11);
        Tensor out = Tensor::Host(shape, dt);
        ASSERT_TRUE(Add(ctx, a.view(), b.view(), out.view()).ok());
        const std::vector<double> ad = ToDoubles(a.view()), bd = ToDoubles(b.view());
        std::vector<double> want(ad.size());
        for (size_t i = 0; i < ad.size(); ++i) want[i] = ad[i] + bd[i];
        EXPECT_TRUE(AllClose(out.view(), want, UnitRoundoff(dt) + 2 * kU32, 1e-7));

        const float alpha = -1.7f;
        ASSERT_TRUE(Scale(ctx, a.view(), alpha, out.view()).ok());
        for (size_t i = 0; i < ad.size(); ++i) want[i] = alpha * ad[i];
        EXPECT_TRUE(AllClose(out.view(), want, UnitRoundoff(dt) + 2 * kU32, 1e-7));

        // In place: a += b.
        Tensor sum = Tensor::Host(shape, dt);
        ASSERT_TRUE(Add(ctx, a.view(), b.view(), sum.view()).ok());
        ASSERT_TRUE(Add(ctx, a.view(), b.view(), a.view()).ok());
        EXPECT_TRUE(SameBits(a, sum));
      }
    }
  }
}

// The f32 kernels of Add, Scale, BiasAdd and BiasGrad (elementwise_simd.h) at each SIMD target
// this machine runs: every element is the one f32 rounding of the scalar formula, wherever it
// falls in a vector or a row.
TEST_F(ElementwiseTest, F32KernelsAtEverySimdTargetRoundOncePerElement) {
  const int64_t R = 37, N = 29;  // Rows that start at every offset into a vector.
  Tensor a = RandomTensor({R, N}, DType::kF32, 40);
  Tensor b = RandomTensor({R, N}, DType::kF32, 41);
  Tensor bias = RandomTensor({N}, DType::kF32, 42);
  const float* pa = a.data_as<float>();
  const float* pb = b.data_as<float>();
  const float* pbias = bias.data_as<float>();
  const float alpha = -1.7f;
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    for (const ExecContext& ctx : Contexts()) {
      SCOPED_TRACE(absl::StrCat(target.name, " threads ", ctx.num_threads()));
      Tensor sum = Tensor::Host({R, N}, DType::kF32), scaled = Tensor::Host({R, N}, DType::kF32);
      Tensor biased = Tensor::Host({R, N}, DType::kF32), dbias = Tensor::Host({N}, DType::kF32);
      ASSERT_TRUE(Add(ctx, a.view(), b.view(), sum.view()).ok());
      ASSERT_TRUE(Scale(ctx, a.view(), alpha, scaled.view()).ok());
      ASSERT_TRUE(BiasAdd(ctx, a.view(), bias.view(), biased.view()).ok());
      ASSERT_TRUE(BiasGrad(ctx, a.view(), dbias.view()).ok());
      for (int64_t i = 0; i < R * N; ++i) {
        ASSERT_EQ(FloatBits(sum.data_as<float>()[i]), FloatBits(pa[i] + pb[i])) << i;
        ASSERT_EQ(FloatBits(scaled.data_as<float>()[i]), FloatBits(alpha * pa[i])) << i;
        ASSERT_EQ(FloatBits(biased.data_as<float>()[i]), FloatBits(pa[i] + pbias[i % N])) << i;
      }
      // BiasGrad: ceil(R / 16) blocks of equal rows, each summed in row order, then the blocks.
      const int64_t blocks = (R + 15) / 16, rows = (R + blocks - 1) / blocks;
      for (int64_t c = 0; c < N; ++c) {
        float total = 0.0f;
        for (int64_t r0 = 0; r0 < R; r0 += rows) {
          float block = 0.0f;
          for (int64_t r = r0; r < std::min(R, r0 + rows); ++r) block += pa[r * N + c];
          total += block;
        }
        ASSERT_EQ(FloatBits(dbias.data_as<float>()[c]), FloatBits(total)) << c;
      }
    }
  }
}

TEST_F(ElementwiseTest, ConvertRoundsToNearestEven) {
  const ExecContext serial;
  // Hand-picked ties: 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7 (ties to 1);
  // 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (ties to the even 1 + 2^-6). f16: the
  // same with 2^-11; 65520 is halfway between 65504 and 2^16 and overflows to infinity.
  Tensor x = FromDoubles({3}, DType::kF32, {1 + std::ldexp(1, -8), 1 + 3 * std::ldexp(1, -8), -3});
  Tensor y = Tensor::Host({3}, DType::kBF16);
  ASSERT_TRUE(Convert(serial, x.view(), y.view()).ok());
  EXPECT_EQ(ToDoubles(y.view()), (std::vector<double>{1.0, 1 + std::ldexp(1, -6), -3}));
  Tensor xh = FromDoubles({3}, DType::kF32, {1 + std::ldexp(1, -11), 65520.0, -65504.0});
  Tensor yh = Tensor::Host({3}, DType::kF16);
  ASSERT_TRUE(Convert(serial, xh.view(), yh.view()).ok());
  EXPECT_EQ(ToDoubles(yh.view()), (std::vector<double>{1.0, INFINITY, -65504.0}));

  // Every pair of float dtypes: the result is the source value rounded once to the target.
  for (const ExecContext& ctx : Contexts()) {
    for (DType from : kFloatTypes) {
      for (DType to : kFloatTypes) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(from), " -> ", DTypeName(to), " threads ", ctx.num_threads()));
        const Shape shape = {257, 129};
        Tensor x = RandomTensor(shape, from, 12, -100.0, 100.0);
        Tensor y = Tensor::Host(shape, to);
        ASSERT_TRUE(Convert(ctx, x.view(), y.view()).ok());
        // FromDoubles rounds via f32, which is exact for values that come from a float dtype.
        Tensor want = FromDoubles(shape, to, ToDoubles(x.view()));
        EXPECT_TRUE(SameBits(y, want));
      }
    }
  }
}

TEST_F(ElementwiseTest, FillRoundsOnceAndTruncatesIntegers) {
  for (const ExecContext& ctx : Contexts()) {
    SCOPED_TRACE(absl::StrCat("threads ", ctx.num_threads()));
    // Just above a bf16 tie: rounding through f32 would land on the tie and round down to 1.
    Tensor b = Tensor::Host({3, 17}, DType::kBF16);
    ASSERT_TRUE(Fill(ctx, b.view(), 1 + std::ldexp(1, -8) + std::ldexp(1, -30)).ok());
    EXPECT_EQ(ToDoubles(b.view()), std::vector<double>(51, 1 + std::ldexp(1, -7)));
    Tensor h = Tensor::Host({257, 129}, DType::kF16);
    ASSERT_TRUE(Fill(ctx, h.view(), -(1 + std::ldexp(1, -11) + std::ldexp(1, -30))).ok());
    EXPECT_EQ(ToDoubles(h.view()), std::vector<double>(257 * 129, -(1 + std::ldexp(1, -10))));
    Tensor f = Tensor::Host({5}, DType::kF32);
    ASSERT_TRUE(Fill(ctx, f.view(), 0.1).ok());
    EXPECT_EQ(ToDoubles(f.view()), std::vector<double>(5, static_cast<float>(0.1)));

    Tensor i32 = Tensor::Host({7}, DType::kI32);
    ASSERT_TRUE(Fill(ctx, i32.view(), -7.9).ok());
    EXPECT_EQ(ToDoubles(i32.view()), std::vector<double>(7, -7.0));
    Tensor i64 = Tensor::Host({3}, DType::kI64);
    ASSERT_TRUE(Fill(ctx, i64.view(), std::ldexp(1, 40) + 0.5).ok());
    EXPECT_EQ(i64.data_as<int64_t>()[2], int64_t{1} << 40);
    Tensor u16 = Tensor::Host({3}, DType::kU16);
    ASSERT_TRUE(Fill(ctx, u16.view(), 65535.0).ok());
    EXPECT_EQ(u16.data_as<uint16_t>()[1], 65535);

    EXPECT_EQ(Fill(ctx, i32.view(), 3e9).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Fill(ctx, u16.view(), -1.0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Fill(ctx, i64.view(), NAN).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(ElementwiseTest, ResultsDoNotDependOnTheThreadCount) {
  const Shape shape = {2001, 129};  // Many chunks for the pool.
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor x = RandomTensor(shape, dt, 18);
    Tensor b = RandomTensor({129}, dt, 19);
    DropoutArgs args;
    args.p = 0.2f;
    args.seed = 5;
    std::vector<Tensor> outs;
    for (const ExecContext& ctx : Contexts()) {
      Tensor y = Tensor::Host(shape, dt), g = Tensor::Host(shape, dt);
      Tensor d = Tensor::Host(shape, dt), db = Tensor::Host({129}, dt);
      ASSERT_TRUE(BiasAdd(ctx, x.view(), b.view(), y.view()).ok());
      ASSERT_TRUE(Gelu(ctx, y.view(), g.view()).ok());
      ASSERT_TRUE(Dropout(ctx, g.view(), args, d.view()).ok());
      ASSERT_TRUE(BiasGrad(ctx, d.view(), db.view()).ok());
      outs.push_back(std::move(d));
      outs.push_back(std::move(db));
    }
    EXPECT_TRUE(SameBits(outs[0], outs[2]));
    EXPECT_TRUE(SameBits(outs[1], outs[3]));
  }
}

TEST_F(ElementwiseTest, BadArgumentsAreReported) {
  const ExecContext ctx;
  Tensor a = RandomTensor({3, 4}, DType::kF32, 20);
  Tensor b = RandomTensor({3, 5}, DType::kF32, 21);
  Tensor h = RandomTensor({3, 4}, DType::kBF16, 22);
  Tensor i = Tensor::Zeros({3, 4}, DType::kI32);
  Tensor bias = RandomTensor({5}, DType::kF32, 23);

  absl::Status s = Add(ctx, a.view(), b.view(), a.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Add: b has shape [3, 5]"));

  s = Gelu(ctx, i.view(), i.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Gelu: x has unsupported dtype i32"));

  s = Gelu(ctx, a.view(), h.view());  // Mixed dtypes.
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("y has dtype bf16"));

  TensorView strided = b.view();  // Every other column of a [3, 5]: not contiguous.
  strided.shape = {3, 2};
  strided.strides = {5, 2};
  s = Scale(ctx, strided, 2.0f, strided);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("must be contiguous"));

  s = BiasAdd(ctx, a.view(), bias.view(), a.view());  // bias [5] for x [3, 4].
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("BiasAdd: bias has shape [5]"));
  EXPECT_EQ(BiasAdd(ctx, a.view(), h.view().Flatten2D().Slice(0, 1), a.view()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BiasGrad(ctx, a.view(), bias.view()).code(), absl::StatusCode::kInvalidArgument);
  {
    // dbias may be f32 for a 16-bit dy, but not 16-bit for an f32 dy, nor another 16-bit type.
    Tensor dy16 = RandomTensor({3, 4}, DType::kBF16, 1);
    Tensor db16 = Tensor::Host({4}, DType::kF16);
    Tensor db_bf16 = Tensor::Host({4}, DType::kBF16);
    Tensor dy32 = RandomTensor({3, 4}, DType::kF32, 2);
    s = BiasGrad(ctx, dy16.view(), db16.view());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("BiasGrad: dbias has dtype f16, expected bf16 (the dtype of dy) or f32"));
    EXPECT_EQ(BiasGrad(ctx, dy32.view(), db_bf16.view()).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(GeluBackward(ctx, a.view(), b.view(), a.view()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Convert(ctx, a.view(), b.view()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Convert(ctx, a.view(), i.view()).code(), absl::StatusCode::kUnimplemented);
  // Converting in place across dtypes would overwrite unread input.
  TensorView a_as_bf16(a.data(), {3, 4}, DType::kBF16);
  EXPECT_EQ(Convert(ctx, a.view(), a_as_bf16).code(), absl::StatusCode::kInvalidArgument);

  // Devices: mixed devices are InvalidArgument; a CUDA view is Unimplemented without a CUDA
  // device (or build) and InvalidArgument with one (its memory is on the host). These views are
  // never dereferenced.
  TensorView on_gpu(a.data(), {3, 4}, DType::kF32, Device::Cuda(0));
  s = Add(ctx, a.view(), on_gpu, a.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("b is on cuda:0"));
  TensorView bias_gpu(bias.data(), {4}, DType::kF32, Device::Cuda(0));
  EXPECT_EQ(BiasAdd(ctx, a.view(), bias_gpu, a.view()).code(), absl::StatusCode::kInvalidArgument);
  s = Gelu(ctx, on_gpu, on_gpu);
  if (cuda::DeviceCount() == 0) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(s.message()), HasSubstr("Gelu: not implemented for cuda:0"));
  } else {
    // With a GPU, the CUDA kernel refuses a view whose memory is really on the host.
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("points to host memory"));
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
