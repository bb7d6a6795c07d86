// The element-wise ops and Tanh on the GPU against the CPU backend, at odd sizes in every dtype.
// Ops whose math is a single f32 operation (Add, Scale, Convert, Fill, Dropout, BiasDropoutAdd)
// must agree to the bit; dropout masks in particular are the CPU's, for every key layout.
// Skipped without a GPU.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/elementwise.h"
#include "core/ops/tanh.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::GpuMatchesCpu;
using ::mt::testing::GpuWithinBounds;
using ::mt::testing::kBitwise;
using ::mt::testing::kFloatTypes;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::MirrorNaN;
using ::mt::testing::RandomTensor;
using ::mt::testing::Side;
using ::mt::testing::ToDoubles;
using ::mt::testing::Tolerance;
using ::mt::testing::UnitRoundoff;

const Shape kShapes[] = {{1}, {3, 17}, {2, 5, 129}, {257, 129}, {3, 100003}};
const double kU32 = UnitRoundoff(DType::kF32);
// Transcendental ops: tanhf on the GPU and std::tanh on the CPU differ by a few f32 ulps; a 16-bit
// result may then round to neighbouring values (the tolerance's 2 u of the dtype).
const Tolerance kTranscendental{32 * kU32, 32 * kU32};

// Dropout key layouts: a whole tensor; a slice of a larger logical tensor (unaligned Philox
// blocks); a tensor-parallel style inner/outer mapping.
std::vector<DropoutArgs> DropoutLayouts() {
  std::vector<DropoutArgs> layouts(3);
  layouts[0].seed = 1234;
  layouts[0].stream = 5;
  layouts[1].seed = 0xDEADBEEFCAFEull;
  layouts[1].stream = 77;
  layouts[1].key_base = 3;
  layouts[2].seed = 99;
  layouts[2].stream = (uint64_t{1} << 40) + 3;
  layouts[2].key_base = 1000;
  layouts[2].key_inner = 7;
  layouts[2].key_outer_stride = 29;
  return layouts;
}

using ElementwiseCudaTest = CudaOpTest;

TEST_F(ElementwiseCudaTest, UnaryAndBinaryOpsMatchCpu) {
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape)));
      const Mirrored x = Mirror(RandomTensor(shape, dt, seed++, -3.0, 3.0));
      const Mirrored dy = Mirror(RandomTensor(shape, dt, seed++));
      const Mirrored out = MirrorNaN(shape, dt);
      EXPECT_TRUE(OnBothMatch(out, kTranscendental, [&](const ExecContext& c, Side s) {
        return Gelu(c, x[s], out[s]);
      })) << "Gelu";
      EXPECT_TRUE(OnBothMatch(out, kTranscendental, [&](const ExecContext& c, Side s) {
        return GeluBackward(c, x[s], dy[s], out[s]);
      })) << "GeluBackward";
      EXPECT_TRUE(OnBothMatch(out, kTranscendental, [&](const ExecContext& c, Side s) {
        return Gelu(c, x[s], out[s], GeluForm::kErf);
      })) << "Gelu(erf)";
      EXPECT_TRUE(OnBothMatch(out, kTranscendental, [&](const ExecContext& c, Side s) {
        return GeluBackward(c, x[s], dy[s], out[s], GeluForm::kErf);
      })) << "GeluBackward(erf)";
      EXPECT_TRUE(OnBothMatch(out, kTranscendental, [&](const ExecContext& c, Side s) {
        return Tanh(c, x[s], out[s]);
      })) << "Tanh";
      // TanhBackward from y = tanh(x) (the CPU's y, so both start from the same values). Two f32
      // products: each side within a few ulps; then one rounding to the dtype.
      const Mirrored y = Mirror(out.cpu().view());
      EXPECT_TRUE(OnBothMatch(out, Tolerance{8 * kU32, 0}, [&](const ExecContext& c, Side s) {
        return TanhBackward(c, y[s], dy[s], out[s]);
      })) << "TanhBackward";
      EXPECT_TRUE(OnBothMatch(out, kBitwise, [&](const ExecContext& c, Side s) {
        return Scale(c, x[s], -0.37f, out[s]);
      })) << "Scale";
      EXPECT_TRUE(OnBothMatch(out, kBitwise, [&](const ExecContext& c, Side s) {
        return Add(c, x[s], dy[s], out[s]);
      })) << "Add";
      // In place on the GPU (out aliases an input) against the CPU's out-of-place sum.
      const absl::Status st = Add(gpu_, x[Side::kGpu], dy[Side::kGpu], x[Side::kGpu]);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_TRUE(GpuMatchesCpu(x[Side::kGpu], out[Side::kCpu], kBitwise)) << "Add in place";
    }
  }
}

