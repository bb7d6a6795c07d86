// Scaled masked softmax and its backward on the GPU against the CPU backend: every dtype, causal
// masks with Tq < Tk, padding masks (with fully masked rows), rows shorter and much longer than a
// warp. Skipped without a GPU.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/softmax.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::GpuMatchesCpu;
using ::mt::testing::kBitwise;
using ::mt::testing::MaxAbs;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::MirrorNaN;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::Side;
using ::mt::testing::ToDoubles;
using ::mt::testing::Tolerance;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);

using SoftmaxCudaTest = CudaOpTest;

TEST_F(SoftmaxCudaTest, ForwardAndBackwardMatchCpu) {
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape& shape : {Shape{1, 1}, Shape{3, 17}, Shape{2, 3, 5, 17}, Shape{2, 2, 33, 33},
                               Shape{1, 2, 7, 1031}}) {
      for (bool causal : {false, true}) {
        for (bool padded : {false, true}) {
          if (padded && shape.size() < 3) continue;
          SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape), causal ? " causal" : "",
                                    padded ? " padded" : ""));
          const int64_t B = shape[0], Tk = shape.back();
          const Mirrored x = Mirror(RandomTensor(shape, dt, seed++, -4.0, 4.0));
          const Mirrored dy = Mirror(RandomTensor(shape, dt, seed++));
          // Mostly real keys; batch 0 gets every key padded (all-zero rows of y).
          Tensor mask_host = RandomInts({B, Tk}, DType::kI32, seed++, 0, 4);
          for (int64_t j = 0; j < Tk && B > 1; ++j) mask_host.data_as<int32_t>()[j] = 0;
          const Mirrored mask = Mirror(std::move(mask_host));
          auto options = [&](Side s) {
            SoftmaxOptions o;
            o.scale = 0.37f;
            o.causal = causal ? CausalMask::kYes : CausalMask::kNo;
            o.padding_mask = padded ? &mask[s] : nullptr;
            return o;
          };
          // exp and a sum of Tk terms: relative differences of about Tk u32, then one rounding.
          const double tol = 4.0 * (Tk + 8) * kU32;
          const Mirrored y = MirrorNaN(shape, dt);
          EXPECT_TRUE(OnBothMatch(y, Tolerance{tol, 1e-30}, [&](const ExecContext& c, Side s) {
            return Softmax(c, x[s], y[s], options(s));
          }));

          // Backward from the CPU's y: dot = sum(y dy) differs by about Tk u32 max|dy|;
          // dx = scale y (dy - dot).
          const Mirrored y_in = Mirror(y.cpu().view());
          const Mirrored dx = MirrorNaN(shape, dt);
          const double y_max = MaxAbs(ToDoubles(y.cpu().view()));
          const Tolerance dx_tol{8 * kU32, 0.37 * y_max * tol * 2.0 + 1e-30};
          EXPECT_TRUE(OnBothMatch(dx, dx_tol, [&](const ExecContext& c, Side s) {
            return SoftmaxBackward(c, y_in[s], dy[s], dx[s], 0.37f);
          }));

          // In place on the GPU: y over x, dx over dy.
          ASSERT_TRUE(Softmax(gpu_, x[Side::kGpu], x[Side::kGpu], options(Side::kGpu)).ok());
          EXPECT_TRUE(GpuMatchesCpu(x[Side::kGpu], y.GpuToHost().view(), kBitwise));
          ASSERT_TRUE(
              SoftmaxBackward(gpu_, y_in[Side::kGpu], dy[Side::kGpu], dy[Side::kGpu], 0.37f).ok());
          EXPECT_TRUE(GpuMatchesCpu(dy[Side::kGpu], dx.GpuToHost().view(), kBitwise));
        }
      }
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
