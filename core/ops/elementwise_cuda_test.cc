// The element-wise ops and Tanh on the GPU against the CPU backend, at odd sizes in every dtype.
// Ops whose math is a single f32 operation (Add, Scale, Convert, Fill, Dropout) must agree to the
// bit; dropout masks in particular are the CPU's, for every key layout. Skipped without a GPU.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/elementwise.h"
#include "core/ops/tanh.h"
#include "core/ops/testutil.h"

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
using ::mt::testing::WithinBounds;

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
const Shape kShapes[] = {{1}, {3, 17}, {2, 5, 129}, {257, 129}, {3, 100003}};
const double kU32 = UnitRoundoff(DType::kF32);

// Transcendental ops: tanhf on the GPU and std::tanh on the CPU differ by a few f32 ulps; a 16-bit
// result may then round to neighbouring values (2 u of the dtype).
::testing::AssertionResult CloseTranscendental(const Tensor& gpu, const Tensor& cpu) {
  const double u = UnitRoundoff(cpu.dtype());
  return AllClose(gpu.view(), ToDoubles(cpu.view()), 2 * u + 32 * kU32, 32 * kU32);
}

using ElementwiseCudaTest = CudaOpTest;

TEST_F(ElementwiseCudaTest, UnaryAndBinaryOpsMatchCpu) {
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape)));
      Tensor x = RandomTensor(shape, dt, seed++, -3.0, 3.0);
      Tensor dy = RandomTensor(shape, dt, seed++);
      Tensor x_dev = ToDevice(x), dy_dev = ToDevice(dy);
      Tensor out_cpu = Tensor::Host(shape, dt);
      Tensor out_dev = EmptyDevice(shape, dt);

      ASSERT_TRUE(Gelu(cpu_, x.view(), out_cpu.view()).ok());
      ASSERT_TRUE(Gelu(gpu_, x_dev.view(), out_dev.view()).ok());
      EXPECT_TRUE(CloseTranscendental(ToHost(out_dev.view()), out_cpu)) << "Gelu";

      ASSERT_TRUE(GeluBackward(cpu_, x.view(), dy.view(), out_cpu.view()).ok());
      ASSERT_TRUE(GeluBackward(gpu_, x_dev.view(), dy_dev.view(), out_dev.view()).ok());
      EXPECT_TRUE(CloseTranscendental(ToHost(out_dev.view()), out_cpu)) << "GeluBackward";

      ASSERT_TRUE(Tanh(cpu_, x.view(), out_cpu.view()).ok());
      ASSERT_TRUE(Tanh(gpu_, x_dev.view(), out_dev.view()).ok());
      EXPECT_TRUE(CloseTranscendental(ToHost(out_dev.view()), out_cpu)) << "Tanh";

      // TanhBackward from y = tanh(x) (the CPU's y, so both start from the same values).
      Tensor y_dev = ToDevice(out_cpu);
      Tensor dx_cpu = Tensor::Host(shape, dt);
      ASSERT_TRUE(TanhBackward(cpu_, out_cpu.view(), dy.view(), dx_cpu.view()).ok());
      ASSERT_TRUE(TanhBackward(gpu_, y_dev.view(), dy_dev.view(), out_dev.view()).ok());
      // Two f32 products: each side within a few ulps; then one rounding to the dtype.
      EXPECT_TRUE(AllClose(ToHost(out_dev.view()).view(), ToDoubles(dx_cpu.view()),
                           2 * UnitRoundoff(dt) + 8 * kU32, 0))
          << "TanhBackward";

      ASSERT_TRUE(Add(cpu_, x.view(), dy.view(), out_cpu.view()).ok());
      ASSERT_TRUE(Add(gpu_, x_dev.view(), dy_dev.view(), out_dev.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(out_dev.view()).view(), out_cpu.view())) << "Add";

      ASSERT_TRUE(Scale(cpu_, x.view(), -0.37f, out_cpu.view()).ok());
      ASSERT_TRUE(Scale(gpu_, x_dev.view(), -0.37f, out_dev.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(out_dev.view()).view(), out_cpu.view())) << "Scale";

      // In place: out aliases an input.
      ASSERT_TRUE(Add(gpu_, x_dev.view(), dy_dev.view(), x_dev.view()).ok());
      ASSERT_TRUE(Add(cpu_, x.view(), dy.view(), out_cpu.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(x_dev.view()).view(), out_cpu.view())) << "Add in place";
    }
  }
}

