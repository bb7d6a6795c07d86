#include "train/loss_scaler.h"

#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

TEST(LossScalerTest, DynamicScaleFollowsMegatronRules) {
  LossScalerConfig c;
  c.dynamic = true;
  c.growth_interval = 3;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 4294967296.0);
  s.Update(true);  // Hysteresis 2: the first overflow only uses it up.
  EXPECT_EQ(s.scale(), 4294967296.0);
  s.Update(true);  // The second halves.
  EXPECT_EQ(s.scale(), 2147483648.0);
  s.Update(true);  // Hysteresis stays used up until the scale grows again.
  EXPECT_EQ(s.scale(), 1073741824.0);
  for (int i = 0; i < 3; ++i) s.Update(false);  // growth_interval clean steps double it.
  EXPECT_EQ(s.scale(), 2147483648.0);
  s.Update(true);  // Hysteresis restored by the growth.
  EXPECT_EQ(s.scale(), 2147483648.0);
  s.Update(false);
  s.Update(false);
  s.Update(true);  // An overflow resets the growth tracker.
  EXPECT_EQ(s.scale(), 1073741824.0);
}

TEST(LossScalerTest, NeverBelowMinAndStaticIsOne) {
  LossScalerConfig c;
  c.dynamic = true;
  c.initial_scale = 4;
  c.hysteresis = 1;
  LossScaler s(c);
  for (int i = 0; i < 10; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 1.0);
  LossScaler fixed(LossScalerConfig{});
  fixed.Update(true);
  EXPECT_EQ(fixed.scale(), 1.0);
}

TEST(LossScalerTest, SerializeRoundTrip) {
  LossScalerConfig c;
  c.dynamic = true;
  c.growth_interval = 5;
  LossScaler a(c), b(c);
  a.Update(true);
  a.Update(true);
  a.Update(false);
  ASSERT_TRUE(b.Restore(a.Serialize()).ok());
  for (bool inf : {false, false, false, false, true, true}) {
    a.Update(inf);
    b.Update(inf);
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_FALSE(b.Restore("garbage").ok());
}

}  // namespace
}  // namespace train
}  // namespace mt
