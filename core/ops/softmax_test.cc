#include "core/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::kFloatTypes;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::testing::HasSubstr;

const double kU32 = UnitRoundoff(DType::kF32);

// The float64 reference. `mask` is empty or the [B, Tk] padding mask as doubles.
std::vector<double> SoftmaxRef(const std::vector<double>& x, const Shape& shape, double scale,
                               bool causal, const std::vector<double>& mask) {
  const int64_t Tk = shape.back(), Tq = shape[shape.size() - 2];
  const int64_t R = static_cast<int64_t>(x.size()) / Tk;
  const int64_t rows_per_b = R / shape[0];
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t i = r % Tq, b = r / rows_per_b;
    auto visible = [&](int64_t j) {
      return (!causal || j <= i + (Tk - Tq)) && (mask.empty() || mask[b * Tk + j] != 0);
    };
    double m = -INFINITY;
    for (int64_t j = 0; j < Tk; ++j) {
      if (visible(j)) m = std::max(m, scale * x[r * Tk + j]);
    }
    if (m == -INFINITY) continue;  // Every key masked: zeros.
    double sum = 0;
    for (int64_t j = 0; j < Tk; ++j) {
      if (visible(j)) sum += std::exp(scale * x[r * Tk + j] - m);
    }
    for (int64_t j = 0; j < Tk; ++j) {
      if (visible(j)) y[r * Tk + j] = std::exp(scale * x[r * Tk + j] - m) / sum;
    }
  }
  return y;
}

// A [B, Tk] padding mask with random holes, whose last batch row is fully padded (when B > 1)
// and whose first batch row keeps key 0 (so that causal rows always see something there).
Tensor MakePaddingMask(int64_t B, int64_t Tk, uint64_t seed) {
  Tensor m = RandomInts({B, Tk}, DType::kI32, seed, 0, 3);  // About a third are padding.
  int32_t* p = m.data_as<int32_t>();
  p[0] = 1;
  if (B > 1) std::fill(p + (B - 1) * Tk, p + B * Tk, 0);
  return m;
}

struct Case {
  Shape shape;  // [B, ..., Tq, Tk]
  bool causal;
  bool padding;

  // The case's options: `scale`, its causal mask, and `mask` as the padding mask if it has one.
  SoftmaxOptions Options(float scale, const Tensor& mask) const {
    SoftmaxOptions opt;
    opt.scale = scale;
    opt.causal = causal ? CausalMask::kYes : CausalMask::kNo;
    if (padding) opt.padding_mask = &mask.view();
    return opt;
  }
};

std::string CaseName(const Case& c) {
  return absl::StrCat(ShapeToString(c.shape), c.causal ? " causal" : "",
                      c.padding ? " padding" : "");
}

// Every op runs on the calling thread alone and on a pool of three.
using SoftmaxTest = ::mt::testing::ThreadedOpTest;

TEST_F(SoftmaxTest, HandComputedRows) {
  const ExecContext ctx;
  Tensor x = FromDoubles({3, 3}, DType::kF32, {1, 2, 3, 1000, 1001, -1e9, -0.5, 0.25, 7});
  Tensor y = Tensor::Host({3, 3}, DType::kF32);
  ASSERT_TRUE(Softmax(ctx, x.view(), y.view()).ok());
  // Row 2: 1000 and 1001 would overflow exp without the max subtracted; -1e9 underflows to 0.
  const std::vector<double> want = {0.09003057317038046, 0.24472847105479764, 0.6652409557748218,
                                    0.2689414213699951,  0.7310585786300049,  0.0};
  std::vector<double> got = ToDoubles(y.view());
  got.resize(6);
  EXPECT_TRUE(AllClose(got, want, 8 * kU32, 0));

  // Causal with Tq = Tk = 3 and scale 2: row 0 sees key 0 only, row 2 sees all three. Row 1
  // sees x = [1000, 1001] * 2 -> [0.11920292202211755, 0.8807970779778823].
  SoftmaxOptions opt;
  opt.scale = 2.0f;
  opt.causal = CausalMask::kYes;
  ASSERT_TRUE(Softmax(ctx, x.view(), y.view(), opt).ok());
  got = ToDoubles(y.view());
  EXPECT_EQ(got[0], 1.0);
  EXPECT_EQ(got[1], 0.0);
  EXPECT_EQ(got[2], 0.0);
  EXPECT_TRUE(AllClose({got[3], got[4], got[5]}, {0.11920292202211755, 0.8807970779778823, 0.0},
                       8 * kU32, 0));
}

