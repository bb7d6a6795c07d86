#include "train/flops.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

// The paper's 8.3B config on 512 GPUs: 15.1 PFLOP/s is 76% of 512 x 39 TFLOP/s; check the formula
// against a hand expansion instead of that (time-dependent) figure.
TEST(FlopsTest, MatchesHandExpansion) {
  const double B = 512, s = 1024, L = 72, h = 3072, V = 51200;
  const double expect = 72 * B * s * L * h * h + 72 * B * s * L * h * h * s / (12 * h) +
                        72 * B * s * L * h * h * V / (12 * L * h);
  EXPECT_NEAR(ModelFlopsPerIteration(512, 1024, 72, 3072, 51200, false), expect, 1e-9 * expect);
  // Dominant term 72 B s L h^2 = 2.56e17 FLOPs; the total is within 15% above it.
  const double f = ModelFlopsPerIteration(512, 1024, 72, 3072, 51200, false);
  EXPECT_GT(f, 72 * B * s * L * h * h);
  EXPECT_LT(f, 1.15 * 72 * B * s * L * h * h);
  // Recompute: 96 / 72 = 4/3 more on the dominant term.
  EXPECT_NEAR(ModelFlopsPerIteration(1, 1024, 40, 1536, 51200, true),
              96.0 * 1024 * 40 * 1536.0 * 1536 * (1 + 1024 / (6.0 * 1536) + 51200 / (16.0 * 40 * 1536)),
              1.0);
}

}  // namespace
}  // namespace train
}  // namespace mt
