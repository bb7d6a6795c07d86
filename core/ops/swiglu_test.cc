// SwiGlu and SwiGluBackward on the CPU against float64: hand-computed values, odd shapes in every
// dtype (gates deep in both tails of the sigmoid), gradients against central differences,
// aliasing, thread-count invariance and argument errors.
#include "core/ops/swiglu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

double Silu(double g) { return g / (1.0 + std::exp(-g)); }

Vec Reference(const Vec& gate, const Vec& up) {
  Vec y(gate.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = Silu(gate[i]) * up[i];
  return y;
}

// Half the spacing of f16's subnormals (tiny outputs round absolutely, not relatively); bf16 and
// f32 outputs here stay far above their subnormal ranges.
double SubnormalHalfStep(DType dt) { return dt == DType::kF16 ? std::ldexp(1.0, -25) : 1e-30; }

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

class SwiGluTest : public ::testing::Test {
 protected:
  ThreadPool pool_{3};
  std::vector<ExecContext> Contexts() { return {ExecContext{}, ExecContext{&pool_}}; }
};

TEST_F(SwiGluTest, HandComputedValues) {
  // silu(0) = 0, silu(1) = 1 / (1 + e^-1) = 0.7310585786300049, silu(-1) = -0.2689414213699951.
  Tensor gate = FromDoubles({4}, DType::kF32, {0, 1, -1, 1});
  Tensor up = FromDoubles({4}, DType::kF32, {5, 2, 3, -1});
  Tensor y = Tensor::Host({4}, DType::kF32);
  ASSERT_TRUE(SwiGlu(ExecContext{}, gate.view(), up.view(), y.view()).ok());
  EXPECT_TRUE(AllClose(y.view(), {0, 1.4621171572600098, -0.8068242641099853, -0.7310585786300049},
                       8 * kU32, 0));
}

TEST_F(SwiGluTest, ForwardMatchesReference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{2, 5, 129}, Shape{301, 257}}) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        Tensor gate = RandomTensor(shape, dt, 1, -12.0, 12.0);
        Tensor up = RandomTensor(shape, dt, 2, -2.0, 2.0);
        Tensor y = RandomTensor(shape, dt, 3, 5.0, 6.0);
        ASSERT_TRUE(SwiGlu(ctx, gate.view(), up.view(), y.view()).ok());
        // expf within 2 ulp, then the sum, the division and two products in f32: relative error
        // below 8 u in f32 for every element; then the rounding to the dtype.
        EXPECT_TRUE(AllClose(y.view(), Reference(ToDoubles(gate.view()), ToDoubles(up.view())),
                             UnitRoundoff(dt) + 8 * kU32, SubnormalHalfStep(dt)));
      }
    }
  }
}

TEST_F(SwiGluTest, BackwardMatchesFiniteDifferences) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{2, 3, 11}}) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dt), ShapeToString(shape), " threads ", ctx.num_threads()));
        Tensor gate = RandomTensor(shape, dt, 4, -6.0, 6.0);
        Tensor up = RandomTensor(shape, dt, 5, -2.0, 2.0);
        Tensor dy = RandomTensor(shape, dt, 6);
        Tensor dgate = RandomTensor(shape, dt, 7, 5.0, 6.0);
        Tensor dup = RandomTensor(shape, dt, 8, 5.0, 6.0);
        ASSERT_TRUE(
            SwiGluBackward(ctx, gate.view(), up.view(), dy.view(), dgate.view(), dup.view()).ok());
        const Vec g = ToDoubles(gate.view()), u = ToDoubles(up.view()), w = ToDoubles(dy.view());
        auto loss = [&](const Vec& gv, const Vec& uv) {
          const Vec y = Reference(gv, uv);
          double l = 0;
          for (size_t i = 0; i < y.size(); ++i) l += w[i] * y[i];
          return l;
        };
        const Vec want_dgate = NumericalGradient([&](const Vec& v) { return loss(v, u); }, g);
        const Vec want_dup = NumericalGradient([&](const Vec& v) { return loss(g, v); }, u);
        // A handful of f32 operations per element (|silu'| <= 1.1, |silu(g)| <= |g|), then the
        // rounding to the dtype; the central differences add ~1e-9.
        EXPECT_TRUE(AllClose(dgate.view(), want_dgate, UnitRoundoff(dt), 32 * kU32 * 2.2));
        EXPECT_TRUE(AllClose(dup.view(), want_dup, UnitRoundoff(dt), 32 * kU32 * 6));
      }
    }
  }
}