TEST_F(SoftmaxTest, ForwardMatchesReference) {
  const std::vector<Case> cases = {
      {{1, 1}, false, false},        {{2, 3, 5, 7}, false, false}, {{2, 3, 5, 7}, true, false},
      {{2, 3, 5, 7}, false, true},   {{3, 1, 17, 17}, true, true}, {{1, 2, 6, 3}, true, false},
      {{2, 4, 64, 129}, true, true},
  };
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Case& c : cases) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), CaseName(c), " threads ", ctx.num_threads()));
        const int64_t Tk = c.shape.back();
        Tensor x = RandomTensor(c.shape, dt, 1, -4.0, 4.0);
        Tensor mask = MakePaddingMask(c.shape[0], Tk, 2);
        const SoftmaxOptions opt = c.Options(0.7f, mask);
        Tensor y = Tensor::Host(c.shape, dt);
        ASSERT_TRUE(Softmax(ctx, x.view(), y.view(), opt).ok());
        const std::vector<double> want =
            SoftmaxRef(ToDoubles(x.view()), c.shape, opt.scale, c.causal,
                       c.padding ? ToDoubles(mask.view()) : std::vector<double>{});
        // exp in f32 (a few ulps, on arguments up to |2 * 4 * 0.7| so relative ~ 8 ulps), an
        // f32 sum of Tk terms, one rounding to the dtype; f16 subnormals are absolute.
        EXPECT_TRUE(AllClose(y.view(), want, UnitRoundoff(dt) + (16 + Tk) * kU32, 1e-7));
        const std::vector<double> got = ToDoubles(y.view());
        for (size_t i = 0; i < got.size(); ++i) {
          if (want[i] == 0.0) {
            ASSERT_EQ(got[i], 0.0) << "masked entry " << i;
          }
        }
      }
    }
  }
}

TEST_F(SoftmaxTest, BackwardMatchesFiniteDifferences) {
  const std::vector<Case> cases = {
      {{1, 1}, false, false},      {{1, 1, 1, 1}, true, true}, {{2, 3, 5}, false, false},
      {{2, 1, 3, 5}, true, false}, {{3, 2, 4, 7}, true, true}, {{2, 2, 5, 4}, true, true},
  };
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Case& c : cases) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), CaseName(c), " threads ", ctx.num_threads()));
        const int64_t Tk = c.shape.back();
        Tensor x = RandomTensor(c.shape, dt, 3, -2.0, 2.0);
        Tensor dy = RandomTensor(c.shape, dt, 4);
        Tensor mask = MakePaddingMask(c.shape[0], Tk, 5);
        const SoftmaxOptions opt = c.Options(0.6f, mask);
        Tensor y = Tensor::Host(c.shape, dt);
        ASSERT_TRUE(Softmax(ctx, x.view(), y.view(), opt).ok());
        Tensor dx = Tensor::Host(c.shape, dt);
        ASSERT_TRUE(SoftmaxBackward(ctx, y.view(), dy.view(), dx.view(), opt.scale).ok());

        const std::vector<double> dyd = ToDoubles(dy.view());
        const std::vector<double> maskd =
            c.padding ? ToDoubles(mask.view()) : std::vector<double>{};
        auto loss = [&](const std::vector<double>& v) {
          const std::vector<double> s = SoftmaxRef(v, c.shape, opt.scale, c.causal, maskd);
          double l = 0;
          for (size_t i = 0; i < s.size(); ++i) l += dyd[i] * s[i];
          return l;
        };
        const std::vector<double> want = NumericalGradient(loss, ToDoubles(x.view()));
        // From the rounded y (relative error u each) the error of dx_j is at most
        // 3 u scale y_j max|dy|; plus f32 sums of Tk terms and one rounding of dx.
        const double u = UnitRoundoff(dt);
        EXPECT_TRUE(AllClose(dx.view(), want, u, opt.scale * (4 * u + (8 + Tk) * kU32) + 1e-7));
        const std::vector<double> got = ToDoubles(dx.view());
        const std::vector<double> yd = ToDoubles(y.view());
        for (size_t i = 0; i < got.size(); ++i) {
          if (yd[i] == 0.0) {
            ASSERT_EQ(got[i], 0.0) << "masked entry " << i;
          }
        }
      }
    }
  }
}