// Both add in f32 and round once to the dtype (nearest even): they should agree to the bit; one
// rounding of slack in case the device contracts differently. In place on the device too.
TEST_F(ElementwiseCudaTest, BiasAddMatchesCpu) {
  for (DType dt : kFloatTypes) {
    for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{5, 7, 129}, Shape{257, 1023}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape)));
      const Mirrored x = Mirror(RandomTensor(shape, dt, 24));
      const Mirrored bias = Mirror(RandomTensor({shape.back()}, dt, 25));
      const Mirrored y = MirrorNaN(shape, dt);
      const Tolerance one_rounding{kU32, 0, /*roundings=*/1};
      EXPECT_TRUE(OnBothMatch(y, one_rounding, [&](const ExecContext& c, Side s) {
        return BiasAdd(c, x[s], bias[s], y[s]);
      }));
      const absl::Status st = BiasAdd(gpu_, x[Side::kGpu], bias[Side::kGpu], x[Side::kGpu]);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_TRUE(GpuMatchesCpu(x[Side::kGpu], y[Side::kCpu], one_rounding));
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
        const Mirrored dy = Mirror(RandomTensor(shape, dt, seed++));
        const int64_t N = shape.back();
        const int64_t R = N == 0 ? 0 : dy.cpu().numel() / N;
        const Mirrored db = MirrorNaN({N}, out_dt);
        ASSERT_TRUE(
            OnBoth([&](const ExecContext& c, Side s) { return BiasGrad(c, dy[s], db[s]); }));
        // Both sum R f32 terms: each within R u32 sum|dy| of the exact sum.
        const std::vector<double> d = ToDoubles(dy.cpu().view());
        const std::vector<double> expected = ToDoubles(db.cpu().view());
        const double uo = out_dt == DType::kF32 ? 0.0 : UnitRoundoff(out_dt);
        std::vector<double> bound(N);
        for (int64_t c = 0; c < N; ++c) {
          double abs_sum = 0;
          for (int64_t r = 0; r < R; ++r) abs_sum += std::fabs(d[r * N + c]);
          bound[c] = 2.0 * (R + 2) * kU32 * abs_sum + 2 * uo * std::fabs(expected[c]) + 1e-30;
        }
        EXPECT_TRUE(GpuWithinBounds(db[Side::kGpu], db[Side::kCpu], bound));
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
        const Mirrored wide = Mirror(RandomTensor(shape, from, seed++, -70000.0, 70000.0));
        const Mirrored small = Mirror(RandomTensor(shape, from, seed++, -1e-6, 1e-6));
        for (const Mirrored* x : {&wide, &small}) {
          const Mirrored y = MirrorNaN(shape, to);
          EXPECT_TRUE(OnBothMatch(y, kBitwise, [&](const ExecContext& c, Side s) {
            return Convert(c, (*x)[s], y[s]);
          }));
        }
      }
    }
  }
}

TEST_F(ElementwiseCudaTest, FillIsBitwiseTheCpus) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    for (double value : {0.1, -3.75, 1e-30, 65519.0, 7.0}) {
      if (IsInteger(dt) && value < 0 && dt == DType::kU16) continue;
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ", value));
      const Mirrored t = MirrorNaN({3, 129}, dt);
      EXPECT_TRUE(OnBothMatch(t, kBitwise,
                              [&](const ExecContext& c, Side s) { return Fill(c, t[s], value); }));
    }
  }
  // Out-of-range integers fail the same way on both devices.
  Tensor dev = EmptyDevice({4}, DType::kU16);
  EXPECT_EQ(Fill(gpu_, dev.view(), -1.0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElementwiseCudaTest, DropoutMasksAreBitwiseTheCpus) {
  uint64_t seed = 90;
  for (DType dt : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (DropoutArgs args : DropoutLayouts()) {
        for (float p : {0.0f, 0.1f, 0.5f, 0.93f}) {
          args.p = p;
          SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape), " p ", p, " key_base ",
                                    args.key_base, " key_inner ", args.key_inner));
          const Mirrored x = Mirror(RandomTensor(shape, dt, seed++));
          const Mirrored y = MirrorNaN(shape, dt);
          EXPECT_TRUE(OnBothMatch(y, kBitwise, [&](const ExecContext& c, Side s) {
            return Dropout(c, x[s], args, y[s]);
          }));
          // The backward regenerates the same mask; in place on the GPU.
          ASSERT_TRUE(OnBoth([&](const ExecContext& c, Side s) {
            return DropoutBackward(c, x[s], args, s == Side::kGpu ? x[s] : y[s]);
          }));
          EXPECT_TRUE(GpuMatchesCpu(x[Side::kGpu], y[Side::kCpu], kBitwise));
        }
      }
    }
  }
}

// BiasDropoutAdd on the GPU against the CPU kernel: the same mask and the same f32 roundings
// (explicitly rounded intrinsics on the device), so the results agree to the bit; also in place
// over x and over the residual on the GPU.
TEST_F(ElementwiseCudaTest, BiasDropoutAddIsBitwiseTheCpus) {
  for (DType dt : kFloatTypes) {
    for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{5, 7, 129}, Shape{257, 1023}}) {
      for (bool with_bias : {true, false}) {
        for (float p : {0.0f, 0.3f}) {
          SCOPED_TRACE(
              absl::StrCat(DTypeName(dt), ShapeToString(shape), " bias ", with_bias, " p ", p));
          DropoutArgs args = DropoutLayouts()[1];
          args.p = p;
          const Tensor x_host = RandomTensor(shape, dt, 49, -100.0, 100.0);
          const Mirrored bias = Mirror(RandomTensor({shape.back()}, dt, 50));
          const Mirrored residual = Mirror(RandomTensor(shape, dt, 51));
          auto run = [&](Side s, const Mirrored& x, const TensorView& out) {
            return BiasDropoutAdd(ctx(s), x[s], with_bias ? &bias[s] : nullptr, args, residual[s],
                                  out);
          };
          const Mirrored x = Mirror(x_host.view()), out = MirrorNaN(shape, dt);
          EXPECT_TRUE(OnBothMatch(out, kBitwise,
                                  [&](const ExecContext&, Side s) { return run(s, x, out[s]); }));
          ASSERT_TRUE(run(Side::kGpu, x, x[Side::kGpu]).ok());
          EXPECT_TRUE(GpuMatchesCpu(x[Side::kGpu], out[Side::kCpu], kBitwise)) << "over x";
          const Mirrored x2 = Mirror(x_host.view());
          ASSERT_TRUE(run(Side::kGpu, x2, residual[Side::kGpu]).ok());
          EXPECT_TRUE(GpuMatchesCpu(residual[Side::kGpu], out[Side::kCpu], kBitwise))
              << "over the residual";
        }
      }
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