// The f32 loops are a SIMD kernel with runtime dispatch (swiglu_simd.h). At every target the CPU
// supports: within the float64 bounds above, in both tails of the sigmoid, and each element's bits
// independent of where it falls in the tensor (vector body or tail), which the tensor-parallel
// split of the MLP relies on.
TEST_F(SwiGluTest, EverySimdTargetMatchesFloat64AndPositionChangesNothing) {
  const int64_t n = 1000;
  const Tensor gate = RandomTensor({n}, DType::kF32, 21, -90.0, 90.0);
  const Tensor up = RandomTensor({n}, DType::kF32, 22, -2.0, 2.0);
  const Tensor dy = RandomTensor({n}, DType::kF32, 23);
  const Vec g = ToDoubles(gate.view()), u = ToDoubles(up.view()), w = ToDoubles(dy.view());
  Vec want_dgate(n), want_dup(n);
  for (int64_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-g[i]));
    want_dgate[i] = w[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
    want_dup[i] = w[i] * g[i] * s;
  }
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    Tensor y = Tensor::Host({n}, DType::kF32), dgate = Tensor::Host({n}, DType::kF32);
    Tensor dup = Tensor::Host({n}, DType::kF32);
    ASSERT_TRUE(SwiGlu(ExecContext{}, gate.view(), up.view(), y.view()).ok());
    ASSERT_TRUE(
        SwiGluBackward(ExecContext{}, gate.view(), up.view(), dy.view(), dgate.view(), dup.view())
            .ok());
    EXPECT_TRUE(AllClose(y.view(), Reference(g, u), 9 * kU32, 1e-30));
    // dgate = (dy u) s (1 + g (1 - s)): the factor 1 + g (1 - s) carries an absolute error of a
    // few u (1 + |g|) (1 - s keeps only the absolute accuracy of s as s nears 1, and the factor
    // crosses zero near g = -1.28), so each element is checked against 8 u of its value plus
    // 8 u |dy u| s (1 + |g|).
    const std::vector<double> got_dgate = ToDoubles(dgate.view());
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double s = 1.0 / (1.0 + std::exp(-g[i]));
      const double tol =
          8 * kU32 *
          (std::fabs(want_dgate[i]) + std::fabs(w[i] * u[i]) * s * (1 + std::fabs(g[i])));
      if (!(std::fabs(got_dgate[i] - want_dgate[i]) <= tol + 1e-30)) ++bad;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_TRUE(AllClose(dup.view(), want_dup, 8 * kU32, 1e-30));
    // Each element alone (a tail of one), and the tensor from its second element on.
    const float* pg = gate.data_as<float>();
    const float* pu = up.data_as<float>();
    const float* pd = dy.data_as<float>();
    for (int64_t i : {int64_t{0}, int64_t{7}, n - 1}) {
      TensorView gi(const_cast<float*>(pg + i), {1}, DType::kF32, Device::Cpu());
      TensorView ui(const_cast<float*>(pu + i), {1}, DType::kF32, Device::Cpu());
      TensorView di(const_cast<float*>(pd + i), {1}, DType::kF32, Device::Cpu());
      Tensor yi = Tensor::Host({1}, DType::kF32), dgi = Tensor::Host({1}, DType::kF32);
      Tensor dui = Tensor::Host({1}, DType::kF32);
      ASSERT_TRUE(SwiGlu(ExecContext{}, gi, ui, yi.view()).ok());
      ASSERT_TRUE(SwiGluBackward(ExecContext{}, gi, ui, di, dgi.view(), dui.view()).ok());
      EXPECT_EQ(std::memcmp(yi.data(), y.data_as<float>() + i, 4), 0) << i;
      EXPECT_EQ(std::memcmp(dgi.data(), dgate.data_as<float>() + i, 4), 0) << i;
      EXPECT_EQ(std::memcmp(dui.data(), dup.data_as<float>() + i, 4), 0) << i;
    }
    TensorView rest_g(const_cast<float*>(pg + 1), {n - 1}, DType::kF32, Device::Cpu());
    TensorView rest_u(const_cast<float*>(pu + 1), {n - 1}, DType::kF32, Device::Cpu());
    Tensor rest_y = Tensor::Host({n - 1}, DType::kF32);
    ASSERT_TRUE(SwiGlu(ExecContext{}, rest_g, rest_u, rest_y.view()).ok());
    EXPECT_EQ(std::memcmp(rest_y.data(), y.data_as<float>() + 1, 4 * (n - 1)), 0);
  }
}

