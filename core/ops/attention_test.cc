// The fused attention op against a float64 reference of the unfused math (attention_testutil),
// against central differences of that reference, and against the unfused op chain (BatchedGemm +
// Softmax + Dropout + BatchedGemm and its backward), with the same dropout masks; odd sizes,
// causal and padding masks (fully masked rows included), every float dtype, and 1 or 3 threads.
#include "core/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/attention_testutil.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/softmax.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::AttentionRef;
using ::mt::testing::AttentionReference;
using ::mt::testing::ExpectNearReference;
using ::mt::testing::FromDoubles;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomInts;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::testing::HasSubstr;

using Dims = ::mt::testing::AttentionDims;
using Inputs = ::mt::testing::AttentionInputs;
using Result = ::mt::testing::AttentionResult;

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
const double kU32 = UnitRoundoff(DType::kF32);

Inputs MakeInputs(const Dims& d, DType dt, uint64_t seed) {
  return ::mt::testing::RandomAttentionInputs(d, dt, seed);
}
Tensor MakePaddingMask(int64_t B, int64_t Tk, uint64_t seed) {
  return ::mt::testing::RandomPaddingMask(B, Tk, seed);
}
AttentionArgs MakeArgs(const Dims& d, bool causal, const Tensor* mask, float p) {
  return ::mt::testing::MakeAttentionArgs(d, causal, mask == nullptr ? nullptr : &mask->view(), p);
}

// ---- running the op ----

// Forward, then backward from the forward's out and lse.
Result RunFused(const ExecContext& ctx, const Dims& d, const Inputs& in,
                const AttentionArgs& args) {
  const DType dt = in.q.dtype();
  Result r{Tensor::Host(d.QShape(), dt), Tensor::Host(d.LseShape(), DType::kF32),
           Tensor::Host(d.QShape(), dt), Tensor::Host(d.KShape(), dt),
           Tensor::Host(d.KShape(), dt)};
  absl::Status s =
      FusedAttention(ctx, in.q.view(), in.k.view(), in.v.view(), args, r.out.view(), r.lse.view());
  CHECK(s.ok()) << s;
  s = FusedAttentionBackward(ctx, in.q.view(), in.k.view(), in.v.view(), r.out.view(),
                             in.dout.view(), r.lse.view(), args, r.dq.view(), r.dk.view(),
                             r.dv.view());
  CHECK(s.ok()) << s;
  return r;
}

// The unfused chain nn/attention.cc runs, forward and backward.
Result RunUnfused(const ExecContext& ctx, const Dims& d, const Inputs& in,
                  const AttentionArgs& args) {
  const DType dt = in.q.dtype();
  const int64_t Bt = d.B * d.NH;
  auto as3 = [&](const Tensor& t, int64_t rows, int64_t cols) {
    return TensorView(t.data(), {Bt, rows, cols}, t.dtype());
  };
  const Shape probs_shape = {d.B, d.NH, d.Tq, d.Tk};
  Tensor scores = Tensor::Host(probs_shape, dt), probs = Tensor::Host(probs_shape, dt),
         dropped = Tensor::Host(probs_shape, dt), dprobs = Tensor::Host(probs_shape, dt);
  Result r{Tensor::Host(d.QShape(), dt), Tensor(), Tensor::Host(d.QShape(), dt),
           Tensor::Host(d.KShape(), dt), Tensor::Host(d.KShape(), dt)};
  GemmOptions nt, tn;
  nt.transpose_b = Transpose::kYes;
  tn.transpose_a = Transpose::kYes;
  CHECK(BatchedGemm(ctx, as3(in.q, d.Tq, d.D), as3(in.k, d.Tk, d.D), as3(scores, d.Tq, d.Tk), nt)
            .ok());
  SoftmaxOptions so;
  so.scale = args.scale;
  so.causal = args.causal;
  so.padding_mask = args.padding_mask;
  CHECK(Softmax(ctx, scores.view(), probs.view(), so).ok());
  CHECK(Dropout(ctx, probs.view(), args.dropout, dropped.view()).ok());
  CHECK(
      BatchedGemm(ctx, as3(dropped, d.Tq, d.Tk), as3(in.v, d.Tk, d.D), as3(r.out, d.Tq, d.D)).ok());
  CHECK(BatchedGemm(ctx, as3(in.dout, d.Tq, d.D), as3(in.v, d.Tk, d.D), as3(dprobs, d.Tq, d.Tk), nt)
            .ok());
  CHECK(
      BatchedGemm(ctx, as3(dropped, d.Tq, d.Tk), as3(in.dout, d.Tq, d.D), as3(r.dv, d.Tk, d.D), tn)
          .ok());
  CHECK(DropoutBackward(ctx, dprobs.view(), args.dropout, dprobs.view()).ok());
  CHECK(SoftmaxBackward(ctx, probs.view(), dprobs.view(), dprobs.view(), args.scale).ok());
  CHECK(BatchedGemm(ctx, as3(dprobs, d.Tq, d.Tk), as3(in.k, d.Tk, d.D), as3(r.dq, d.Tq, d.D)).ok());
  CHECK(BatchedGemm(ctx, as3(dprobs, d.Tq, d.Tk), as3(in.q, d.Tq, d.D), as3(r.dk, d.Tk, d.D), tn)
            .ok());
  return r;
}

