// ops::Dropout, DropoutBackward and BiasDropoutAdd on the CPU: the mask is the Philox draw of
// each element's key (core/philox.h, DropoutKey), kept elements are scaled by 1 / (1 - p), a
// tensor-parallel slice draws the whole tensor's mask, the fused BiasDropoutAdd is bitwise the
// unfused chain at f32, and bad arguments are errors. The other element-wise ops are in
// elementwise_test.cc.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "core/philox.h"
#include "core/simd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::kFloatTypes;
using ::mt::testing::kOddShapes;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::testing::HasSubstr;

const double kU32 = UnitRoundoff(DType::kF32);

// The dropout mask, straight from the Philox convention.
bool RefKeep(const DropoutArgs& args, int64_t i) {
  return PhiloxUniform(args.seed, args.stream, static_cast<uint64_t>(DropoutKey(args, i))) >=
         args.p;
}

// Every op runs on the calling thread alone and on a pool of three.
using DropoutTest = ::mt::testing::ThreadedOpTest;

TEST_F(DropoutTest, DropoutMaskIsPhiloxAndScalesKeptElementsAtEverySimdTarget) {
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    for (const ExecContext& ctx : Contexts()) {
      for (DType dt : kFloatTypes) {
        for (float p : {0.1f, 0.5f, 0.9f}) {
          const Shape shape = {3, 17, 129};
          SCOPED_TRACE(absl::StrCat(DTypeName(dt), " p ", p, " threads ", ctx.num_threads()));
          DropoutArgs args;
          args.p = p;
          args.seed = 0x1234567890abcdefull;
          args.stream = 77;
          args.key_base = 5;  // Not a multiple of 4: blocks of the generator straddle elements.
          Tensor x = RandomTensor(shape, dt, 13, 0.5, 1.5);  // Nonzero, so drops are visible.
          Tensor y = Tensor::Host(shape, dt);
          ASSERT_TRUE(Dropout(ctx, x.view(), args, y.view()).ok());
          const std::vector<double> xd = ToDoubles(x.view()), yd = ToDoubles(y.view());
          std::vector<double> want(xd.size());
          for (size_t i = 0; i < xd.size(); ++i) {
            const bool keep = RefKeep(args, static_cast<int64_t>(i));
            want[i] = keep ? xd[i] / (1.0 - p) : 0.0;
            ASSERT_EQ(yd[i] != 0.0, keep) << i;
          }
          EXPECT_TRUE(AllClose(yd, want, UnitRoundoff(dt) + 4 * kU32, 0));
          // The backward applies the same mask to dy.
          Tensor dx = Tensor::Host(shape, dt);
          ASSERT_TRUE(DropoutBackward(ctx, x.view(), args, dx.view()).ok());
          EXPECT_TRUE(SameBits(dx, y));
        }
      }
    }
  }
}

TEST_F(DropoutTest, DropoutKeepRateIsOneMinusP) {
  const int64_t n = 1000000;
  const float p = 0.3f;
  Tensor x = Tensor::Host({1000, 1000}, DType::kF32);
  for (const ExecContext& ctx : Contexts()) {
    ASSERT_TRUE(Fill(ctx, x.view(), 1.0).ok());
    DropoutArgs args;
    args.p = p;
    args.seed = 42;
    ASSERT_TRUE(Dropout(ctx, x.view(), args, x.view()).ok());  // In place.
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) kept += x.data_as<float>()[i] != 0.0f;
    const double sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_LE(std::fabs(kept - n * (1.0 - p)), 5 * sigma) << kept;
  }
}

TEST_F(DropoutTest, DropoutBackwardMatchesFiniteDifferences) {
  const ExecContext ctx{&pool_};
  const Shape shape = {5, 33};
  DropoutArgs args;
  args.p = 0.25f;
  args.seed = 9;
  args.stream = 3;
  Tensor x = RandomTensor(shape, DType::kF32, 14);
  Tensor dy = RandomTensor(shape, DType::kF32, 15);
  Tensor dx = Tensor::Host(shape, DType::kF32);
  ASSERT_TRUE(DropoutBackward(ctx, dy.view(), args, dx.view()).ok());
  const std::vector<double> dyd = ToDoubles(dy.view());
  // Dropout is linear in x with the reference mask.
  auto loss = [&](const std::vector<double>& xs) {
    double l = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (RefKeep(args, static_cast<int64_t>(i))) l += dyd[i] * xs[i] / (1.0 - args.p);
    }
    return l;
  };
  EXPECT_TRUE(AllClose(dx.view(), NumericalGradient(loss, ToDoubles(x.view())), 4 * kU32, 1e-7));
}

