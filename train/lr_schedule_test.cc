#include "train/lr_schedule.h"

#include <cmath>

#include "core/fields.h"
#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

TEST(LrScheduleTest, WarmupThenCosineToMin) {
  LrScheduleConfig c;
  c.max_lr = 1.5e-4;
  c.min_lr = 1e-5;
  c.warmup_samples = 100;
  c.decay_samples = 1100;
  c.style = DecayStyle::kCosine;
  ASSERT_TRUE(c.Validate().ok());
  LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.0);
  EXPECT_DOUBLE_EQ(s.LrAt(50), 0.75e-4);
  EXPECT_DOUBLE_EQ(s.LrAt(100), 1.5e-4);
  // Halfway through the decay the cosine coefficient is 1/2.
  EXPECT_NEAR(s.LrAt(600), 1e-5 + 0.5 * 1.4e-4, 1e-18);
  // A quarter in: (cos(pi/4) + 1) / 2.
  EXPECT_NEAR(s.LrAt(350), 1e-5 + 0.5 * (std::cos(M_PI / 4) + 1) * 1.4e-4, 1e-18);
  EXPECT_DOUBLE_EQ(s.LrAt(1100), 1e-5);
  EXPECT_DOUBLE_EQ(s.LrAt(5000), 1e-5);
}

TEST(LrScheduleTest, LinearAndConstant) {
  LrScheduleConfig c;
  c.max_lr = 1.0;
  c.min_lr = 0.0;
  c.warmup_samples = 0;
  c.decay_samples = 10;
  c.style = DecayStyle::kLinear;
  LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.LrAt(0), 1.0);
  EXPECT_DOUBLE_EQ(s.LrAt(3), 0.7);
  EXPECT_DOUBLE_EQ(s.LrAt(10), 0.0);
  c.style = DecayStyle::kConstant;
  EXPECT_DOUBLE_EQ(LrSchedule(c).LrAt(7), 1.0);
}

TEST(LrScheduleTest, AdvanceCountsSamples) {
  LrScheduleConfig c;
  c.max_lr = 2.0;
  c.warmup_samples = 8;
  c.decay_samples = 8;
  c.min_lr = 0;
  LrSchedule s(c);
  s.Advance(4);
  EXPECT_DOUBLE_EQ(s.lr(), 1.0);
  s.Advance(4);
  EXPECT_DOUBLE_EQ(s.lr(), 2.0);
  EXPECT_EQ(s.samples(), 8);
}

TEST(LrScheduleTest, BadConfigsAndNames) {
  LrScheduleConfig c;
  c.min_lr = 1.0;
  c.max_lr = 0.5;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c = LrScheduleConfig();
  c.warmup_samples = 10;
  c.decay_samples = 5;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseEnum<DecayStyle>("lr_decay_style", "cosine", kDecayStyleNames),
            DecayStyle::kCosine);
  EXPECT_EQ(
      ParseEnum<DecayStyle>("lr_decay_style", "exponential", kDecayStyleNames).status().message(),
      "--lr_decay_style=exponential: must be one of constant, linear, cosine");
}

}  // namespace
}  // namespace train
}  // namespace mt
