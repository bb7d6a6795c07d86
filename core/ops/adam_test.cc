#include "core/ops/adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::MaxAbs;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::mt::testing::WriteDoubles;

const double kU32 = UnitRoundoff(DType::kF32);

// The header's formulas in float64, from the same (f32) hyperparameters.
struct RefAdam {
  std::vector<double> p, m, v;

  void Step(const std::vector<double>& grad, const AdamArgs& a) {
    const double b1 = a.beta1, b2 = a.beta2, lr = a.lr, eps = a.eps, wd = a.weight_decay;
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(a.step));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(a.step));
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] * static_cast<double>(a.grad_scale);
      if (a.mode == WeightDecayMode::kAdamL2) g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double update = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
      if (a.mode == WeightDecayMode::kAdamW) {
        p[i] -= lr * (update + wd * p[i]);
      } else {
        p[i] -= lr * update;
      }
    }
  }
};

TEST(AdamTest, FirstAdamWStepMovesEachParameterByLrTimesSignMinusDecay) {
  // With m = v = 0 and step 1: m_hat = g and v_hat = g^2, so the update is g / (|g| + eps) =
  // sign(g) up to eps / |g|, and AdamW subtracts lr * (sign(g) + wd * p).
  const int64_t n = 37;
  const ExecContext ctx;
  AdamArgs args;
  args.lr = 1e-3f;
  args.weight_decay = 0.1f;
  args.step = 1;
  Tensor p = RandomTensor({n}, DType::kF32, 1);
  // |g| in [0.1, 1] with random signs, so eps / |g| <= 1e-7.
  std::vector<double> g = ToDoubles(RandomTensor({n}, DType::kF32, 2, 0.1, 1.0).view());
  for (int64_t i = 0; i < n; i += 2) g[i] = -g[i];
  Tensor grad = FromDoubles({n}, DType::kF32, g);
  Tensor m = Tensor::Zeros({n}, DType::kF32), v = Tensor::Zeros({n}, DType::kF32);
  const std::vector<double> p0 = ToDoubles(p.view());
  ASSERT_TRUE(AdamUpdate(ctx, p.view(), grad.view(), m.view(), v.view(), args).ok());
  std::vector<double> expect_p(n), expect_m(n), expect_v(n);
  const double lr = args.lr, wd = args.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    expect_p[i] = p0[i] - lr * ((g[i] > 0 ? 1.0 : -1.0) + wd * p0[i]);
    // The betas are f32: 1 - 0.999f is 0.00099998713..., not 0.001.
    expect_m[i] = (1.0 - static_cast<double>(args.beta1)) * g[i];
    expect_v[i] = (1.0 - static_cast<double>(args.beta2)) * g[i] * g[i];
  }
  // eps / |g| <= 1e-7 relative to the unit step, plus f32 roundings of the step and of p.
  EXPECT_TRUE(AllClose(p.view(), expect_p, 2 * kU32, lr * (1e-7 + 16 * kU32)));
  EXPECT_TRUE(AllClose(m.view(), expect_m, 8 * kU32, 0));
  EXPECT_TRUE(AllClose(v.view(), expect_v, 8 * kU32, 0));
}

TEST(AdamTest, FirstL2StepFollowsTheSignOfTheDecayedGradient) {
  // kAdamL2: g' = g + wd * p, then p -= lr * sign(g'). Decay large enough to flip some signs.
  const int64_t n = 17;
  AdamArgs args;
  args.lr = 0.01f;
  args.weight_decay = 0.5f;
  args.mode = WeightDecayMode::kAdamL2;
  Tensor p = RandomTensor({n}, DType::kF32, 3, -1.0, 1.0);
  Tensor grad = RandomTensor({n}, DType::kF32, 4, -1.0, 1.0);
  Tensor m = Tensor::Zeros({n}, DType::kF32), v = Tensor::Zeros({n}, DType::kF32);
  const auto p0 = ToDoubles(p.view()), g = ToDoubles(grad.view());
  std::vector<double> expect(n);
  double min_abs = 1e9;
  for (int64_t i = 0; i < n; ++i) {
    const double gd = g[i] + 0.5 * p0[i];
    min_abs = std::min(min_abs, std::fabs(gd));
    expect[i] = p0[i] - 0.01 * (gd > 0 ? 1.0 : -1.0);
  }
  ASSERT_GT(min_abs, 1e-4);  // The seed keeps every g' away from 0.
  ASSERT_TRUE(AdamUpdate(ExecContext{}, p.view(), grad.view(), m.view(), v.view(), args).ok());
  EXPECT_TRUE(AllClose(p.view(), expect, 2 * kU32, 0.01 * (1e-8 / min_abs + 64 * kU32)));
}

