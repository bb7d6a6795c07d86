#include "core/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/ops/testutil.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::kFloatTypes;
using ::mt::testing::MaxAbs;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::mt::testing::WriteDoubles;

constexpr DType kIdTypes[] = {DType::kI32, DType::kI64};
const double kU32 = UnitRoundoff(DType::kF32);

// Float64 references: loss = logsumexp(x) - x[t] (testutil's CrossEntropyReference), grad =
// (softmax(x) - onehot(t)) * dl, with kIgnoreIndex rows giving 0.
std::vector<double> RefLosses(const std::vector<double>& x, const std::vector<double>& t,
                              int64_t V) {
  return ::mt::testing::CrossEntropyReference(x, V, V, std::vector<int64_t>(t.begin(), t.end()));
}

std::vector<double> RefGrad(const std::vector<double>& x, const std::vector<double>& t,
                            const std::vector<double>& dl, int64_t V) {
  const size_t N = t.size();
  std::vector<double> g(N * V, 0.0);
  for (size_t n = 0; n < N; ++n) {
    if (t[n] == kIgnoreIndex) continue;
    const double* row = x.data() + n * V;
    const double mx = *std::max_element(row, row + V);
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(row[j] - mx);
    for (int64_t j = 0; j < V; ++j) {
      g[n * V + j] = (std::exp(row[j] - mx) / s - (j == t[n] ? 1.0 : 0.0)) * dl[n];
    }
  }
  return g;
}

// Targets in [0, V) with every third row ignored.
Tensor MakeTargets(int64_t N, int64_t V, DType dt, uint64_t seed) {
  Tensor t = RandomInts({N}, dt, seed, 0, V);
  std::vector<double> v = ToDoubles(t.view());
  for (int64_t n = 1; n < N; n += 3) v[n] = kIgnoreIndex;
  WriteDoubles(v, t.view());
  return t;
}

TEST(CrossEntropyTest, HandComputedLosses) {
  const ExecContext ctx;
  // Row 0: exp(logits) = 1, 2, 3, so with target 2 the loss is log(6) - log(3) = log(2).
  // Row 1: uniform logits over 3 classes: log(3). Row 2: ignored.
  Tensor logits =
      FromDoubles({3, 3}, DType::kF32, {0, std::log(2.0), std::log(3.0), 5, 5, 5, 100, -100, 3});
  Tensor targets = FromDoubles({3}, DType::kI64, {2, 0, static_cast<double>(kIgnoreIndex)});
  Tensor losses = Tensor::Host({3}, DType::kF32);
  ASSERT_TRUE(CrossEntropy(ctx, logits.view(), targets.view(), losses.view()).ok());
  EXPECT_TRUE(AllClose(losses.view(), {std::log(2.0), std::log(3.0), 0.0}, 4 * kU32, 4 * kU32));
}

