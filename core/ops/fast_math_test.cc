#include "core/ops/fast_math.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

TEST(FastMathTest, ExpNonPositiveMatchesLibmToFewUlps) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f * static_cast<float>(i) / 2000000.0f;
    const double want = std::exp(static_cast<double>(x));
    const double got = internal::ExpNonPositive(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 3e-7) << worst;
  EXPECT_EQ(internal::ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(internal::ExpNonPositive(-200.0f), 0.0f);
  EXPECT_EQ(internal::ExpNonPositive(-INFINITY), 0.0f);
}

}  // namespace
}  // namespace ops
}  // namespace mt