TEST(AdamTest, SeveralStepsMatchFloat64AtEverySimdTarget) {
  ThreadPool pool(3);
  const int kSteps = 10;
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    for (ThreadPool* pl : {static_cast<ThreadPool*>(nullptr), &pool}) {
      for (WeightDecayMode mode : {WeightDecayMode::kAdamW, WeightDecayMode::kAdamL2}) {
        for (float grad_scale : {1.0f, 0.25f}) {
          for (float wd : {0.0f, 0.1f}) {
            for (int64_t n : {1, 3, 17, 129, 4099}) {
              for (int64_t first_step : {int64_t{1}, int64_t{1000000}}) {
                SCOPED_TRACE(::testing::Message()
                             << (mode == WeightDecayMode::kAdamW ? "AdamW" : "AdamL2") << " scale "
                             << grad_scale << " wd " << wd << " n " << n << " first step "
                             << first_step << " pool " << (pl != nullptr));
                const ExecContext ctx{pl};
                AdamArgs args;
                args.lr = 1e-2f;
                args.beta1 = 0.9f;
                args.beta2 = 0.95f;
                args.eps = 1e-6f;
                args.weight_decay = wd;
                args.mode = mode;
                args.grad_scale = grad_scale;
                Tensor p = RandomTensor({n}, DType::kF32, n);
                // Late steps start from warm moments (v > 0), as a resumed run would.
                Tensor m = first_step == 1 ? Tensor::Zeros({n}, DType::kF32)
                                           : RandomTensor({n}, DType::kF32, n + 1, -0.1, 0.1);
                Tensor v = first_step == 1 ? Tensor::Zeros({n}, DType::kF32)
                                           : RandomTensor({n}, DType::kF32, n + 2, 0.01, 0.1);
                RefAdam ref{ToDoubles(p.view()), ToDoubles(m.view()), ToDoubles(v.view())};
                for (int s = 0; s < kSteps; ++s) {
                  args.step = first_step + s;
                  Tensor grad = RandomTensor({n}, DType::kF32, 1000 * s + n, -2.0, 2.0);
                  ASSERT_TRUE(
                      AdamUpdate(ctx, p.view(), grad.view(), m.view(), v.view(), args).ok());
                  ref.Step(ToDoubles(grad.view()), args);
                }
                // Each step adds a few f32 roundings: relative to the moments, and for p relative
                // to p plus a few u32 of the O(lr) step.
                const double steps = kSteps;
                const double g_max = 2.0 * grad_scale + wd * (1.0 + MaxAbs(ref.p));
                EXPECT_TRUE(
                    AllClose(m.view(), ref.m, 0, 8 * steps * kU32 * (g_max + MaxAbs(ref.m))));
                EXPECT_TRUE(AllClose(v.view(), ref.v, 8 * steps * kU32, 0));
                EXPECT_TRUE(
                    AllClose(p.view(), ref.p, 4 * steps * kU32, 64 * steps * kU32 * args.lr));
              }
            }
          }
        }
      }
    }
  }
}

// adam.h's update written out in f32, one element at a time: what every SIMD target must give
// bit for bit (the CUDA kernel performs the same roundings).
void ScalarAdamF32(const AdamArgs& a, float* p, const float* grad, float* m, float* v, int64_t n) {
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), a.step));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), a.step));
  const bool adamw = a.mode == WeightDecayMode::kAdamW;
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * a.grad_scale;
    if (!adamw) g += a.weight_decay * p[i];
    m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * (g * g);
    const float update = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + a.eps);
    p[i] = adamw ? p[i] - a.lr * (update + a.weight_decay * p[i]) : p[i] - a.lr * update;
  }
}

TEST(AdamTest, EverySimdTargetGivesTheBitsOfTheScalarF32Formula) {
  ThreadPool pool(2);
  const int64_t n = 40009;  // Not a multiple of any vector width: the scalar tail runs too.
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    for (WeightDecayMode mode : {WeightDecayMode::kAdamW, WeightDecayMode::kAdamL2}) {
      SCOPED_TRACE(::testing::Message() << target.name << " mode " << static_cast<int>(mode));
      AdamArgs args;
      args.lr = 3e-3f;
      args.weight_decay = 0.1f;
      args.mode = mode;
      args.step = 5;
      args.grad_scale = 0.5f;
      Tensor p = RandomTensor({n}, DType::kF32, 11);
      Tensor g = RandomTensor({n}, DType::kF32, 12, -3.0, 3.0);
      Tensor m = RandomTensor({n}, DType::kF32, 13, -0.1, 0.1);
      Tensor v = RandomTensor({n}, DType::kF32, 14, 0.0, 0.1);
      std::vector<float> ep(p.data_as<float>(), p.data_as<float>() + n);
      std::vector<float> em(m.data_as<float>(), m.data_as<float>() + n);
      std::vector<float> ev(v.data_as<float>(), v.data_as<float>() + n);
      ScalarAdamF32(args, ep.data(), g.data_as<float>(), em.data(), ev.data(), n);
      ASSERT_TRUE(
          AdamUpdate(ExecContext{&pool}, p.view(), g.view(), m.view(), v.view(), args).ok());
      EXPECT_EQ(0, std::memcmp(ep.data(), p.data(), n * 4));
      EXPECT_EQ(0, std::memcmp(em.data(), m.data(), n * 4));
      EXPECT_EQ(0, std::memcmp(ev.data(), v.data(), n * 4));
    }
  }
}

