#include "core/precision.h"

#include "gtest/gtest.h"

namespace mt {
namespace {

PrecisionFlags Flags(bool fp16, bool bf16, bool fp32) {
  PrecisionFlags f;
  f.fp16 = fp16;
  f.bf16 = bf16;
  f.fp32 = fp32;
  return f;
}

TEST(PrecisionFlagsTest, DefaultsFollowTheDevice) {
  EXPECT_EQ(*PrecisionFlags().Resolve(DeviceType::kCpu), DType::kF32);
  EXPECT_EQ(*PrecisionFlags().Resolve(DeviceType::kCuda), DType::kBF16);
}

TEST(PrecisionFlagsTest, OneFlagChooses) {
  for (DeviceType device : {DeviceType::kCpu, DeviceType::kCuda}) {
    EXPECT_EQ(*Flags(true, false, false).Resolve(device), DType::kF16);
    EXPECT_EQ(*Flags(false, true, false).Resolve(device), DType::kBF16);
    EXPECT_EQ(*Flags(false, false, true).Resolve(device), DType::kF32);
  }
}

TEST(PrecisionFlagsTest, TwoFlagsAreRefused) {
  const absl::StatusOr<DType> d = Flags(true, true, false).Resolve(DeviceType::kCpu);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(d.status()));
  EXPECT_NE(d.status().message().find("are exclusive"), absl::string_view::npos);
  EXPECT_FALSE(Flags(false, true, true).Resolve(DeviceType::kCuda).ok());
}

}  // namespace
}  // namespace mt