class AttentionTest : public ::testing::Test {
 protected:
  ThreadPool pool_{3};
  std::vector<ExecContext> Contexts() { return {ExecContext{}, ExecContext{&pool_}}; }
};

TEST_F(AttentionTest, HandComputedCase) {
  // One head, q = [1, 2], k = [1, 0], v = [10, 20] (D = 1), scale 1.
  const Dims d{1, 1, 2, 2, 1};
  Tensor q = FromDoubles(d.QShape(), DType::kF32, {1, 2});
  Tensor k = FromDoubles(d.KShape(), DType::kF32, {1, 0});
  Tensor v = FromDoubles(d.KShape(), DType::kF32, {10, 20});
  Tensor out = Tensor::Host(d.QShape(), DType::kF32), lse = Tensor::Host(d.LseShape(), DType::kF32);
  AttentionArgs args;
  const ExecContext ctx;
  ASSERT_TRUE(FusedAttention(ctx, q.view(), k.view(), v.view(), args, out.view(), lse.view()).ok());
  // Row 0: softmax([1, 0]) = [e, 1] / (e + 1); row 1: softmax([2, 0]).
  EXPECT_TRUE(AllClose(out.view(), {12.689414213699951, 11.192029220221174}, 8 * kU32, 0));
  EXPECT_TRUE(AllClose(lse.view(), {1.3132616875182228, 2.1269280110429727}, 8 * kU32, 0));
  // Causal: row 0 sees key 0 only.
  args.causal = CausalMask::kYes;
  ASSERT_TRUE(FusedAttention(ctx, q.view(), k.view(), v.view(), args, out.view(), lse.view()).ok());
  EXPECT_TRUE(AllClose(out.view(), {10.0, 11.192029220221174}, 8 * kU32, 0));
  EXPECT_TRUE(AllClose(lse.view(), {1.0, 2.1269280110429727}, 8 * kU32, 0));
}

