// Rope and RopeBackward on the CPU against a long-double reference: a hand-computed row, odd
// shapes in every dtype, positions far from zero (where an f32 angle would be off by 1e-3), the
// backward as the transpose, thread-count invariance, in-place use and argument errors.
#include "core/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::testing::HasSubstr;

using Vec = std::vector<double>;

const double kU32 = UnitRoundoff(DType::kF32);

double Largest(const Vec& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// The rotation of rope.h in long double over rows of D (row r at position offset + r % T);
// direction -1 rotates by the negative angle (the backward).
Vec Rotate(const Vec& x, int64_t T, int64_t D, double base, int64_t offset, int direction) {
  Vec y(x.size());
  const int64_t half = D / 2;
  for (size_t r = 0; r < x.size() / D; ++r) {
    const long double position = static_cast<long double>(offset + static_cast<int64_t>(r) % T);
    for (int64_t i = 0; i < half; ++i) {
      const long double angle =
          direction * position * std::exp(-2.0L * i / D * std::log(static_cast<long double>(base)));
      const long double c = std::cos(angle), s = std::sin(angle);
      const long double u = x[r * D + i], v = x[r * D + i + half];
      y[r * D + i] = static_cast<double>(u * c - v * s);
      y[r * D + i + half] = static_cast<double>(v * c + u * s);
    }
  }
  return y;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

struct RopeCase {
  Shape shape;
  double base;
  int64_t offset;
};

const RopeCase kCases[] = {
    {{1, 2}, 10000.0, 0},
    {{3, 5, 6}, 10000.0, 7},
    {{2, 3, 7, 64}, 10000.0, 0},
    {{1, 2, 33, 10}, 500000.0, 40000},
    {{2, 1, 5, 128}, 10000.0, 40000},
    {{4, 3, 2}, 2.0, 123},
};

class RopeTest : public ::testing::Test {
 protected:
  ThreadPool pool_{3};
  std::vector<ExecContext> Contexts() { return {ExecContext{}, ExecContext{&pool_}}; }
};

TEST_F(RopeTest, HandComputedRow) {
  // D = 4, base 100: theta = [1, 0.1]; one row at position 2: angles 2 and 0.2.
  Tensor x = FromDoubles({1, 1, 1, 4}, DType::kF32, {1, 2, 3, 4});
  Tensor y = Tensor::Host({1, 1, 1, 4}, DType::kF32);
  ASSERT_TRUE(Rope(ExecContext{}, x.view(), RopeArgs{100.0, 2}, y.view()).ok());
  EXPECT_TRUE(AllClose(
      y.view(), {-3.1440391170241875, 1.1654558325022384, -0.33914308281574557, 4.317604972955089},
      0, 16 * kU32));
}

TEST_F(RopeTest, ForwardAndBackwardMatchReference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const RopeCase& c : kCases) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(c.shape), " base ", c.base,
                                  " offset ", c.offset, " threads ", ctx.num_threads()));
        const int64_t T = c.shape[c.shape.size() - 2], D = c.shape.back();
        const RopeArgs args{c.base, c.offset};
        Tensor x = RandomTensor(c.shape, dt, 1, -2.0, 2.0);
        Tensor y = RandomTensor(c.shape, dt, 2, 5.0, 6.0);  // Overwritten.
        ASSERT_TRUE(Rope(ctx, x.view(), args, y.view()).ok());
        const Vec xd = ToDoubles(x.view());
        // cos and sin rounded to f32 (u each), two f32 products and a sum: below 4 u (|u| + |v|)
        // per element; then the rounding to the dtype. An angle formed in f32 at position 40000
        // would be off by ~2e-3.
        const double atol = 8 * kU32 * Largest(xd);
        EXPECT_TRUE(
            AllClose(y.view(), Rotate(xd, T, D, c.base, c.offset, 1), UnitRoundoff(dt), atol));
        Tensor dx = Tensor::Host(c.shape, dt);
        ASSERT_TRUE(RopeBackward(ctx, x.view(), args, dx.view()).ok());
        EXPECT_TRUE(
            AllClose(dx.view(), Rotate(xd, T, D, c.base, c.offset, -1), UnitRoundoff(dt), atol));
      }
    }
  }
}