// The forward and backward sweeps: on the calling thread and on a pool, every dtype, id dtype, N
// and V, with logits [N, V] in [-4, 4) and targets (MakeTargets) from seeds of N and V. Stops at
// the first fatal failure.
void ForEachSweepCase(
    const std::function<void(const ExecContext& ctx, DType dt, int64_t N, int64_t V,
                             const Tensor& logits, const Tensor& targets)>& body) {
  ThreadPool pool(3);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const ExecContext ctx{p};
    for (DType dt : kFloatTypes) {
      for (DType it : kIdTypes) {
        for (int64_t N : {1, 3, 17, 129}) {
          for (int64_t V : {1, 3, 17, 1031}) {
            SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " " << DTypeName(it) << " N=" << N
                                              << " V=" << V << " pool=" << (p != nullptr));
            const Tensor logits = RandomTensor({N, V}, dt, N * 1000 + V, -4.0, 4.0);
            const Tensor targets = MakeTargets(N, V, it, N + V);
            body(ctx, dt, N, V, logits, targets);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(CrossEntropyTest, ForwardMatchesFloat64) {
  ForEachSweepCase([](const ExecContext& ctx, DType dt, int64_t N, int64_t V, const Tensor& logits,
                      const Tensor& targets) {
    Tensor losses = Tensor::Host({N}, DType::kF32);
    WriteDoubles(std::vector<double>(N, 9.0), losses.view());
    ASSERT_TRUE(CrossEntropy(ctx, logits.view(), targets.view(), losses.view()).ok());
    // The reference reads the same (rounded) logits, so only f32 math error remains: a few
    // roundings in exp/log per term, plus the rounding of (max - x_t) and of the loss.
    const auto x = ToDoubles(logits.view());
    EXPECT_TRUE(AllClose(losses.view(), RefLosses(x, ToDoubles(targets.view()), V), 2 * kU32,
                         16 * kU32 * (1 + MaxAbs(x))));
  });
}

TEST(CrossEntropyTest, LargeLogitsDoNotOverflow) {
  const ExecContext ctx;
  const int64_t N = 4, V = 17;
  for (DType dt : kFloatTypes) {
    for (double offset : {1e4, -1e4, 60000.0}) {
      if (dt == DType::kF16 && std::fabs(offset) > 6e4) continue;  // Beyond f16's range.
      SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " offset " << offset);
      Tensor logits = RandomTensor({N, V}, dt, 3, offset - 20, offset + 20);
      Tensor targets = RandomInts({N}, DType::kI32, 4, 0, V);
      Tensor losses = Tensor::Host({N}, DType::kF32);
      ASSERT_TRUE(CrossEntropy(ctx, logits.view(), targets.view(), losses.view()).ok());
      const auto x = ToDoubles(logits.view());
      const auto ref = RefLosses(x, ToDoubles(targets.view()), V);
      // max - x_t is exact, so the error is relative to the loss (at most ~40 + log V), not to
      // the size of the logits.
      EXPECT_TRUE(AllClose(losses.view(), ref, 4 * kU32, 16 * kU32 * (1 + MaxAbs(ref))));
      Tensor dl = RandomTensor({N}, DType::kF32, 5, 0.5, 1.5);
      Tensor dx = Tensor::Host({N, V}, dt);
      ASSERT_TRUE(
          CrossEntropyBackward(ctx, logits.view(), targets.view(), dl.view(), dx.view()).ok());
      EXPECT_TRUE(AllClose(dx.view(),
                           RefGrad(x, ToDoubles(targets.view()), ToDoubles(dl.view()), V),
                           UnitRoundoff(dt) + 64 * kU32, 64 * kU32));
    }
  }
}

TEST(CrossEntropyTest, BackwardMatchesFloat64) {
  ForEachSweepCase([](const ExecContext& ctx, DType dt, int64_t N, int64_t V, const Tensor& logits,
                      const Tensor& targets) {
    Tensor dl = RandomTensor({N}, DType::kF32, N, -2.0, 2.0);
    Tensor dx = Tensor::Host({N, V}, dt);
    WriteDoubles(std::vector<double>(N * V, 9.0), dx.view());
    ASSERT_TRUE(
        CrossEntropyBackward(ctx, logits.view(), targets.view(), dl.view(), dx.view()).ok());
    // Each element: exp and a scale in f32 (a few u32 relative to p * dl), one subtraction at the
    // target, then one rounding to the dtype.
    const auto dl_d = ToDoubles(dl.view());
    EXPECT_TRUE(AllClose(dx.view(),
                         RefGrad(ToDoubles(logits.view()), ToDoubles(targets.view()), dl_d, V),
                         UnitRoundoff(dt) + 16 * kU32, 16 * kU32 * MaxAbs(dl_d)));
  });
}

TEST(CrossEntropyTest, BackwardMatchesFiniteDifferences) {
  // L(x) = sum_n dl[n] loss_n(x), differentiated by central differences of the f64 forward; row 2
  // is ignored, so its gradient must be exactly zero.
  const int64_t N = 5, V = 7;
  const ExecContext ctx;
  Tensor logits = RandomTensor({N, V}, DType::kF32, 21, -3.0, 3.0);
  Tensor targets = FromDoubles({N}, DType::kI32, {3, 0, static_cast<double>(kIgnoreIndex), 6, 3});
  Tensor dl = RandomTensor({N}, DType::kF32, 22, 0.1, 1.0);
  const auto t_d = ToDoubles(targets.view());
  const auto dl_d = ToDoubles(dl.view());
  auto loss = [&](const std::vector<double>& x) {
    const auto l = RefLosses(x, t_d, V);
    double s = 0;
    for (int64_t n = 0; n < N; ++n) s += dl_d[n] * l[n];
    return s;
  };
  const auto numeric = NumericalGradient(loss, ToDoubles(logits.view()), 1e-5);
  Tensor dx = Tensor::Host({N, V}, DType::kF32);
  ASSERT_TRUE(CrossEntropyBackward(ctx, logits.view(), targets.view(), dl.view(), dx.view()).ok());
  EXPECT_TRUE(AllClose(dx.view(), numeric, 1e-5, 1e-7));
  const auto got = ToDoubles(dx.view());
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(got[2 * V + j], 0.0);
}

// The f32 row loops are SIMD kernels with runtime dispatch whose lane operations round once (the
// row maximum, the exponentials and their sum, fast_math.h): every target gives the same bits.
TEST(CrossEntropyTest, SimdTargetsGiveIdenticalBits) {
  ThreadPool pool(2);
  const int64_t N = 33, V = 50304;  // GPT-2's padded vocabulary: long rows.
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(DTypeName(dt));
    const Tensor logits = RandomTensor({N, V}, dt, 41, -8.0, 8.0);
    const Tensor targets = MakeTargets(N, V, DType::kI32, 42);
    const Tensor dl = RandomTensor({N}, DType::kF32, 43);
    std::vector<Tensor> runs;
    for (const SimdTarget& target : SimdTargets()) {
      ScopedSimdTarget scope(target);
      const ExecContext ctx{&pool};
      Tensor losses = Tensor::Host({N}, DType::kF32), dx = Tensor::Host({N, V}, dt);
      ASSERT_TRUE(CrossEntropy(ctx, logits.view(), targets.view(), losses.view()).ok());
      ASSERT_TRUE(
          CrossEntropyBackward(ctx, logits.view(), targets.view(), dl.view(), dx.view()).ok());
      runs.push_back(std::move(losses));
      runs.push_back(std::move(dx));
    }
    for (size_t k = 2; k < runs.size(); k += 2) {
      EXPECT_TRUE(SameBits(runs[k], runs[0])) << "losses, target " << k / 2;
      EXPECT_TRUE(SameBits(runs[k + 1], runs[1])) << "dlogits, target " << k / 2;
    }
    // And within the float64 bounds of the sweeps above on these long rows (the exponentials
    // are summed in f64, so the row length adds only f64 roundings).
    const auto x = ToDoubles(logits.view());
    EXPECT_TRUE(AllClose(runs[0].view(), RefLosses(x, ToDoubles(targets.view()), V), 2 * kU32,
                         16 * kU32 * (1 + MaxAbs(x))));
    const auto dl_d = ToDoubles(dl.view());
    EXPECT_TRUE(AllClose(runs[1].view(), RefGrad(x, ToDoubles(targets.view()), dl_d, V),
                         UnitRoundoff(dt) + 16 * kU32, 16 * kU32 * MaxAbs(dl_d)));
  }
}

TEST(CrossEntropyTest, InPlaceAndThreadCountGiveIdenticalBits) {
  ThreadPool pool(3);
  const int64_t N = 129, V = 1031;
  for (DType dt : kFloatTypes) {
    Tensor logits = RandomTensor({N, V}, dt, 31, -5.0, 5.0);
    Tensor targets = MakeTargets(N, V, DType::kI64, 32);
    Tensor dl = RandomTensor({N}, DType::kF32, 33);
    Tensor l1 = Tensor::Host({N}, DType::kF32), l2 = Tensor::Host({N}, DType::kF32);
    ASSERT_TRUE(CrossEntropy(ExecContext{nullptr}, logits.view(), targets.view(), l1.view()).ok());
    ASSERT_TRUE(CrossEntropy(ExecContext{&pool}, logits.view(), targets.view(), l2.view()).ok());
    EXPECT_TRUE(SameBits(l1, l2));
    Tensor d1 = Tensor::Host({N, V}, dt);
    ASSERT_TRUE(CrossEntropyBackward(ExecContext{nullptr}, logits.view(), targets.view(), dl.view(),
                                     d1.view())
                    .ok());
    // In place, on the pool: dlogits aliases logits.
    ASSERT_TRUE(CrossEntropyBackward(ExecContext{&pool}, logits.view(), targets.view(), dl.view(),
                                     logits.view())
                    .ok());
    EXPECT_TRUE(SameBits(d1, logits)) << DTypeName(dt);
  }
}

TEST(CrossEntropyTest, OutOfRangeTargetsAreErrorsAndWriteNothing) {
  const ExecContext ctx;
  const int64_t N = 3, V = 4;
  Tensor logits = RandomTensor({N, V}, DType::kF32, 1);
  Tensor losses = Tensor::Host({N}, DType::kF32);
  Tensor dl = RandomTensor({N}, DType::kF32, 2);
  Tensor dx = Tensor::Host({N, V}, DType::kF32);
  for (double bad : {4.0, -1.0, -101.0}) {
    for (DType it : kIdTypes) {
      Tensor targets = FromDoubles({N}, it, {0, static_cast<double>(kIgnoreIndex), bad});
      WriteDoubles(std::vector<double>(N, 9.0), losses.view());
      WriteDoubles(std::vector<double>(N * V, 9.0), dx.view());
      absl::Status s = CrossEntropy(ctx, logits.view(), targets.view(), losses.view());
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
      const std::string want = "targets[2] = " + std::to_string(static_cast<int>(bad));
      EXPECT_NE(s.message().find(want), std::string::npos) << s;
      EXPECT_TRUE(AllClose(losses.view(), std::vector<double>(N, 9.0), 0, 0));
      s = CrossEntropyBackward(ctx, logits.view(), targets.view(), dl.view(), dx.view());
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
      EXPECT_NE(s.message().find("CrossEntropyBackward: " + want), std::string::npos) << s;
      EXPECT_TRUE(AllClose(dx.view(), std::vector<double>(N * V, 9.0), 0, 0));
    }
  }
}

TEST(CrossEntropyTest, BadArgumentsAreErrors) {
  const ExecContext ctx;
  const int64_t N = 3, V = 4;
  Tensor logits = RandomTensor({N, V}, DType::kF32, 1);
  Tensor targets = FromDoubles({N}, DType::kI32, {0, 1, 2});
  Tensor losses = Tensor::Host({N}, DType::kF32);
  Tensor dx = Tensor::Host({N, V}, DType::kF32);
  auto fwd = [&](const TensorView& x, const TensorView& t, const TensorView& l) {
    return CrossEntropy(ctx, x, t, l).code();
  };
  auto bwd = [&](const TensorView& x, const TensorView& t, const TensorView& l,
                 const TensorView& d) { return CrossEntropyBackward(ctx, x, t, l, d).code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const auto kUnimpl = absl::StatusCode::kUnimplemented;
  Tensor logits3 = RandomTensor({1, N, V}, DType::kF32, 1);
  EXPECT_EQ(fwd(logits3.view(), targets.view(), losses.view()), kInvalid);
  Tensor targets2 = FromDoubles({N - 1}, DType::kI32, {0, 1});
  EXPECT_EQ(fwd(logits.view(), targets2.view(), losses.view()), kInvalid);
  Tensor losses2 = Tensor::Host({N + 1}, DType::kF32);
  absl::Status s = CrossEntropy(ctx, logits.view(), targets.view(), losses2.view());
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("losses"), std::string::npos) << s;
  Tensor losses_bf16 = Tensor::Host({N}, DType::kBF16);
  EXPECT_EQ(fwd(logits.view(), targets.view(), losses_bf16.view()), kUnimpl);
  Tensor ftargets = FromDoubles({N}, DType::kF32, {0, 1, 2});
  EXPECT_EQ(fwd(logits.view(), ftargets.view(), losses.view()), kUnimpl);
  Tensor ilogits = RandomInts({N, V}, DType::kI32, 1, 0, 4);
  EXPECT_EQ(fwd(ilogits.view(), targets.view(), losses.view()), kUnimpl);
  Tensor dx_bf16 = Tensor::Host({N, V}, DType::kBF16);
  s = CrossEntropyBackward(ctx, logits.view(), targets.view(), losses.view(), dx_bf16.view());
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("dlogits has dtype bf16"), std::string::npos) << s;
  Tensor dx_wide = Tensor::Host({N, V + 1}, DType::kF32);
  EXPECT_EQ(bwd(logits.view(), targets.view(), losses.view(), dx_wide.view()), kInvalid);
  TensorView strided = dx_wide.view();
  strided.shape = {N, V};
  EXPECT_EQ(fwd(strided, targets.view(), losses.view()), kInvalid);
  EXPECT_EQ(bwd(logits.view(), targets.view(), losses.view(), strided), kInvalid);
  // Devices: a CUDA view is rejected before its memory is touched; mixed devices are invalid.
  TensorView cx = logits.view(), ct = targets.view(), cl = losses.view(), cd = dx.view();
  cx.device = ct.device = cl.device = cd.device = Device::Cuda(0);
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(CrossEntropy(ExecContext{}, cx, ct, cl)));
  EXPECT_TRUE(
      ::mt::testing::RejectsFakeCudaViews(CrossEntropyBackward(ExecContext{}, cx, ct, cl, cd)));
  EXPECT_EQ(fwd(cx, targets.view(), losses.view()), kInvalid);
  EXPECT_EQ(bwd(logits.view(), targets.view(), losses.view(), cd), kInvalid);
  // No rows: nothing to do.
  Tensor e_logits = Tensor::Host({0, V}, DType::kF32);
  Tensor e_targets = Tensor::Host({0}, DType::kI64);
  Tensor e_losses = Tensor::Host({0}, DType::kF32);
  EXPECT_TRUE(CrossEntropy(ctx, e_logits.view(), e_targets.view(), e_losses.view()).ok());
}

}  // namespace
}  // namespace ops
}  // namespace mt