TEST_F(DropoutTest, DropoutOnATensorParallelSliceMatchesTheWholeTensor) {
  // A [2, 6, 8] logical tensor; a rank holds the second half along dim 1, [2, 3, 8]. With keys
  // mapped to the slice's global indices its mask is the corresponding slice of the whole mask.
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " threads ", ctx.num_threads()));
      DropoutArgs args;
      args.p = 0.5f;
      args.seed = 2024;
      args.stream = 1;
      Tensor full = RandomTensor({2, 6, 8}, dt, 16);
      Tensor full_y = Tensor::Host({2, 6, 8}, dt);
      ASSERT_TRUE(Dropout(ctx, full.view(), args, full_y.view()).ok());

      Tensor part = Tensor::Host({2, 3, 8}, dt);
      Tensor want = Tensor::Host({2, 3, 8}, dt);
      const size_t row = 3 * 8 * DTypeSize(dt);
      for (int b = 0; b < 2; ++b) {
        const size_t src = (b * 6 + 3) * 8 * DTypeSize(dt);
        std::memcpy(static_cast<char*>(part.data()) + b * row,
                    static_cast<char*>(full.data()) + src, row);
        std::memcpy(static_cast<char*>(want.data()) + b * row,
                    static_cast<char*>(full_y.data()) + src, row);
      }
      DropoutArgs local = args;
      local.key_base = 3 * 8;          // Global index of the slice's first element.
      local.key_inner = 3 * 8;         // Contiguous run of the slice per leading index.
      local.key_outer_stride = 6 * 8;  // Distance between runs in the whole tensor.
      Tensor part_y = Tensor::Host({2, 3, 8}, dt);
      ASSERT_TRUE(Dropout(ctx, part.view(), local, part_y.view()).ok());
      EXPECT_TRUE(SameBits(part_y, want));
      // Without the key mapping the masks differ.
      ASSERT_TRUE(Dropout(ctx, part.view(), args, part_y.view()).ok());
      EXPECT_FALSE(SameBits(part_y, want));
    }
  }
}

TEST_F(DropoutTest, DropoutArguments) {
  const ExecContext ctx;
  Tensor x = RandomTensor({3, 5}, DType::kF32, 17);
  Tensor y = Tensor::Host({3, 5}, DType::kF32);
  DropoutArgs args;
  ASSERT_TRUE(Dropout(ctx, x.view(), args, y.view()).ok());  // p = 0 copies.
  EXPECT_TRUE(SameBits(x, y));
  for (float p : {-0.1f, 1.0f, 1.5f, NAN}) {
    args.p = p;
    const absl::Status s = Dropout(ctx, x.view(), args, y.view());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_THAT(std::string(s.message()), HasSubstr("Dropout"));
    EXPECT_EQ(DropoutBackward(ctx, x.view(), args, y.view()).code(),
              absl::StatusCode::kInvalidArgument);
  }
  args.p = 0.5f;
  args.key_inner = 8;
  args.key_outer_stride = 4;  // Overlapping runs: two elements would share a key.
  EXPECT_EQ(Dropout(ctx, x.view(), args, y.view()).code(), absl::StatusCode::kInvalidArgument);
  args.key_outer_stride = 8;
  args.key_base = -1;
  EXPECT_EQ(Dropout(ctx, x.view(), args, y.view()).code(), absl::StatusCode::kInvalidArgument);
}

