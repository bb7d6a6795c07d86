// Rope and RopeBackward on the GPU against the CPU backend: every dtype, odd shapes, positions far
// from zero (both sides form cos and sin in double, so they agree to f32 rounding), more outer rows
// than the grid has blocks, and in-place use. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/rope.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);

using RopeCudaTest = CudaOpTest;

TEST_F(RopeCudaTest, ForwardAndBackwardMatchCpu) {
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape& shape : {Shape{3, 2}, Shape{2, 3, 7, 6}, Shape{2, 3, 301, 64},
                               Shape{1, 2, 5, 128}, Shape{4100, 1, 2}}) {
      for (const RopeArgs& args : {RopeArgs{10000.0, 0}, RopeArgs{500000.0, 40000}}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape), " base ", args.base,
                                  " offset ", args.position_offset));
        Tensor x = RandomTensor(shape, dt, seed++, -2.0, 2.0);
        Tensor x_dev = ToDevice(x);
        // Each f32 result within a few ulps of |u| + |v| on both sides (cos and sin may differ
        // in their last bit, and nvcc may fuse the products); 16-bit results may then round to
        // neighbours.
        const double atol = 8 * kU32 * 2.0;
        const double rtol = dt == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dt);
        Tensor y_cpu = Tensor::Host(shape, dt), y_dev = EmptyDevice(shape, dt);
        ASSERT_TRUE(Rope(cpu_, x.view(), args, y_cpu.view()).ok());
        absl::Status s = Rope(gpu_, x_dev.view(), args, y_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(AllClose(ToHost(y_dev.view()).view(), ToDoubles(y_cpu.view()), rtol, atol));
        ASSERT_TRUE(RopeBackward(cpu_, x.view(), args, y_cpu.view()).ok());
        s = RopeBackward(gpu_, x_dev.view(), args, y_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(AllClose(ToHost(y_dev.view()).view(), ToDoubles(y_cpu.view()), rtol, atol));
      }
    }
  }
}

TEST_F(RopeCudaTest, InPlace) {
  const Shape shape = {2, 3, 33, 64};
  const RopeArgs args{10000.0, 3};
  Tensor x = RandomTensor(shape, DType::kF16, 11);
  Tensor x_dev = ToDevice(x), y_dev = EmptyDevice(shape, DType::kF16);
  ASSERT_TRUE(Rope(gpu_, x_dev.view(), args, y_dev.view()).ok());
  ASSERT_TRUE(Rope(gpu_, x_dev.view(), args, x_dev.view()).ok());
  EXPECT_TRUE(SameBits(ToHost(x_dev.view()).view(), ToHost(y_dev.view()).view()));
  ASSERT_TRUE(RopeBackward(gpu_, y_dev.view(), args, y_dev.view()).ok());
  // Back to x up to the two roundings to f16.
  EXPECT_TRUE(AllClose(ToHost(y_dev.view()).view(), ToDoubles(x.view()),
                       2 * UnitRoundoff(DType::kF16), 4 * UnitRoundoff(DType::kF16)));
}

}  // namespace
}  // namespace ops
}  // namespace mt