// The f32 loops are SIMD kernels with runtime dispatch whose lane operations round once (the
// exponentials, the row maximum, the sums in f64 lanes): every target gives the same bits.
TEST_F(SoftmaxTest, ResultsDoNotDependOnThreadsOrSimdTargetAndMayRunInPlace) {
  const Shape shape = {3, 4, 65, 129};
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor x = RandomTensor(shape, dt, 6, -4.0, 4.0);
    Tensor dy = RandomTensor(shape, dt, 7);
    Tensor mask = MakePaddingMask(3, 129, 8);
    SoftmaxOptions opt;
    opt.scale = 0.125f;
    opt.causal = CausalMask::kYes;
    opt.padding_mask = &mask.view();
    std::vector<Tensor> out;
    for (const SimdTarget& target : SimdTargets()) {
      ScopedSimdTarget scope(target);
      for (const ExecContext& ctx : Contexts()) {
        Tensor y = Tensor::Host(shape, dt), dx = Tensor::Host(shape, dt);
        ASSERT_TRUE(Softmax(ctx, x.view(), y.view(), opt).ok());
        ASSERT_TRUE(SoftmaxBackward(ctx, y.view(), dy.view(), dx.view(), opt.scale).ok());
        out.push_back(std::move(y));
        out.push_back(std::move(dx));
      }
    }
    ASSERT_GE(out.size(), 4u);
    for (size_t k = 2; k < out.size(); k += 2) {
      EXPECT_TRUE(SameBits(out[k], out[0])) << "run " << k / 2;
      EXPECT_TRUE(SameBits(out[k + 1], out[1])) << "run " << k / 2;
    }

    const ExecContext ctx{&pool_};
    ASSERT_TRUE(SoftmaxBackward(ctx, out[0].view(), dy.view(), dy.view(), opt.scale).ok());
    EXPECT_TRUE(SameBits(dy, out[1]));
    ASSERT_TRUE(Softmax(ctx, x.view(), x.view(), opt).ok());
    EXPECT_TRUE(SameBits(x, out[0]));
  }
}

TEST_F(SoftmaxTest, BadArgumentsAreReported) {
  const ExecContext ctx;
  Tensor x = RandomTensor({2, 3, 4}, DType::kF32, 9);
  Tensor y = Tensor::Host({2, 3, 4}, DType::kF32);
  Tensor mask = MakePaddingMask(2, 4, 10);
  SoftmaxOptions opt;
  opt.padding_mask = &mask.view();
  ASSERT_TRUE(Softmax(ctx, x.view(), y.view(), opt).ok());

  Tensor y_bad = Tensor::Host({2, 4, 3}, DType::kF32);
  absl::Status s = Softmax(ctx, x.view(), y_bad.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Softmax: y has shape [2, 4, 3]"));

  Tensor x1 = RandomTensor({4}, DType::kF32, 11);
  s = Softmax(ctx, x1.view(), x1.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank >= 2"));

  Tensor xi = Tensor::Zeros({2, 3, 4}, DType::kI32);
  s = Softmax(ctx, xi.view(), xi.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("x has unsupported dtype i32"));

  Tensor yh = Tensor::Host({2, 3, 4}, DType::kF16);
  EXPECT_EQ(Softmax(ctx, x.view(), yh.view()).code(), absl::StatusCode::kInvalidArgument);

  TensorView strided = x.view();
  strided.shape = {2, 3, 2};
  strided.strides = {12, 4, 2};
  s = Softmax(ctx, strided, strided);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("must be contiguous"));

  opt.scale = INFINITY;
  EXPECT_EQ(Softmax(ctx, x.view(), y.view(), opt).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftmaxBackward(ctx, y.view(), y.view(), y.view(), NAN).code(),
            absl::StatusCode::kInvalidArgument);
  opt.scale = 1.0f;

  // Padding masks: wrong shape, wrong dtype, on x of rank 2, on another device.
  Tensor mask_bad = MakePaddingMask(3, 4, 12);
  opt.padding_mask = &mask_bad.view();
  s = Softmax(ctx, x.view(), y.view(), opt);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("padding_mask has shape [3, 4], expected [2, 4]"));
  Tensor mask64 = RandomInts({2, 4}, DType::kI64, 13, 0, 2);
  opt.padding_mask = &mask64.view();
  EXPECT_EQ(Softmax(ctx, x.view(), y.view(), opt).code(), absl::StatusCode::kUnimplemented);
  Tensor x2 = RandomTensor({2, 4}, DType::kF32, 14);
  opt.padding_mask = &mask.view();
  EXPECT_EQ(Softmax(ctx, x2.view(), x2.view(), opt).code(), absl::StatusCode::kInvalidArgument);
  TensorView mask_gpu(mask.data(), {2, 4}, DType::kI32, Device::Cuda(0));
  opt.padding_mask = &mask_gpu;
  EXPECT_EQ(Softmax(ctx, x.view(), y.view(), opt).code(), absl::StatusCode::kInvalidArgument);

  // Backward: mismatched shapes. (What CUDA views get, with and without a GPU, is
  // cuda_dispatch_test's.)
  EXPECT_EQ(SoftmaxBackward(ctx, y.view(), y_bad.view(), y.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ops
}  // namespace mt