// residual + dropout(x + bias) in float64 with the reference mask (scale 1 / (1 - p) exact).
std::vector<double> BiasDropoutAddRef(const Tensor& x, const Tensor* bias, const DropoutArgs& args,
                                      const Tensor& residual) {
  const std::vector<double> xd = ToDoubles(x.view()), rd = ToDoubles(residual.view());
  const std::vector<double> bd = bias != nullptr ? ToDoubles(bias->view()) : std::vector<double>{};
  std::vector<double> want(xd.size());
  for (size_t i = 0; i < xd.size(); ++i) {
    const double v = xd[i] + (bias != nullptr ? bd[i % bd.size()] : 0.0);
    const bool keep = args.p == 0.0f || RefKeep(args, static_cast<int64_t>(i));
    want[i] = rd[i] + (keep ? v / (1.0 - args.p) : 0.0);
  }
  return want;
}

DropoutArgs BiasDropoutAddArgs(float p) {
  DropoutArgs args;
  args.p = p;
  args.seed = 0xfeedfacecafebeefull;
  args.stream = 12;
  args.key_base = 7;  // Not a multiple of 4: Philox blocks straddle elements.
  return args;
}

TEST_F(DropoutTest, BiasDropoutAddMatchesReference) {
  for (const ExecContext& ctx : Contexts()) {
    for (DType dt : kFloatTypes) {
      for (const Shape& shape : kOddShapes) {
        for (bool with_bias : {true, false}) {
          for (float p : {0.0f, 0.3f}) {
            SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape), " bias ", with_bias,
                                      " p ", p, " threads ", ctx.num_threads()));
            const DropoutArgs args = BiasDropoutAddArgs(p);
            Tensor x = RandomTensor(shape, dt, 30);
            Tensor bias = RandomTensor({shape.back()}, dt, 31);
            Tensor residual = RandomTensor(shape, dt, 32);
            Tensor out = RandomTensor(shape, dt, 33);  // Garbage: overwritten.
            const Tensor* b = with_bias ? &bias : nullptr;
            const TensorView bias_view = bias.view();
            ASSERT_TRUE(BiasDropoutAdd(ctx, x.view(), with_bias ? &bias_view : nullptr, args,
                                       residual.view(), out.view())
                            .ok());
            const std::vector<double> want = BiasDropoutAddRef(x, b, args, residual);
            // f32 roundings of x + b, of the scale, the product and the sum (|terms| <= 1 / (1 - p)
            // + 2), then one rounding to the dtype.
            EXPECT_TRUE(AllClose(out.view(), want, UnitRoundoff(dt), 4 * (2 + 1 / (1 - p)) * kU32));
            // Dropped elements are exactly the residual.
            const std::vector<double> od = ToDoubles(out.view()), rd = ToDoubles(residual.view());
            for (size_t i = 0; i < od.size(); ++i) {
              if (p > 0 && !RefKeep(args, static_cast<int64_t>(i))) {
                ASSERT_EQ(od[i], rd[i]) << i;
              }
            }
            // Math in f32 and one rounding: the 16-bit result is the f32 result rounded once.
            if (dt != DType::kF32) {
              auto to_f32 = [&](const Tensor& t) {
                Tensor f = Tensor::Host(t.shape(), DType::kF32);
                const absl::Status s = Convert(ctx, t.view(), f.view());
                EXPECT_TRUE(s.ok()) << s;
                return f;
              };
              Tensor x32 = to_f32(x), r32 = to_f32(residual), b32 = to_f32(bias);
              Tensor out32 = Tensor::Host(shape, DType::kF32);
              const TensorView b32_view = b32.view();
              ASSERT_TRUE(BiasDropoutAdd(ctx, x32.view(), with_bias ? &b32_view : nullptr, args,
                                         r32.view(), out32.view())
                              .ok());
              Tensor rounded = Tensor::Host(shape, dt);
              ASSERT_TRUE(Convert(ctx, out32.view(), rounded.view()).ok());
              EXPECT_TRUE(SameBits(rounded, out));
            }
            // out may alias x or residual.
            Tensor x2 = RandomTensor(shape, dt, 30);
            ASSERT_TRUE(BiasDropoutAdd(ctx, x2.view(), with_bias ? &bias_view : nullptr, args,
                                       residual.view(), x2.view())
                            .ok());
            EXPECT_TRUE(SameBits(x2, out));
            Tensor r2 = RandomTensor(shape, dt, 32);
            ASSERT_TRUE(BiasDropoutAdd(ctx, x.view(), with_bias ? &bias_view : nullptr, args,
                                       r2.view(), r2.view())
                            .ok());
            EXPECT_TRUE(SameBits(r2, out));
          }
        }
      }
    }
  }
}