TEST_F(AttentionTest, ForwardAndBackwardMatchFloat64Reference) {
  // T = 1, 7, 33, 130 (several query and key tiles), Tq < Tk and Tq > Tk; head dims that use
  // every path of the tile products (vectors of 16 and 8 columns, scalar remainders).
  const std::vector<Dims> dims = {{1, 1, 1, 1, 8},      {2, 1, 7, 7, 24},   {1, 2, 33, 33, 8},
                                  {1, 1, 130, 130, 24}, {2, 3, 5, 9, 8},    {2, 2, 9, 5, 24},
                                  {1, 2, 67, 67, 37},   {1, 1, 65, 129, 64}};
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (const Dims& d : dims) {
      for (bool causal : {false, true}) {
        for (bool padded : {false, true}) {
          for (float p : {0.0f, 0.3f}) {
            SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ", d.Name(), causal ? " causal" : "",
                                      padded ? " padded" : "", " p=", p));
            const Inputs in = MakeInputs(d, dt, seed);
            seed += 4;
            const Tensor mask = MakePaddingMask(d.B, d.Tk, seed++);
            const AttentionArgs args = MakeArgs(d, causal, padded ? &mask : nullptr, p);
            std::vector<Result> runs;
            for (const ExecContext& ctx : Contexts()) runs.push_back(RunFused(ctx, d, in, args));
            const Result& r = runs[0];
            // Bitwise independent of the thread count.
            EXPECT_TRUE(SameBits(r, runs[1]));

            ExpectNearReference(r, AttentionReference(d, args, in), dt);
          }
        }
      }
    }
  }
}

TEST_F(AttentionTest, BackwardMatchesFiniteDifferences) {
  // f32, loss = sum(out * w); the gradient of the float64 reference by central differences.
  struct FdCase {
    Dims d;
    bool causal, padded;
    float p;
  };
  const std::vector<FdCase> cases = {{{1, 2, 5, 5, 8}, false, false, 0.0f},
                                     {{1, 2, 5, 5, 8}, true, false, 0.0f},
                                     {{2, 1, 7, 4, 8}, true, true, 0.0f},
                                     {{2, 1, 3, 6, 5}, false, true, 0.0f},
                                     {{1, 2, 6, 6, 8}, true, true, 0.3f}};
  uint64_t seed = 900;
  for (const FdCase& c : cases) {
    const Dims& d = c.d;
    SCOPED_TRACE(
        absl::StrCat(d.Name(), c.causal ? " causal" : "", c.padded ? " padded" : "", " p=", c.p));
    const Inputs in = MakeInputs(d, DType::kF32, seed);
    seed += 4;
    const Tensor mask = MakePaddingMask(d.B, d.Tk, seed++);
    const AttentionArgs args = MakeArgs(d, c.causal, c.padded ? &mask : nullptr, c.p);
    const Result r = RunFused(ExecContext{&pool_}, d, in, args);
    std::vector<double> q = ToDoubles(in.q.view()), k = ToDoubles(in.k.view()),
                        v = ToDoubles(in.v.view());
    const std::vector<double> w = ToDoubles(in.dout.view());
    auto loss_of = [&](std::vector<double>* x) {
      return [&, x](const std::vector<double>& value) {
        const std::vector<double> saved = *x;
        *x = value;
        const std::vector<double> out = AttentionReference(d, args, q, k, v, w).out;
        *x = saved;
        double l = 0;
        for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
        return l;
      };
    };
    const AttentionRef ref = AttentionReference(d, args, q, k, v, w);
    const double e = 16.0 * ref.prob_err;
    EXPECT_TRUE(AllClose(r.dq.view(), NumericalGradient(loss_of(&q), q), 0, e * ref.dq_mag + 1e-7));
    EXPECT_TRUE(AllClose(r.dk.view(), NumericalGradient(loss_of(&k), k), 0, e * ref.dk_mag + 1e-7));
    EXPECT_TRUE(AllClose(r.dv.view(), NumericalGradient(loss_of(&v), v), 0, e * ref.dv_mag + 1e-7));
  }
}