TEST_F(RopeTest, BackwardIsTheTransposeAndUndoesTheForward) {
  const Shape shape = {2, 3, 9, 16};
  const RopeArgs args{10000.0, 5};
  Tensor x = RandomTensor(shape, DType::kF32, 3);
  Tensor w = RandomTensor(shape, DType::kF32, 4);
  Tensor y = Tensor::Host(shape, DType::kF32), dx = Tensor::Host(shape, DType::kF32);
  ASSERT_TRUE(Rope(ExecContext{}, x.view(), args, y.view()).ok());
  ASSERT_TRUE(RopeBackward(ExecContext{}, w.view(), args, dx.view()).ok());
  // <Rope(x), w> = <x, RopeBackward(w)>.
  const Vec xd = ToDoubles(x.view()), wd = ToDoubles(w.view());
  const Vec yd = ToDoubles(y.view()), dxd = ToDoubles(dx.view());
  double lhs = 0, rhs = 0, scale = 0;
  for (size_t i = 0; i < xd.size(); ++i) {
    lhs += yd[i] * wd[i];
    rhs += xd[i] * dxd[i];
    scale += std::fabs(xd[i] * wd[i]);
  }
  EXPECT_NEAR(lhs, rhs, 16 * kU32 * scale);
  EXPECT_GT(std::fabs(lhs), 1.0) << "degenerate case";
  // RopeBackward(Rope(x)) = x.
  ASSERT_TRUE(RopeBackward(ExecContext{}, y.view(), args, y.view()).ok());
  EXPECT_TRUE(AllClose(y.view(), xd, 0, 16 * kU32));
}

TEST_F(RopeTest, ResultsDoNotDependOnTheThreadCountAndMayRunInPlace) {
  const Shape shape = {3, 4, 301, 64};
  const RopeArgs args{10000.0, 17};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor x = RandomTensor(shape, dt, 5);
    Tensor serial = Tensor::Host(shape, dt), threaded = Tensor::Host(shape, dt);
    ASSERT_TRUE(Rope(ExecContext{}, x.view(), args, serial.view()).ok());
    ASSERT_TRUE(Rope(ExecContext{&pool_}, x.view(), args, threaded.view()).ok());
    EXPECT_TRUE(SameBytes(serial, threaded));
    Tensor back = Tensor::Host(shape, dt);
    ASSERT_TRUE(RopeBackward(ExecContext{&pool_}, x.view(), args, back.view()).ok());
    ASSERT_TRUE(RopeBackward(ExecContext{&pool_}, x.view(), args, x.view()).ok());
    EXPECT_TRUE(SameBytes(x, back));
    ASSERT_TRUE(Rope(ExecContext{&pool_}, serial.view(), args, serial.view()).ok());
    ASSERT_TRUE(Rope(ExecContext{&pool_}, threaded.view(), args, back.view()).ok());
    EXPECT_TRUE(SameBytes(serial, back));
  }
}

TEST_F(RopeTest, BadArgumentsAreReported) {
  const ExecContext ctx;
  Tensor x = RandomTensor({2, 3, 4}, DType::kBF16, 6);
  Tensor y = Tensor::Host({2, 3, 4}, DType::kBF16);
  auto expect_error = [](const absl::Status& s, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(text));
  };
  ASSERT_TRUE(Rope(ctx, x.view(), RopeArgs{}, y.view()).ok());

  Tensor odd = RandomTensor({2, 3, 5}, DType::kBF16, 7);
  expect_error(Rope(ctx, odd.view(), RopeArgs{}, odd.view()), absl::StatusCode::kInvalidArgument,
               "Rope: x (bf16[2, 3, 5] on cpu) must be [..., T, D] with an even head dim");
  Tensor flat = RandomTensor({4}, DType::kBF16, 8);
  expect_error(RopeBackward(ctx, flat.view(), RopeArgs{}, flat.view()),
               absl::StatusCode::kInvalidArgument, "RopeBackward: dy (bf16[4] on cpu) must be");
  for (double base : {0.0, -2.0, double{NAN}, double{INFINITY}}) {
    expect_error(Rope(ctx, x.view(), RopeArgs{base, 0}, y.view()),
                 absl::StatusCode::kInvalidArgument, "must be finite and positive");
  }
  expect_error(Rope(ctx, x.view(), RopeArgs{10000.0, -1}, y.view()),
               absl::StatusCode::kInvalidArgument, "position_offset = -1 must be >= 0");
  Tensor y_shape = Tensor::Host({2, 4, 4}, DType::kBF16);
  expect_error(Rope(ctx, x.view(), RopeArgs{}, y_shape.view()), absl::StatusCode::kInvalidArgument,
               "y has shape [2, 4, 4], expected [2, 3, 4]");
  Tensor dx_f32 = Tensor::Host({2, 3, 4}, DType::kF32);
  expect_error(RopeBackward(ctx, x.view(), RopeArgs{}, dx_f32.view()),
               absl::StatusCode::kInvalidArgument, "dx has dtype f32, expected bf16");
  Tensor xi = Tensor::Zeros({2, 3, 4}, DType::kI32);
  expect_error(Rope(ctx, xi.view(), RopeArgs{}, xi.view()), absl::StatusCode::kUnimplemented,
               "x has unsupported dtype i32");

  TensorView x_gpu(x.data(), {2, 3, 4}, DType::kBF16, Device::Cuda(0));
  expect_error(Rope(ctx, x.view(), RopeArgs{}, x_gpu), absl::StatusCode::kInvalidArgument,
               "y is on cuda:0");
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(Rope(ctx, x_gpu, RopeArgs{}, x_gpu)));
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(RopeBackward(ctx, x_gpu, RopeArgs{}, x_gpu)));
}

}  // namespace
}  // namespace ops
}  // namespace mt