TEST_F(DropoutTest, BiasDropoutAddIsBitwiseTheUnfusedChainAtF32) {
  // BiasAdd -> Dropout -> Add rounds to f32 after each step; the fused op must round the same way
  // (in particular, never contract (x + b) * scale + r into an FMA). Values spread over a wide
  // range, so that an FMA would change many results. Also independent of the thread count and
  // of the SIMD target.
  const Shape shape = {67, 257};
  for (bool with_bias : {true, false}) {
    for (float p : {0.0f, 0.3f}) {
      for (bool tp_keys : {false, true}) {
        SCOPED_TRACE(absl::StrCat("bias ", with_bias, " p ", p, " tp keys ", tp_keys));
        DropoutArgs args = BiasDropoutAddArgs(p);
        if (tp_keys) {  // A tensor-parallel slice's key mapping.
          args.key_inner = 3 * 257;
          args.key_outer_stride = 8 * 257;
        }
        Tensor x = RandomTensor(shape, DType::kF32, 34, -1000.0, 1000.0);
        Tensor bias = RandomTensor({shape.back()}, DType::kF32, 35, -3.0, 3.0);
        Tensor residual = RandomTensor(shape, DType::kF32, 36, -1.0, 1.0);
        const TensorView bias_view = bias.view();
        std::vector<Tensor> fused;
        for (const SimdTarget& target : SimdTargets()) {
          ScopedSimdTarget scope(target);
          for (const ExecContext& ctx : Contexts()) {
            Tensor chain = Tensor::Host(shape, DType::kF32);
            if (with_bias) {
              ASSERT_TRUE(BiasAdd(ctx, x.view(), bias.view(), chain.view()).ok());
            } else {
              ASSERT_TRUE(Convert(ctx, x.view(), chain.view()).ok());  // A copy.
            }
            ASSERT_TRUE(Dropout(ctx, chain.view(), args, chain.view()).ok());
            ASSERT_TRUE(Add(ctx, residual.view(), chain.view(), chain.view()).ok());
            Tensor out = Tensor::Host(shape, DType::kF32);
            ASSERT_TRUE(BiasDropoutAdd(ctx, x.view(), with_bias ? &bias_view : nullptr, args,
                                       residual.view(), out.view())
                            .ok());
            EXPECT_TRUE(SameBits(out, chain)) << target.name;
            fused.push_back(std::move(out));
          }
        }
        for (const Tensor& f : fused) EXPECT_TRUE(SameBits(f, fused[0]));
      }
    }
  }
}

TEST_F(DropoutTest, BiasDropoutAddBackwardIsDropoutBackwardAndBiasGrad) {
  // The documented backward: dresidual = dout, dx = DropoutBackward(dout), dbias = BiasGrad(dx),
  // against central differences of the float64 reference forward.
  const ExecContext ctx{&pool_};
  const Shape shape = {5, 17};
  const DropoutArgs args = BiasDropoutAddArgs(0.3f);
  Tensor x = RandomTensor(shape, DType::kF32, 37);
  Tensor bias = RandomTensor({17}, DType::kF32, 38);
  Tensor residual = RandomTensor(shape, DType::kF32, 39);
  Tensor dout = RandomTensor(shape, DType::kF32, 40);
  Tensor dx = Tensor::Host(shape, DType::kF32), dbias = Tensor::Host({17}, DType::kF32);
  ASSERT_TRUE(DropoutBackward(ctx, dout.view(), args, dx.view()).ok());
  ASSERT_TRUE(BiasGrad(ctx, dx.view(), dbias.view()).ok());
  const std::vector<double> dod = ToDoubles(dout.view());
  const std::vector<double> xd = ToDoubles(x.view()), bd = ToDoubles(bias.view()),
                            rd = ToDoubles(residual.view());
  auto loss_of = [&](const std::vector<double>& xs, const std::vector<double>& bs,
                     const std::vector<double>& rs) {
    double l = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const bool keep = RefKeep(args, static_cast<int64_t>(i));
      l += dod[i] * (rs[i] + (keep ? (xs[i] + bs[i % 17]) / (1.0 - args.p) : 0.0));
    }
    return l;
  };
  EXPECT_TRUE(AllClose(
      dx.view(),
      NumericalGradient([&](const std::vector<double>& v) { return loss_of(v, bd, rd); }, xd),
      4 * kU32, 1e-7));
  EXPECT_TRUE(AllClose(
      dbias.view(),
      NumericalGradient([&](const std::vector<double>& v) { return loss_of(xd, v, rd); }, bd), 1e-6,
      1e-6));
  EXPECT_TRUE(AllClose(
      dod, NumericalGradient([&](const std::vector<double>& v) { return loss_of(xd, bd, v); }, rd),
      1e-6, 1e-6));
}