TEST_F(AttentionTest, MatchesTheUnfusedOpChainWithTheSameDropoutMask) {
  // What nn/attention.cc computes today, with its dropout key mapping: switching to the fused op
  // changes results only by float rounding.
  const std::vector<Dims> dims = {{2, 2, 33, 33, 24}, {1, 3, 70, 70, 8}};
  uint64_t seed = 500;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const double u = UnitRoundoff(dt);
    for (const Dims& d : dims) {
      for (bool causal : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ", d.Name(), causal ? " causal" : ""));
        const Inputs in = MakeInputs(d, dt, seed);
        seed += 4;
        const Tensor mask = MakePaddingMask(d.B, d.Tk, seed++);
        const AttentionArgs args = MakeArgs(d, causal, &mask, 0.3f);
        const ExecContext ctx{&pool_};
        const Result fused = RunFused(ctx, d, in, args);
        const Result chain = RunUnfused(ctx, d, in, args);
        const AttentionRef ref = AttentionReference(d, args, in);
        // The chain rounds the scores, probabilities, dropped probabilities and their gradients
        // to the dtype (a score error u |s| is a relative probability error u |s|).
        double s_max = 0;
        for (double x : ref.lse) s_max = std::max(s_max, std::fabs(x));
        const double e = 8.0 * (u * (s_max + 6.0) + ref.prob_err);
        EXPECT_TRUE(AllClose(fused.out.view(), ToDoubles(chain.out.view()), 2 * u,
                             e * ref.out_mag + 1e-30));
        EXPECT_TRUE(
            AllClose(fused.dq.view(), ToDoubles(chain.dq.view()), 2 * u, e * ref.dq_mag + 1e-30));
        EXPECT_TRUE(
            AllClose(fused.dk.view(), ToDoubles(chain.dk.view()), 2 * u, e * ref.dk_mag + 1e-30));
        EXPECT_TRUE(
            AllClose(fused.dv.view(), ToDoubles(chain.dv.view()), 2 * u, e * ref.dv_mag + 1e-30));
      }
    }
  }
}

TEST_F(AttentionTest, DropoutMaskIsExactlyThatOfTheDropoutOp) {
  ::mt::testing::ExpectDropoutMaskOfTheDropoutOp(
      [&](const Dims& d, const Inputs& in, const AttentionArgs& args, const Tensor&) {
        return RunFused(ExecContext{&pool_}, d, in, args).out;
      });
}

TEST_F(AttentionTest, FullyMaskedRowsAndKeysGetZeros) {
  // Batch 1 is fully padded; with Tq > Tk and a causal mask the first Tq - Tk queries of batch 0
  // see nothing either.
  const Dims d{2, 2, 9, 6, 8};
  const Inputs in = MakeInputs(d, DType::kF32, 80);
  Tensor mask = MakePaddingMask(d.B, d.Tk, 81);
  const AttentionArgs args = MakeArgs(d, /*causal=*/true, &mask, 0.3f);
  const Result r = RunFused(ExecContext{&pool_}, d, in, args);
  const std::vector<double> out = ToDoubles(r.out.view()), lse = ToDoubles(r.lse.view()),
                            dq = ToDoubles(r.dq.view()), dk = ToDoubles(r.dk.view()),
                            dv = ToDoubles(r.dv.view());
  const int32_t* m = mask.data_as<int32_t>();
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
    for (int64_t i = 0; i < d.Tq; ++i) {
      const int64_t row = bh * d.Tq + i;
      if (bh / d.NH == 1 || i < d.Tq - d.Tk) {
        EXPECT_EQ(lse[row], -INFINITY) << row;
        for (int64_t c = 0; c < d.D; ++c) {
          ASSERT_EQ(out[row * d.D + c], 0.0);
          ASSERT_EQ(dq[row * d.D + c], 0.0);
        }
      } else {
        EXPECT_TRUE(std::isfinite(lse[row])) << row;
      }
    }
    for (int64_t j = 0; j < d.Tk; ++j) {
      if (m[(bh / d.NH) * d.Tk + j] != 0) continue;
      for (int64_t c = 0; c < d.D; ++c) {
        ASSERT_EQ(dk[(bh * d.Tk + j) * d.D + c], 0.0);
        ASSERT_EQ(dv[(bh * d.Tk + j) * d.D + c], 0.0);
      }
    }
  }
}