TEST_F(SwiGluTest, OutputsMayAliasInputsAndThreadsChangeNothing) {
  const Shape shape = {257, 129};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    const Tensor gate = RandomTensor(shape, dt, 9, -8.0, 8.0);
    const Tensor up = RandomTensor(shape, dt, 10);
    const Tensor dy = RandomTensor(shape, dt, 11);
    Tensor y = Tensor::Host(shape, dt), dgate = Tensor::Host(shape, dt);
    Tensor dup = Tensor::Host(shape, dt);
    ASSERT_TRUE(SwiGlu(ExecContext{}, gate.view(), up.view(), y.view()).ok());
    ASSERT_TRUE(
        SwiGluBackward(ExecContext{}, gate.view(), up.view(), dy.view(), dgate.view(), dup.view())
            .ok());
    const ExecContext ctx{&pool_};
    // y over gate, then over up.
    Tensor g2 = RandomTensor(shape, dt, 9, -8.0, 8.0), u2 = RandomTensor(shape, dt, 10);
    ASSERT_TRUE(SwiGlu(ctx, g2.view(), up.view(), g2.view()).ok());
    EXPECT_TRUE(SameBytes(g2, y));
    ASSERT_TRUE(SwiGlu(ctx, gate.view(), u2.view(), u2.view()).ok());
    EXPECT_TRUE(SameBytes(u2, y));
    // dgate over gate and dup over up; then dgate over dy and dup over gate.
    Tensor g3 = RandomTensor(shape, dt, 9, -8.0, 8.0), u3 = RandomTensor(shape, dt, 10);
    ASSERT_TRUE(SwiGluBackward(ctx, g3.view(), u3.view(), dy.view(), g3.view(), u3.view()).ok());
    EXPECT_TRUE(SameBytes(g3, dgate));
    EXPECT_TRUE(SameBytes(u3, dup));
    Tensor g4 = RandomTensor(shape, dt, 9, -8.0, 8.0), d4 = RandomTensor(shape, dt, 11);
    ASSERT_TRUE(SwiGluBackward(ctx, g4.view(), up.view(), d4.view(), d4.view(), g4.view()).ok());
    EXPECT_TRUE(SameBytes(d4, dgate));
    EXPECT_TRUE(SameBytes(g4, dup));
  }
}

TEST_F(SwiGluTest, BadArgumentsAreReported) {
  const ExecContext ctx;
  Tensor a = RandomTensor({3, 4}, DType::kF16, 12), b = RandomTensor({3, 4}, DType::kF16, 13);
  Tensor c = Tensor::Host({3, 4}, DType::kF16), d = Tensor::Host({3, 4}, DType::kF16);
  auto expect_error = [](const absl::Status& s, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(text));
  };
  ASSERT_TRUE(SwiGlu(ctx, a.view(), b.view(), c.view()).ok());
  Tensor wide = Tensor::Host({3, 5}, DType::kF16);
  expect_error(SwiGlu(ctx, a.view(), wide.view(), c.view()), absl::StatusCode::kInvalidArgument,
               "SwiGlu: up has shape [3, 5], expected [3, 4] (that of gate)");
  Tensor bf = Tensor::Host({3, 4}, DType::kBF16);
  expect_error(SwiGlu(ctx, a.view(), b.view(), bf.view()), absl::StatusCode::kInvalidArgument,
               "y has dtype bf16, expected f16");
  expect_error(SwiGluBackward(ctx, a.view(), b.view(), c.view(), d.view(), d.view()),
               absl::StatusCode::kInvalidArgument, "dgate and dup are the same memory");
  expect_error(SwiGluBackward(ctx, a.view(), b.view(), c.view(), wide.view(), d.view()),
               absl::StatusCode::kInvalidArgument, "SwiGluBackward: dgate has shape [3, 5]");
  Tensor ints = Tensor::Zeros({3, 4}, DType::kI32);
  expect_error(SwiGlu(ctx, ints.view(), ints.view(), ints.view()), absl::StatusCode::kUnimplemented,
               "gate has unsupported dtype i32");

  TensorView gpu(a.data(), {3, 4}, DType::kF16, Device::Cuda(0));
  expect_error(SwiGlu(ctx, a.view(), b.view(), gpu), absl::StatusCode::kInvalidArgument,
               "y is on cuda:0");
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(SwiGlu(ctx, gpu, gpu, gpu)));
  TensorView gpu2(b.data(), {3, 4}, DType::kF16, Device::Cuda(0));
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(SwiGluBackward(ctx, gpu, gpu, gpu, gpu, gpu2)));
}

}  // namespace
}  // namespace ops
}  // namespace mt
