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
#include "core/status.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::AttentionRef;
using ::mt::testing::AttentionReference;
using ::mt::testing::ExpectNearReference;
using ::mt::testing::FromDoubles;
using ::mt::testing::IsError;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomInts;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;

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
  const absl::Status s = [&]() -> absl::Status {
    RETURN_IF_ERROR(FusedAttention(ctx, in.q.view(), in.k.view(), in.v.view(), args, r.out.view(),
                                   r.lse.view()));
    return FusedAttentionBackward(ctx, in.q.view(), in.k.view(), in.v.view(), r.out.view(),
                                  in.dout.view(), r.lse.view(), args, r.dq.view(), r.dk.view(),
                                  r.dv.view());
  }();
  if (!s.ok()) ADD_FAILURE() << "RunFused " << d.Name() << ": " << s;
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
  SoftmaxOptions so;
  so.scale = args.scale;
  so.causal = args.causal;
  so.padding_mask = args.padding_mask;
  const absl::Status s = [&]() -> absl::Status {
    RETURN_IF_ERROR(
        BatchedGemm(ctx, as3(in.q, d.Tq, d.D), as3(in.k, d.Tk, d.D), as3(scores, d.Tq, d.Tk), nt));
    RETURN_IF_ERROR(Softmax(ctx, scores.view(), probs.view(), so));
    RETURN_IF_ERROR(Dropout(ctx, probs.view(), args.dropout, dropped.view()));
    RETURN_IF_ERROR(
        BatchedGemm(ctx, as3(dropped, d.Tq, d.Tk), as3(in.v, d.Tk, d.D), as3(r.out, d.Tq, d.D)));
    RETURN_IF_ERROR(BatchedGemm(ctx, as3(in.dout, d.Tq, d.D), as3(in.v, d.Tk, d.D),
                                as3(dprobs, d.Tq, d.Tk), nt));
    RETURN_IF_ERROR(BatchedGemm(ctx, as3(dropped, d.Tq, d.Tk), as3(in.dout, d.Tq, d.D),
                                as3(r.dv, d.Tk, d.D), tn));
    RETURN_IF_ERROR(DropoutBackward(ctx, dprobs.view(), args.dropout, dprobs.view()));
    RETURN_IF_ERROR(SoftmaxBackward(ctx, probs.view(), dprobs.view(), dprobs.view(), args.scale));
    RETURN_IF_ERROR(
        BatchedGemm(ctx, as3(dprobs, d.Tq, d.Tk), as3(in.k, d.Tk, d.D), as3(r.dq, d.Tq, d.D)));
    return BatchedGemm(ctx, as3(dprobs, d.Tq, d.Tk), as3(in.q, d.Tq, d.D), as3(r.dk, d.Tk, d.D),
                       tn);
  }();
  if (!s.ok()) ADD_FAILURE() << "RunUnfused " << d.Name() << ": " << s;
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
  const std::vector<FdCase> cases = {
      {{1, 2, 5, 5, 8}, false, false, 0.0f},   {{1, 2, 5, 5, 8}, true, false, 0.0f},
      {{2, 1, 7, 4, 8}, true, true, 0.0f},     {{2, 1, 3, 6, 5}, false, true, 0.0f},
      {{1, 2, 6, 6, 8}, true, true, 0.3f},     {{2, 4, 5, 6, 4, 2}, true, true, 0.0f},
      {{1, 3, 4, 5, 4, 1}, false, false, 0.3f}};
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

TEST_F(AttentionTest, GroupedQueryAttentionMatchesFloat64Reference) {
  // k and v with G < NH heads (query head h reads group h / (NH / G)): G = 1 (multi-query) and
  // G = 2 of 4 and 6 heads, over several key tiles (dk and dv sum the group's heads).
  const std::vector<Dims> dims = {{2, 4, 7, 7, 8, 1}, {1, 6, 33, 70, 24, 2}, {2, 4, 9, 5, 8, 2}};
  uint64_t seed = 1300;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const Dims& d : dims) {
      for (bool causal : {false, true}) {
        for (float p : {0.0f, 0.3f}) {
          SCOPED_TRACE(
              absl::StrCat(DTypeName(dt), " ", d.Name(), causal ? " causal" : "", " p=", p));
          const Inputs in = MakeInputs(d, dt, seed);
          seed += 4;
          const Tensor mask = MakePaddingMask(d.B, d.Tk, seed++);
          const AttentionArgs args = MakeArgs(d, causal, &mask, p);
          const Result r = RunFused(ExecContext{}, d, in, args);
          EXPECT_TRUE(SameBits(r, RunFused(ExecContext{&pool_}, d, in, args)));
          ExpectNearReference(r, AttentionReference(d, args, in), dt);
        }
      }
    }
  }
}