TEST_F(AttentionTest, EmptyTensors) {
  for (const Dims& d : {Dims{0, 2, 3, 3, 4}, Dims{1, 2, 0, 3, 4}, Dims{1, 1, 3, 0, 4}}) {
    SCOPED_TRACE(d.Name());
    const Inputs in = MakeInputs(d, DType::kF32, 90);
    const Result r = RunFused(ExecContext{&pool_}, d, in, MakeArgs(d, false, nullptr, 0.3f));
    // Tk = 0: every row sees nothing.
    for (double x : ToDoubles(r.out.view())) EXPECT_EQ(x, 0.0);
    for (double x : ToDoubles(r.lse.view())) EXPECT_EQ(x, -INFINITY);
    for (double x : ToDoubles(r.dq.view())) EXPECT_EQ(x, 0.0);
  }
}

TEST_F(AttentionTest, BadArgumentsAreReported) {
  const ExecContext ctx;
  const Dims d{2, 2, 3, 4, 5};
  const Inputs in = MakeInputs(d, DType::kF32, 95);
  Tensor out = Tensor::Host(d.QShape(), DType::kF32), lse = Tensor::Host(d.LseShape(), DType::kF32);
  Tensor dq = Tensor::Host(d.QShape(), DType::kF32), dk = Tensor::Host(d.KShape(), DType::kF32),
         dv = Tensor::Host(d.KShape(), DType::kF32);
  const Tensor mask = MakePaddingMask(d.B, d.Tk, 96);
  const AttentionArgs good = MakeArgs(d, true, &mask, 0.1f);
  ASSERT_TRUE(
      FusedAttention(ctx, in.q.view(), in.k.view(), in.v.view(), good, out.view(), lse.view())
          .ok());
  auto forward = [&](const TensorView& q, const TensorView& k, const TensorView& v,
                     const AttentionArgs& a, const TensorView& o,
                     const TensorView& l) { return FusedAttention(ctx, q, k, v, a, o, l); };
  auto expect = [](const absl::Status& s, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(text)) << s;
  };
  const TensorView q = in.q.view(), k = in.k.view(), v = in.v.view();
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

  // Ranks and shapes.
  TensorView q3(in.q.data(), {4, 3, 5}, DType::kF32);
  expect(forward(q3, k, v, good, out.view(), lse.view()), kInvalid,
         "FusedAttention: q has shape [4, 3, 5] (rank 3), expected rank 4");
  TensorView k_bad(in.k.data(), {2, 2, 5, 4}, DType::kF32);
  expect(forward(q, k_bad, v, good, out.view(), lse.view()), kInvalid,
         "FusedAttention: k has shape [2, 2, 5, 4], expected [2, 2, 5, 5]");
  TensorView v_bad(in.v.data(), {2, 2, 2, 5}, DType::kF32);
  expect(forward(q, k, v_bad, good, out.view(), lse.view()), kInvalid,
         "FusedAttention: v has shape");
  TensorView out_bad(out.data(), {2, 2, 5, 3}, DType::kF32);
  expect(forward(q, k, v, good, out_bad, lse.view()), kInvalid, "FusedAttention: out has shape");
  TensorView lse_bad(lse.data(), {2, 3, 2}, DType::kF32);
  expect(forward(q, k, v, good, out.view(), lse_bad), kInvalid,
         "FusedAttention: lse has shape [2, 3, 2], expected [2, 2, 3]");
  // Dtypes.
  Tensor lse16 = Tensor::Host(d.LseShape(), DType::kBF16);
  expect(forward(q, k, v, good, out.view(), lse16.view()), kInvalid,
         "FusedAttention: lse has dtype bf16, expected f32");
  Tensor k16 = Tensor::Host(d.KShape(), DType::kBF16);
  expect(forward(q, k16.view(), v, good, out.view(), lse.view()), kInvalid,
         "FusedAttention: k has dtype bf16, expected f32 (the dtype of q)");
  Tensor qi = Tensor::Zeros(d.QShape(), DType::kI32);
  expect(forward(qi.view(), k, v, good, out.view(), lse.view()), absl::StatusCode::kUnimplemented,
         "FusedAttention: q has unsupported dtype i32");
  // Layout, devices, overlap.
  TensorView strided = q;
  strided.strides = {30, 15, 5, 2};
  expect(forward(strided, k, v, good, out.view(), lse.view()), kInvalid, "FusedAttention: q (");
  TensorView v_gpu(in.v.data(), d.KShape(), DType::kF32, Device::Cuda(0));
  expect(forward(q, k, v_gpu, good, out.view(), lse.view()), kInvalid,
         "FusedAttention: v is on cuda:0, expected cpu");
  expect(forward(q, k, v, good, q, lse.view()), kInvalid,
         "FusedAttention: output out overlaps input q");
  TensorView lse_in_out(out.data(), d.LseShape(), DType::kF32);
  expect(forward(q, k, v, good, out.view(), lse_in_out), kInvalid,
         "FusedAttention: outputs out and lse overlap");
  // Args.
  AttentionArgs a = good;
  a.scale = NAN;
  expect(forward(q, k, v, a, out.view(), lse.view()), kInvalid, "FusedAttention: scale = nan");
  a = good;
  a.dropout.p = 1.0f;
  expect(forward(q, k, v, a, out.view(), lse.view()), kInvalid,
         "FusedAttention: dropout probability p = 1 is outside [0, 1)");
  a = good;
  a.dropout.key_outer_stride = a.dropout.key_inner - 1;
  expect(forward(q, k, v, a, out.view(), lse.view()), kInvalid,
         "FusedAttention: bad dropout key mapping");
  const Tensor mask_bad = MakePaddingMask(d.B, d.Tk + 1, 97);
  a = good;
  a.padding_mask = &mask_bad.view();
  expect(forward(q, k, v, a, out.view(), lse.view()), kInvalid,
         "FusedAttention: padding_mask has shape [2, 5], expected [2, 4]");
  const Tensor mask64 = RandomInts({d.B, d.Tk}, DType::kI64, 98, 0, 2);
  a.padding_mask = &mask64.view();
  expect(forward(q, k, v, a, out.view(), lse.view()), absl::StatusCode::kUnimplemented,
         "FusedAttention: padding_mask has unsupported dtype i64");

  // Backward.
  auto backward = [&](const TensorView& dout, const TensorView& l, const TensorView& gq,
                      const TensorView& gk, const TensorView& gv) {
    return FusedAttentionBackward(ctx, q, k, v, out.view(), dout, l, good, gq, gk, gv);
  };
  ASSERT_TRUE(backward(in.dout.view(), lse.view(), dq.view(), dk.view(), dv.view()).ok());
  TensorView dout_bad(in.dout.data(), {2, 2, 5, 3}, DType::kF32);
  expect(backward(dout_bad, lse.view(), dq.view(), dk.view(), dv.view()), kInvalid,
         "FusedAttentionBackward: dout has shape");
  TensorView dk_bad(dk.data(), {2, 2, 5, 4}, DType::kF32);
  expect(backward(in.dout.view(), lse.view(), dq.view(), dk_bad, dv.view()), kInvalid,
         "FusedAttentionBackward: dk has shape");
  expect(backward(in.dout.view(), lse.view(), dq.view(), dk.view(), dk.view()), kInvalid,
         "FusedAttentionBackward: outputs dk and dv overlap");
  expect(backward(in.dout.view(), lse.view(), in.dout.view(), dk.view(), dv.view()), kInvalid,
         "FusedAttentionBackward: output dq overlaps input dout");
  expect(backward(in.dout.view(), lse16.view(), dq.view(), dk.view(), dv.view()), kInvalid,
         "FusedAttentionBackward: lse has dtype bf16, expected f32");
}

}  // namespace
}  // namespace ops
}  // namespace mt