TEST(AdamTest, ResultIsBitwiseIndependentOfThreads) {
  ThreadPool pool(3);
  const int64_t n = 100003;
  AdamArgs args;
  args.weight_decay = 0.01f;
  args.step = 7;
  std::vector<std::vector<float>> results;
  for (ThreadPool* pl : {static_cast<ThreadPool*>(nullptr), &pool}) {
    Tensor p = RandomTensor({n}, DType::kF32, 1);
    Tensor g = RandomTensor({n}, DType::kF32, 2);
    Tensor m = RandomTensor({n}, DType::kF32, 3, -0.1, 0.1);
    Tensor v = RandomTensor({n}, DType::kF32, 4, 0.0, 0.1);
    ASSERT_TRUE(AdamUpdate(ExecContext{pl}, p.view(), g.view(), m.view(), v.view(), args).ok());
    std::vector<float> all(3 * n);
    std::memcpy(all.data(), p.data(), n * 4);
    std::memcpy(all.data() + n, m.data(), n * 4);
    std::memcpy(all.data() + 2 * n, v.data(), n * 4);
    results.push_back(std::move(all));
  }
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4));
}

// bf16 nearest-even of an f32's bits, written out here (finite inputs), as an independent check of
// the rounding AdamUpdateAndRound fuses into the update.
uint16_t Bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

TEST(AdamTest, UpdateAndRoundIsTheUpdateThenTheConversion) {
  ThreadPool pool(2);
  const int64_t n = 100003;  // Several chunks and a SIMD tail.
  AdamArgs args;
  args.weight_decay = 0.01f;
  args.step = 5;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (ThreadPool* pl : {static_cast<ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE(DTypeName(dt));
      const ExecContext ctx{pl};
      Tensor p = RandomTensor({n}, DType::kF32, 1), g = RandomTensor({n}, DType::kF32, 2);
      Tensor m = RandomTensor({n}, DType::kF32, 3, -0.1, 0.1);
      Tensor v = RandomTensor({n}, DType::kF32, 4, 0.0, 0.1);
      Tensor ep = RandomTensor({n}, DType::kF32, 1),
             em = RandomTensor({n}, DType::kF32, 3, -0.1, 0.1);
      Tensor ev = RandomTensor({n}, DType::kF32, 4, 0.0, 0.1);
      Tensor c = Tensor::Zeros({n}, dt), ec = Tensor::Zeros({n}, dt);
      ASSERT_TRUE(
          AdamUpdateAndRound(ctx, p.view(), g.view(), m.view(), v.view(), args, c.view()).ok());
      ASSERT_TRUE(AdamUpdate(ctx, ep.view(), g.view(), em.view(), ev.view(), args).ok());
      ASSERT_TRUE(Convert(ctx, ep.view(), ec.view()).ok());
      EXPECT_EQ(0, std::memcmp(ep.data(), p.data(), n * 4));
      EXPECT_EQ(0, std::memcmp(em.data(), m.data(), n * 4));
      EXPECT_EQ(0, std::memcmp(ev.data(), v.data(), n * 4));
      EXPECT_EQ(0, std::memcmp(ec.data(), c.data(), n * 2));
      if (dt == DType::kBF16) {
        const uint16_t* bits = static_cast<const uint16_t*>(c.data());
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) wrong += bits[i] != Bf16Bits(p.data_as<float>()[i]);
        EXPECT_EQ(wrong, 0);
      }
    }
  }
  // Bad compute copies: refused, nothing changed.
  const ExecContext ctx;
  Tensor p = RandomTensor({8}, DType::kF32, 1), g = RandomTensor({8}, DType::kF32, 2);
  Tensor m = Tensor::Zeros({8}, DType::kF32), v = Tensor::Zeros({8}, DType::kF32);
  const auto p0 = ToDoubles(p.view());
  Tensor f32 = Tensor::Zeros({8}, DType::kF32), short16 = Tensor::Zeros({7}, DType::kBF16);
  EXPECT_EQ(
      AdamUpdateAndRound(ctx, p.view(), g.view(), m.view(), v.view(), args, f32.view()).code(),
      absl::StatusCode::kUnimplemented);
  EXPECT_EQ(
      AdamUpdateAndRound(ctx, p.view(), g.view(), m.view(), v.view(), args, short16.view()).code(),
      absl::StatusCode::kInvalidArgument);
  const TensorView inside(p.data(), {8}, DType::kBF16);  // The first half of p's bytes.
  const absl::Status s =
      AdamUpdateAndRound(ctx, p.view(), g.view(), m.view(), v.view(), args, inside);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s;
  EXPECT_TRUE(AllClose(p.view(), p0, 0, 0));
}

