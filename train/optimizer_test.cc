// Serial optimizer tests: unscaling, clipping by the global norm, weight decay only where the spec
// asks, skipped steps on inf/NaN; compared with a float64 AdamW written here.
#include "train/optimizer.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

struct Store {
  nn::ParameterStore store{0, 1};
  Store() {
    EXPECT_TRUE(store.Add({"w", {3, 5}, -1, nn::Init::kNormal, 0.5, true}).ok());
    EXPECT_TRUE(store.Add({"b", {5}, -1, nn::Init::kNormal, 0.5, false}).ok());
    EXPECT_TRUE(store.Allocate(3).ok());
  }
};

TEST(OptimizerTest, MatchesFloat64AdamWWithClippingAndDecayGroups) {
  Store s;
  OptimizerConfig c;
  c.weight_decay = 0.1f;
  c.clip_grad = 0.5;
  auto opt = Optimizer::Create(&s.store, c);
  ASSERT_TRUE(opt.ok());
  const int64_t n = s.store.NumLocalElements();
  std::vector<double> p(n), m(n, 0), v(n, 0);
  for (int64_t i = 0; i < n; ++i) p[i] = s.store.flat_values().data_as<float>()[i];
  ExecContext ec;
  const double divisor = 8.0, lr = 1e-2;
  for (int step = 1; step <= 5; ++step) {
    Tensor g = ::mt::testing::RandomTensor({n}, DType::kF32, 100 + step, -3, 3);
    std::memcpy(s.store.flat_grads().data, g.data(), g.nbytes());
    auto stats = opt->Step(ec, nullptr, nullptr, lr, divisor);
    ASSERT_TRUE(stats.ok()) << stats.status();
    // float64 reference.
    double norm = 0;
    std::vector<double> gd(n);
    for (int64_t i = 0; i < n; ++i) {
      gd[i] = static_cast<double>(g.data_as<float>()[i]) / divisor;
      norm += gd[i] * gd[i];
    }
    norm = std::sqrt(norm);
    EXPECT_NEAR(stats->grad_norm, norm, 1e-6 * norm);
    EXPECT_FALSE(stats->skipped);
    const double clip = std::min(1.0, 0.5 / (norm + 1e-6));
    for (int64_t i = 0; i < n; ++i) {
      const double gi = gd[i] * clip;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.999 * v[i] + 0.001 * gi * gi;
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.999, step));
      const double wd = i < 15 ? 0.1 : 0.0;  // "b" has weight_decay = false.
      p[i] -= lr * (mh / (std::sqrt(vh) + 1e-8) + wd * p[i]);
    }
  }
  EXPECT_TRUE(::mt::testing::AllClose(s.store.flat_values(), p, 1e-5, 1e-6));
  EXPECT_EQ(opt->step(), 5);
}

TEST(OptimizerTest, InfOrNanSkipsTheStepAndLeavesParametersAlone) {
  Store s;
  auto opt = Optimizer::Create(&s.store, OptimizerConfig{});
  ASSERT_TRUE(opt.ok());
  ExecContext ec;
  std::vector<float> before(s.store.flat_values().data_as<float>(),
                            s.store.flat_values().data_as<float>() + s.store.NumLocalElements());
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    s.store.ZeroGrads();
    s.store.grad(1).data_as<float>()[2] = bad;
    auto stats = opt->Step(ec, nullptr, nullptr, 1e-2, 1.0);
    ASSERT_TRUE(stats.ok());
    EXPECT_TRUE(stats->skipped);
    EXPECT_EQ(opt->step(), 0);
    EXPECT_EQ(std::memcmp(before.data(), s.store.flat_values().data, before.size() * 4), 0);
  }
  EXPECT_EQ(opt->Step(ec, nullptr, nullptr, 1e-2, 0.0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Mixed precision: an applied step refreshes the compute-dtype copies from the new f32 masters; a
// skipped step leaves masters and copies as they were.
TEST(OptimizerTest, AppliedStepsRefreshComputeWeightsAndSkippedStepsDoNot) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    nn::ParameterStore store(0, 1, dt);
    ASSERT_TRUE(store.Add({"w", {3, 5}, -1, nn::Init::kNormal, 0.5, true}).ok());
    ASSERT_TRUE(store.Add({"b", {5}, -1, nn::Init::kNormal, 0.5, false}).ok());
    ASSERT_TRUE(store.Allocate(3).ok());
    auto opt = Optimizer::Create(&store, OptimizerConfig{});
    ASSERT_TRUE(opt.ok());
    ExecContext ec;
    const int64_t n = store.NumLocalElements();
    auto copies = [&] { return ::mt::testing::ToDoubles(store.flat_compute_values()); };
    auto masters = [&] { return ::mt::testing::ToDoubles(store.flat_values()); };
    // The copies are the rounded masters, and differ from them (bf16/f16 drop bits).
    auto rounded = [&](const std::vector<double>& m) {
      return ::mt::testing::ToDoubles(::mt::testing::FromDoubles({n}, dt, m).view());
    };
    EXPECT_EQ(copies(), rounded(masters()));
    EXPECT_NE(copies(), masters());

    Tensor g = ::mt::testing::RandomTensor({n}, DType::kF32, 7, -1, 1);
    std::memcpy(store.flat_grads().data, g.data(), g.nbytes());
    const std::vector<double> before = masters();
    auto stats = opt->Step(ec, nullptr, nullptr, /*lr=*/0.05, /*grad_divisor=*/1.0);
    ASSERT_TRUE(stats.ok() && !stats->skipped);
    EXPECT_NE(masters(), before);
    EXPECT_EQ(copies(), rounded(masters()));

    const std::vector<double> masters_now = masters(), copies_now = copies();
    store.ZeroGrads();
    store.grad(0).data_as<float>()[4] = std::numeric_limits<float>::infinity();
    stats = opt->Step(ec, nullptr, nullptr, 0.05, 1.0);
    ASSERT_TRUE(stats.ok() && stats->skipped);
    EXPECT_EQ(masters(), masters_now);
    EXPECT_EQ(copies(), copies_now);
  }
}

}  // namespace
}  // namespace train
}  // namespace mt