TEST_F(DropoutTest, BiasDropoutAddArguments) {
  const ExecContext ctx;
  Tensor x = RandomTensor({3, 4}, DType::kF32, 41);
  Tensor r = RandomTensor({3, 4}, DType::kF32, 42);
  Tensor wide = RandomTensor({3, 5}, DType::kF32, 43);
  Tensor h = RandomTensor({3, 4}, DType::kBF16, 44);
  Tensor bias = RandomTensor({4}, DType::kF32, 45);
  Tensor bias5 = RandomTensor({5}, DType::kF32, 46);
  Tensor bias16 = RandomTensor({4}, DType::kBF16, 47);
  const TensorView b = bias.view(), b5 = bias5.view(), b16 = bias16.view();
  DropoutArgs args = BiasDropoutAddArgs(0.3f);
  ASSERT_TRUE(BiasDropoutAdd(ctx, x.view(), &b, args, r.view(), r.view()).ok());

  absl::Status s = BiasDropoutAdd(ctx, x.view(), &b, args, wide.view(), x.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("BiasDropoutAdd: residual has shape [3, 5]"));
  s = BiasDropoutAdd(ctx, x.view(), &b, args, r.view(), h.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("BiasDropoutAdd: out has dtype bf16"));
  s = BiasDropoutAdd(ctx, x.view(), &b5, args, r.view(), x.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("BiasDropoutAdd: bias has shape [5]"));
  s = BiasDropoutAdd(ctx, x.view(), &b16, args, r.view(), x.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("BiasDropoutAdd"));
  Tensor i = Tensor::Zeros({3, 4}, DType::kI32);
  s = BiasDropoutAdd(ctx, i.view(), nullptr, args, i.view(), i.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("BiasDropoutAdd: x has unsupported dtype i32"));

  TensorView strided = wide.view();  // Every other column of a [3, 5]: not contiguous.
  strided.shape = {3, 2};
  strided.strides = {5, 2};
  s = BiasDropoutAdd(ctx, strided, nullptr, args, strided, strided);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("must be contiguous"));

  Tensor scalar = RandomTensor({}, DType::kF32, 48);
  s = BiasDropoutAdd(ctx, scalar.view(), nullptr, args, scalar.view(), scalar.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank >= 1"));

  TensorView bias_gpu(bias.data(), {4}, DType::kF32, Device::Cuda(0));
  s = BiasDropoutAdd(ctx, x.view(), &bias_gpu, args, r.view(), x.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bias is on cuda:0"));

  for (float p : {-0.1f, 1.0f, NAN}) {
    args.p = p;
    s = BiasDropoutAdd(ctx, x.view(), &b, args, r.view(), x.view());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_THAT(std::string(s.message()), HasSubstr("BiasDropoutAdd: dropout probability"));
  }
  args.p = 0.5f;
  args.key_inner = 8;
  args.key_outer_stride = 4;
  EXPECT_EQ(BiasDropoutAdd(ctx, x.view(), &b, args, r.view(), x.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ops
}  // namespace mt