TEST(AdamTest, BadArgumentsAreErrorsAndChangeNothing) {
  const ExecContext ctx;
  const int64_t n = 5;
  Tensor p = RandomTensor({n}, DType::kF32, 1);
  Tensor g = RandomTensor({n}, DType::kF32, 2);
  Tensor m = Tensor::Zeros({n}, DType::kF32), v = Tensor::Zeros({n}, DType::kF32);
  const auto p0 = ToDoubles(p.view());
  auto run = [&](const AdamArgs& a) {
    return AdamUpdate(ctx, p.view(), g.view(), m.view(), v.view(), a);
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  AdamArgs a;
  a.step = 0;
  absl::Status s = run(a);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("AdamUpdate: step is 0"), std::string::npos) << s;
  a.step = -3;
  EXPECT_EQ(run(a).code(), kInvalid);
  a = AdamArgs{};
  a.beta1 = 1.0f;
  EXPECT_EQ(run(a).code(), kInvalid);
  a = AdamArgs{};
  a.beta2 = -0.1f;
  EXPECT_EQ(run(a).code(), kInvalid);
  a = AdamArgs{};
  a.lr = -1e-3f;
  s = run(a);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("lr"), std::string::npos) << s;
  a = AdamArgs{};
  a.eps = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(run(a).code(), kInvalid);
  a = AdamArgs{};
  a.weight_decay = std::numeric_limits<float>::infinity();
  EXPECT_EQ(run(a).code(), kInvalid);
  // Tensors.
  a = AdamArgs{};
  Tensor g_short = RandomTensor({n - 1}, DType::kF32, 2);
  s = AdamUpdate(ctx, p.view(), g_short.view(), m.view(), v.view(), a);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("grad has shape [4]"), std::string::npos) << s;
  Tensor v_2d = Tensor::Zeros({1, n}, DType::kF32);
  EXPECT_EQ(AdamUpdate(ctx, p.view(), g.view(), m.view(), v_2d.view(), a).code(), kInvalid);
  Tensor m_bf16 = Tensor::Zeros({n}, DType::kBF16);
  s = AdamUpdate(ctx, p.view(), g.view(), m_bf16.view(), v.view(), a);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("m has unsupported dtype bf16"), std::string::npos) << s;
  Tensor big = RandomTensor({n, 2}, DType::kF32, 3);
  TensorView strided = big.view();
  strided.shape = {n, 1};
  TensorView p2 = p.view();
  p2.shape = {n, 1};
  p2.strides = {1, 1};
  TensorView g2 = g.view(), m2 = m.view(), v2 = v.view();
  g2.shape = m2.shape = v2.shape = {n, 1};
  g2.strides = m2.strides = v2.strides = {1, 1};
  EXPECT_EQ(AdamUpdate(ctx, p2, strided, m2, v2, a).code(), kInvalid);
  TensorView cp = p.view(), cg = g.view(), cm = m.view(), cv = v.view();
  cp.device = cg.device = cm.device = cv.device = Device::Cuda(0);
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(AdamUpdate(ctx, cp, cg, cm, cv, a)));
  EXPECT_EQ(AdamUpdate(ctx, p.view(), cg, m.view(), v.view(), a).code(), kInvalid);
  EXPECT_TRUE(AllClose(p.view(), p0, 0, 0));
  EXPECT_TRUE(AllClose(m.view(), std::vector<double>(n, 0.0), 0, 0));
  // An empty tensor is a no-op.
  Tensor e = Tensor::Zeros({0}, DType::kF32);
  EXPECT_TRUE(AdamUpdate(ctx, e.view(), e.view(), e.view(), e.view(), a).ok());
}

}  // namespace
}  // namespace ops
}  // namespace mt