TEST_F(ElementwiseCudaTest, BiasGradMatchesCpu) {
  uint64_t seed = 50;
  for (DType dt : kFloatTypes) {
    for (DType out_dt : {dt, DType::kF32}) {
      for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{2, 5, 129}, Shape{1031, 65},
                                 Shape{9, 3000}, Shape{0, 7}}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), "->", DTypeName(out_dt), ShapeToString(shape)));
        Tensor dy = RandomTensor(shape, dt, seed++);
        const int64_t N = shape.back();
        const int64_t R = N == 0 ? 0 : dy.numel() / N;
        Tensor db_cpu = Tensor::Host({N}, out_dt);
        ASSERT_TRUE(BiasGrad(cpu_, dy.view(), db_cpu.view()).ok());
        Tensor dy_dev = ToDevice(dy);
        Tensor db_dev = EmptyDevice({N}, out_dt);
        const absl::Status s = BiasGrad(gpu_, dy_dev.view(), db_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        // Both sum R f32 terms: each within R u32 sum|dy| of the exact sum.
        const std::vector<double> d = ToDoubles(dy.view());
        const std::vector<double> expected = ToDoubles(db_cpu.view());
        const double uo = out_dt == DType::kF32 ? 0.0 : UnitRoundoff(out_dt);
        std::vector<double> bound(N);
        for (int64_t c = 0; c < N; ++c) {
          double abs_sum = 0;
          for (int64_t r = 0; r < R; ++r) abs_sum += std::fabs(d[r * N + c]);
          bound[c] = 2.0 * (R + 2) * kU32 * abs_sum + 2 * uo * std::fabs(expected[c]) + 1e-30;
        }
        EXPECT_TRUE(WithinBounds(ToHost(db_dev.view()).view(), db_cpu.view(), bound));
      }
    }
  }
}

TEST_F(ElementwiseCudaTest, ConvertIsBitwiseTheCpus) {
  uint64_t seed = 70;
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (const Shape& shape : kShapes) {
        SCOPED_TRACE(absl::StrCat(DTypeName(from), "->", DTypeName(to), ShapeToString(shape)));
        // Wide range: overflow to inf and f16 subnormals included.
        Tensor x = RandomTensor(shape, from, seed++, -70000.0, 70000.0);
        Tensor small = RandomTensor(shape, from, seed++, -1e-6, 1e-6);
        for (const Tensor* in : {&x, &small}) {
          Tensor y_cpu = Tensor::Host(shape, to);
          ASSERT_TRUE(Convert(cpu_, in->view(), y_cpu.view()).ok());
          Tensor x_dev = ToDevice(*in);
          Tensor y_dev = EmptyDevice(shape, to);
          ASSERT_TRUE(Convert(gpu_, x_dev.view(), y_dev.view()).ok());
          EXPECT_TRUE(SameBits(ToHost(y_dev.view()).view(), y_cpu.view()));
        }
      }
    }
  }
}

TEST_F(ElementwiseCudaTest, FillIsBitwiseTheCpus) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64,
                   DType::kU16}) {
    for (double value : {0.1, -3.75, 1e-30, 65519.0, 7.0}) {
      if (IsInteger(dt) && value < 0 && dt == DType::kU16) continue;
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ", value));
      Tensor cpu = Tensor::Host({3, 129}, dt);
      ASSERT_TRUE(Fill(cpu_, cpu.view(), value).ok());
      Tensor dev = EmptyDevice({3, 129}, dt);
      ASSERT_TRUE(Fill(gpu_, dev.view(), value).ok());
      EXPECT_TRUE(SameBits(ToHost(dev.view()).view(), cpu.view()));
    }
  }
  // Out-of-range integers fail the same way on both devices.
  Tensor dev = EmptyDevice({4}, DType::kU16);
  EXPECT_EQ(Fill(gpu_, dev.view(), -1.0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElementwiseCudaTest, DropoutMasksAreBitwiseTheCpus) {
  DropoutArgs layouts[3];
  layouts[0].seed = 1234;
  layouts[0].stream = 5;
  layouts[1].seed = 0xDEADBEEFCAFEull;
  layouts[1].stream = 77;
  layouts[1].key_base = 3;  // A slice of a larger logical tensor: unaligned Philox blocks.
  layouts[2].seed = 99;
  layouts[2].stream = (uint64_t{1} << 40) + 3;
  layouts[2].key_base = 1000;
  layouts[2].key_inner = 7;
  layouts[2].key_outer_stride = 29;
  uint64_t seed = 90;
  for (DType dt : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (DropoutArgs args : layouts) {
        for (float p : {0.0f, 0.1f, 0.5f, 0.93f}) {
          args.p = p;
          SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape), " p ", p, " key_base ",
                                    args.key_base, " key_inner ", args.key_inner));
          Tensor x = RandomTensor(shape, dt, seed++);
          Tensor y_cpu = Tensor::Host(shape, dt);
          ASSERT_TRUE(Dropout(cpu_, x.view(), args, y_cpu.view()).ok());
          Tensor x_dev = ToDevice(x);
          Tensor y_dev = EmptyDevice(shape, dt);
          ASSERT_TRUE(Dropout(gpu_, x_dev.view(), args, y_dev.view()).ok());
          EXPECT_TRUE(SameBits(ToHost(y_dev.view()).view(), y_cpu.view()));
          // The backward regenerates the same mask; in place here.
          ASSERT_TRUE(DropoutBackward(cpu_, x.view(), args, y_cpu.view()).ok());
          ASSERT_TRUE(DropoutBackward(gpu_, x_dev.view(), args, x_dev.view()).ok());
          EXPECT_TRUE(SameBits(ToHost(x_dev.view()).view(), y_cpu.view()));
        }
      }
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
