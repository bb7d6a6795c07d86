#include "experiments/common/stats.h"

#include <cmath>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(StatsTest, WilsonIntervalMatchesHandComputedValues) {
  // 8 of 10 at 95%: center (0.8 + 0.19207) / 1.38415 = 0.71683, half 0.27054 / 1.38415 *
  // ... = the published 0.4902 .. 0.9433.
  const Interval i = WilsonInterval(8, 10);
  EXPECT_NEAR(i.low, 0.4902, 1e-4);
  EXPECT_NEAR(i.high, 0.9433, 1e-4);
  const Interval zero = WilsonInterval(0, 20);
  EXPECT_EQ(zero.low, 0);
  EXPECT_NEAR(zero.high, 0.1611, 1e-4);
  EXPECT_EQ(WilsonInterval(0, 0).high, 1);
}

TEST(StatsTest, BinomialUpperTailAgainstDirectSums) {
  // P(X >= 3), X ~ Bin(4, 0.25) = 4 * 0.25^3 * 0.75 + 0.25^4 = 0.05078125.
  EXPECT_NEAR(BinomialUpperTail(3, 4, 0.25), 0.05078125, 1e-12);
  EXPECT_NEAR(BinomialUpperTail(1, 4, 0.25), 1 - std::pow(0.75, 4), 1e-12);
  EXPECT_EQ(BinomialUpperTail(0, 4, 0.25), 1);
  EXPECT_EQ(BinomialUpperTail(5, 4, 0.25), 0);
  // Large n against the float64 sum of exact terms by recurrence.
  const int n = 400;
  double term = std::pow(0.75, n), tail = 0;
  for (int i = 0; i <= n; ++i) {
    if (i >= 130) tail += term;
    term *= (n - i) / (i + 1.0) * (0.25 / 0.75);
  }
  EXPECT_NEAR(BinomialUpperTail(130, n, 0.25), tail, 1e-9 * tail + 1e-300);
  EXPECT_LT(BinomialUpperTail(130, n, 0.25), 1e-3);
}

TEST(StatsTest, TwoProportionZ) {
  // 60/100 vs 40/100: pooled 0.5, se sqrt(0.25 * 0.02) = 0.0707107, z = 0.2 / 0.0707107.
  EXPECT_NEAR(TwoProportionZ(60, 100, 40, 100), 2.8284271, 1e-6);
  EXPECT_EQ(TwoProportionZ(0, 10, 0, 10), 0);
  EXPECT_NEAR(NormalUpperTail(1.959963984540054), 0.025, 1e-9);
}

TEST(ComparePairedTest, CountsTheDisagreementsAndTestsThem) {
  auto c = ComparePaired({true, true, true, false, true}, {false, false, false, false, true});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->only_first, 3);
  EXPECT_EQ(c->only_second, 0);
  EXPECT_DOUBLE_EQ(c->p, 0.125);  // 3 of 3 disagreements by chance: 1/8.
  c = ComparePaired({false, true}, {true, true});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->only_second, 1);
  EXPECT_DOUBLE_EQ(c->p, 1.0);  // None for the first.
  c = ComparePaired({true}, {true});
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->p, 1.0);  // Never disagree.
  EXPECT_EQ(ComparePaired({true}, {true, false}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
