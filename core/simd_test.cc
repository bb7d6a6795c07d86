#include "core/simd.h"

#include <set>

#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace mt {
namespace {

TEST(SimdTest, TargetsAreDistinctBestFirstAndIncludeTheBaseline) {
  const std::vector<SimdTarget> targets = SimdTargets();
  ASSERT_FALSE(targets.empty());
  std::set<int64_t> bits;
  for (size_t i = 0; i < targets.size(); ++i) {
    EXPECT_FALSE(targets[i].name.empty());
    EXPECT_TRUE(bits.insert(targets[i].bit).second) << targets[i].name;
    // Highway numbers better targets with lower bits.
    if (i > 0) {
      EXPECT_LT(targets[i - 1].bit, targets[i].bit);
    }
  }
  // The build's baseline (the static target) runs on every machine the binary runs on.
  EXPECT_EQ(targets.back().bit, HWY_STATIC_TARGET);
  EXPECT_EQ(SimdTargetName(), targets.front().name);
}

TEST(SimdTest, ScopedTargetSwitchesAndRestores) {
  const std::vector<SimdTarget> targets = SimdTargets();
  for (const SimdTarget& t : targets) {
    ScopedSimdTarget scope(t);
    EXPECT_EQ(SimdTargetName(), t.name);
  }
  EXPECT_EQ(SimdTargetName(), targets.front().name);
}

}  // namespace
}  // namespace mt
