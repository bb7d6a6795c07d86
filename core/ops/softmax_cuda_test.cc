// Scaled masked softmax and its backward on the GPU against the CPU backend: every dtype, causal
// masks with Tq < Tk, padding masks (with fully masked rows), rows shorter and much longer than a
// warp. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/softmax.h"
#include "core/ops/testutil.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
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
          Tensor x = RandomTensor(shape, dt, seed++, -4.0, 4.0);
          Tensor dy = RandomTensor(shape, dt, seed++);
          // Mostly real keys; batch 0 gets every key padded (all-zero rows of y).
          Tensor mask = RandomInts({B, Tk}, DType::kI32, seed++, 0, 4);
          for (int64_t j = 0; j < Tk && B > 1; ++j) mask.data_as<int32_t>()[j] = 0;
          SoftmaxOptions options;
          options.scale = 0.37f;
          options.causal = causal ? CausalMask::kYes : CausalMask::kNo;
          Tensor mask_dev = ToDevice(mask);
          const TensorView mask_view = mask.view(), mask_dev_view = mask_dev.view();

          Tensor y_cpu = Tensor::Host(shape, dt);
          options.padding_mask = padded ? &mask_view : nullptr;
          ASSERT_TRUE(Softmax(cpu_, x.view(), y_cpu.view(), options).ok());
          Tensor x_dev = ToDevice(x);
          Tensor y_dev = EmptyDevice(shape, dt);
          options.padding_mask = padded ? &mask_dev_view : nullptr;
          absl::Status s = Softmax(gpu_, x_dev.view(), y_dev.view(), options);
          ASSERT_TRUE(s.ok()) << s;
          // exp and a sum of Tk terms: relative differences of about Tk u32, then one rounding.
          const double u = dt == DType::kF32 ? 0.0 : UnitRoundoff(dt);
          const double tol = 4.0 * (Tk + 8) * kU32;
          const std::vector<double> y_ref = ToDoubles(y_cpu.view());
          EXPECT_TRUE(AllClose(ToHost(y_dev.view()).view(), y_ref, 2 * u + tol, 1e-30));

          // Backward from the CPU's y.
          Tensor dx_cpu = Tensor::Host(shape, dt);
          ASSERT_TRUE(SoftmaxBackward(cpu_, y_cpu.view(), dy.view(), dx_cpu.view(), 0.37f).ok());
          Tensor y_in = ToDevice(y_cpu), dy_dev = ToDevice(dy);
          Tensor dx_dev = EmptyDevice(shape, dt);
          s = SoftmaxBackward(gpu_, y_in.view(), dy_dev.view(), dx_dev.view(), 0.37f);
          ASSERT_TRUE(s.ok()) << s;
          // dot = sum(y dy) differs by about Tk u32 max|dy|; dx = scale y (dy - dot).
          double y_max = 0;
          for (double v : y_ref) y_max = std::max(y_max, std::fabs(v));
          EXPECT_TRUE(AllClose(ToHost(dx_dev.view()).view(), ToDoubles(dx_cpu.view()),
                               2 * u + 8 * kU32, 0.37 * y_max * tol * 2.0 + 1e-30));

          // In place: y over x, dx over dy.
          ASSERT_TRUE(Softmax(gpu_, x_dev.view(), x_dev.view(), options).ok());
          EXPECT_TRUE(testing::SameBits(ToHost(x_dev.view()).view(), ToHost(y_dev.view()).view()));
          ASSERT_TRUE(SoftmaxBackward(gpu_, y_in.view(), dy_dev.view(), dy_dev.view(), 0.37f).ok());
          EXPECT_TRUE(
              testing::SameBits(ToHost(dy_dev.view()).view(), ToHost(dx_dev.view()).view()));
        }
      }
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