TEST_F(AttentionTest, GroupsReadTheSameRowsAsRepeatedKeysAndValues) {
  // The same attention with each group's k and v copied to its NH / G query heads: the forward
  // bitwise (the same rows are read), dq bitwise, and dk, dv of a group the sum of its copies'.
  const Dims grouped{2, 6, 9, 11, 8, 3};
  const Dims repeated{2, 6, 9, 11, 8};
  const Inputs in = MakeInputs(grouped, DType::kF32, 1400);
  const std::vector<double> k = ToDoubles(in.k.view()), v = ToDoubles(in.v.view());
  std::vector<double> k_rep, v_rep;
  const int64_t row = grouped.Tk * grouped.D;
  for (int64_t bh = 0; bh < grouped.B * grouped.NH; ++bh) {
    const int64_t kv = grouped.KvHead(bh);
    k_rep.insert(k_rep.end(), k.begin() + kv * row, k.begin() + (kv + 1) * row);
    v_rep.insert(v_rep.end(), v.begin() + kv * row, v.begin() + (kv + 1) * row);
  }
  Inputs in_rep = MakeInputs(repeated, DType::kF32, 1400);  // The same q and dout.
  in_rep.k = FromDoubles(repeated.KShape(), DType::kF32, k_rep);
  in_rep.v = FromDoubles(repeated.KShape(), DType::kF32, v_rep);
  const Tensor mask = MakePaddingMask(grouped.B, grouped.Tk, 1401);
  const AttentionArgs args = MakeArgs(grouped, /*causal=*/true, &mask, 0.3f);
  const Result g = RunFused(ExecContext{&pool_}, grouped, in, args);
  const Result r = RunFused(ExecContext{&pool_}, repeated, in_rep, args);
  EXPECT_TRUE(::mt::testing::SameBits(g.out, r.out));
  EXPECT_TRUE(::mt::testing::SameBits(g.lse, r.lse));
  EXPECT_TRUE(::mt::testing::SameBits(g.dq, r.dq));
  const std::vector<double> dk_rep = ToDoubles(r.dk.view()), dv_rep = ToDoubles(r.dv.view());
  std::vector<double> dk_sum(k.size(), 0.0), dv_sum(v.size(), 0.0), dk_abs(k.size(), 0.0);
  for (int64_t bh = 0; bh < grouped.B * grouped.NH; ++bh) {
    const int64_t kv = grouped.KvHead(bh);
    for (int64_t e = 0; e < row; ++e) {
      dk_sum[kv * row + e] += dk_rep[bh * row + e];
      dv_sum[kv * row + e] += dv_rep[bh * row + e];
      dk_abs[kv * row + e] += std::fabs(dk_rep[bh * row + e]) + std::fabs(dv_rep[bh * row + e]);
    }
  }
  double mag = 0;
  for (double x : dk_abs) mag = std::max(mag, x);
  ASSERT_GT(mag, 0.1);  // Not a degenerate case.
  // Each copy's gradient is a sum of the same f32 terms in another grouping.
  const double atol = 64.0 * grouped.Tq * kU32 * mag;
  EXPECT_TRUE(AllClose(g.dk.view(), dk_sum, 0, atol));
  EXPECT_TRUE(AllClose(g.dv.view(), dv_sum, 0, atol));
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

// ---- Errors: valid arguments of every kind, broken one at a time ----

class AttentionErrorTest : public ::testing::Test {
 protected:
  static constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

  void SetUp() override {
    ASSERT_TRUE(Forward(q_, k_, v_, good_, out_.view(), lse_.view()).ok());
    ASSERT_TRUE(Backward(in_.dout.view(), lse_.view(), dq_.view(), dk_.view(), dv_.view()).ok());
  }

  absl::Status Forward(const TensorView& q, const TensorView& k, const TensorView& v,
                       const AttentionArgs& a, const TensorView& out, const TensorView& lse) const {
    return FusedAttention(ctx_, q, k, v, a, out, lse);
  }
  // The good tensors with args `a`.
  absl::Status Forward(const AttentionArgs& a) const {
    return Forward(q_, k_, v_, a, out_.view(), lse_.view());
  }
  absl::Status Backward(const TensorView& dout, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv) const {
    return FusedAttentionBackward(ctx_, q_, k_, v_, out_.view(), dout, lse, good_, dq, dk, dv);
  }

  const ExecContext ctx_;
  const Dims d_{2, 2, 3, 4, 5};
  const Inputs in_ = MakeInputs(d_, DType::kF32, 95);
  const TensorView q_ = in_.q.view(), k_ = in_.k.view(), v_ = in_.v.view();
  const Tensor out_ = Tensor::Host(d_.QShape(), DType::kF32);
  const Tensor lse_ = Tensor::Host(d_.LseShape(), DType::kF32);
  const Tensor dq_ = Tensor::Host(d_.QShape(), DType::kF32);
  const Tensor dk_ = Tensor::Host(d_.KShape(), DType::kF32);
  const Tensor dv_ = Tensor::Host(d_.KShape(), DType::kF32);
  const Tensor mask_ = MakePaddingMask(d_.B, d_.Tk, 96);
  const AttentionArgs good_ = MakeArgs(d_, true, &mask_, 0.1f);
};

TEST_F(AttentionErrorTest, RanksAndShapes) {
  const TensorView out = out_.view(), lse = lse_.view();
  TensorView q3(in_.q.data(), {4, 3, 5}, DType::kF32);
  EXPECT_TRUE(IsError(Forward(q3, k_, v_, good_, out, lse), kInvalid,
                      "FusedAttention: q has shape [4, 3, 5] (rank 3), expected rank 4"));
  TensorView k_bad(in_.k.data(), {2, 2, 5, 4}, DType::kF32);
  EXPECT_TRUE(IsError(Forward(q_, k_bad, v_, good_, out, lse), kInvalid,
                      "FusedAttention: k has shape [2, 2, 5, 4], expected [2, 2, 5, 5]"));
  TensorView k_groups(in_.k.data(), {1, 3, 4, 5}, DType::kF32);
  EXPECT_TRUE(
      IsError(Forward(q_, k_groups, v_, good_, out, lse), kInvalid,
              "FusedAttention: k f32[1, 3, 4, 5] on cpu has 3 key/value heads, which do not "
              "divide the 2 query heads"));
  TensorView v_bad(in_.v.data(), {2, 2, 2, 5}, DType::kF32);
  EXPECT_TRUE(
      IsError(Forward(q_, k_, v_bad, good_, out, lse), kInvalid, "FusedAttention: v has shape"));
  TensorView out_bad(out_.data(), {2, 2, 5, 3}, DType::kF32);
  EXPECT_TRUE(
      IsError(Forward(q_, k_, v_, good_, out_bad, lse), kInvalid, "FusedAttention: out has shape"));
  TensorView lse_bad(lse_.data(), {2, 3, 2}, DType::kF32);
  EXPECT_TRUE(IsError(Forward(q_, k_, v_, good_, out, lse_bad), kInvalid,
                      "FusedAttention: lse has shape [2, 3, 2], expected [2, 2, 3]"));
}

TEST_F(AttentionErrorTest, Dtypes) {
  const TensorView out = out_.view(), lse = lse_.view();
  Tensor lse16 = Tensor::Host(d_.LseShape(), DType::kBF16);
  EXPECT_TRUE(IsError(Forward(q_, k_, v_, good_, out, lse16.view()), kInvalid,
                      "FusedAttention: lse has dtype bf16, expected f32"));
  Tensor k16 = Tensor::Host(d_.KShape(), DType::kBF16);
  EXPECT_TRUE(IsError(Forward(q_, k16.view(), v_, good_, out, lse), kInvalid,
                      "FusedAttention: k has dtype bf16, expected f32 (the dtype of q)"));
  Tensor qi = Tensor::Zeros(d_.QShape(), DType::kI32);
  EXPECT_TRUE(IsError(Forward(qi.view(), k_, v_, good_, out, lse), absl::StatusCode::kUnimplemented,
                      "FusedAttention: q has unsupported dtype i32"));
}

TEST_F(AttentionErrorTest, LayoutDevicesAndOverlap) {
  const TensorView out = out_.view(), lse = lse_.view();
  TensorView strided = q_;
  strided.strides = {30, 15, 5, 2};
  EXPECT_TRUE(IsError(Forward(strided, k_, v_, good_, out, lse), kInvalid, "FusedAttention: q ("));
  TensorView v_gpu(in_.v.data(), d_.KShape(), DType::kF32, Device::Cuda(0));
  EXPECT_TRUE(IsError(Forward(q_, k_, v_gpu, good_, out, lse), kInvalid,
                      "FusedAttention: v is on cuda:0, expected cpu"));
  EXPECT_TRUE(IsError(Forward(q_, k_, v_, good_, q_, lse), kInvalid,
                      "FusedAttention: output out overlaps input q"));
  TensorView lse_in_out(out_.data(), d_.LseShape(), DType::kF32);
  EXPECT_TRUE(IsError(Forward(q_, k_, v_, good_, out, lse_in_out), kInvalid,
                      "FusedAttention: outputs out and lse overlap"));
}

TEST_F(AttentionErrorTest, Args) {
  AttentionArgs a = good_;
  a.scale = NAN;
  EXPECT_TRUE(IsError(Forward(a), kInvalid, "FusedAttention: scale = nan"));
  a = good_;
  a.dropout.p = 1.0f;
  EXPECT_TRUE(
      IsError(Forward(a), kInvalid, "FusedAttention: dropout probability p = 1 is outside [0, 1)"));
  a = good_;
  a.dropout.key_outer_stride = a.dropout.key_inner - 1;
  EXPECT_TRUE(IsError(Forward(a), kInvalid, "FusedAttention: bad dropout key mapping"));
  const Tensor mask_bad = MakePaddingMask(d_.B, d_.Tk + 1, 97);
  a = good_;
  a.padding_mask = &mask_bad.view();
  EXPECT_TRUE(IsError(Forward(a), kInvalid,
                      "FusedAttention: padding_mask has shape [2, 5], expected [2, 4]"));
  const Tensor mask64 = RandomInts({d_.B, d_.Tk}, DType::kI64, 98, 0, 2);
  a.padding_mask = &mask64.view();
  EXPECT_TRUE(IsError(Forward(a), absl::StatusCode::kUnimplemented,
                      "FusedAttention: padding_mask has unsupported dtype i64"));
}

TEST_F(AttentionErrorTest, Backward) {
  const TensorView dout = in_.dout.view(), lse = lse_.view();
  const TensorView dq = dq_.view(), dk = dk_.view(), dv = dv_.view();
  TensorView dout_bad(in_.dout.data(), {2, 2, 5, 3}, DType::kF32);
  EXPECT_TRUE(IsError(Backward(dout_bad, lse, dq, dk, dv), kInvalid,
                      "FusedAttentionBackward: dout has shape"));
  TensorView dk_bad(dk_.data(), {2, 2, 5, 4}, DType::kF32);
  EXPECT_TRUE(IsError(Backward(dout, lse, dq, dk_bad, dv), kInvalid,
                      "FusedAttentionBackward: dk has shape"));
  EXPECT_TRUE(IsError(Backward(dout, lse, dq, dk, dk), kInvalid,
                      "FusedAttentionBackward: outputs dk and dv overlap"));
  EXPECT_TRUE(IsError(Backward(dout, lse, dout, dk, dv), kInvalid,
                      "FusedAttentionBackward: output dq overlaps input dout"));
  Tensor lse16 = Tensor::Host(d_.LseShape(), DType::kBF16);
  EXPECT_TRUE(IsError(Backward(dout, lse16.view(), dq, dk, dv), kInvalid,
                      "FusedAttentionBackward: lse has dtype bf16, expected f32"));
}

}  // namespace
}  // namespace ops
}  // namespace mt
