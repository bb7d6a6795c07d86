// The mappings' shared split checks on hand-made views: which splits pass along the last and the
// sequence dimension, and the one-line error for each way a split can be wrong.
#include "comm/region_checks.h"

#include <string>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace internal {
namespace {

using ::testing::HasSubstr;

TEST(RegionChecksTest, RegionOpJoinsMappingAndDirection) {
  EXPECT_EQ(RegionOp("GatherFromTensorParallelRegion", "Forward"),
            "GatherFromTensorParallelRegion::Forward");
}

TEST(RegionChecksTest, PartIndexMustBeInRange) {
  EXPECT_TRUE(CheckPartIndex("op", 0, 1).ok());
  EXPECT_TRUE(CheckPartIndex("op", 3, 4).ok());
  EXPECT_EQ(CheckPartIndex("op", 4, 4).message(), "op: part index 4 is not in [0, 4)");
  EXPECT_EQ(CheckPartIndex("op", -1, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPartIndex("op", 0, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegionChecksTest, SplitsAlongTheNamedDimension) {
  float buf[64] = {};
  const TensorView full(buf, Shape{2, 6, 4}, DType::kF32);
  // Last dimension over 2: [2, 6, 2]; sequence (dimension 1) over 3: [2, 2, 4].
  EXPECT_TRUE(CheckSplit("op", "full", full, "part",
                         TensorView(buf + 48, Shape{2, 6, 2}, DType::kF32), -1,
                         "the last dimension", 2)
                  .ok());
  EXPECT_TRUE(CheckSplit("op", "full", full, "part",
                         TensorView(buf + 48, Shape{2, 2, 4}, DType::kF32), 1,
                         "the sequence length", 3)
                  .ok());
  // The part of another dimension's split is refused.
  absl::Status s =
      CheckSplit("op", "full", full, "part", TensorView(buf + 48, Shape{2, 6, 2}, DType::kF32), 1,
                 "the sequence length", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("op: part"));
}

TEST(RegionChecksTest, EachBadSplitIsOneLineNamingTheTensor) {
  float buf[64] = {};
  const TensorView full(buf, Shape{2, 6}, DType::kF32);
  const TensorView part(buf + 32, Shape{2, 3}, DType::kF32);
  absl::Status s =
      CheckSplit("Gather::Forward", "y", full, "x_local", part, -1, "the last dimension", 4);
  EXPECT_EQ(s.message(),
            "Gather::Forward: the last dimension of y (f32[2, 6] on cpu) is not divisible by the 4 "
            "tensor-parallel ranks");
  s = CheckSplit("op", "full", TensorView(buf, Shape{6}, DType::kF32), "part", part, 1,
                 "the sequence length", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("must have rank >= 2"));
  s = CheckSplit("op", "full", full, "part", TensorView(buf + 32, Shape{2, 3}, DType::kBF16), -1,
                 "the last dimension", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  TensorView strided(buf, Shape{3, 2}, DType::kF32);
  strided.strides = {1, 3};
  s = CheckSplit("op", "full", full, "part", strided, -1, "the last dimension", 3);
  EXPECT_THAT(s.message(), HasSubstr("contiguous"));
  EXPECT_EQ(CheckSplit("op", "full", full, "part", part, -1, "the last dimension", 0).message(),
            "op: 0 parts");
  EXPECT_TRUE(CheckSplit("op", "full", full, "part", part, -1, "the last dimension", 2).ok());
}

}  // namespace
}  // namespace internal
}  // namespace comm
}  // namespace mt
